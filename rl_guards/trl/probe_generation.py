"""Probe generation: the trainer's own rollout path, run outside of training for the guards that probe (drift,
reward probes), leaving the trainer's metrics, logs and random state as they were."""

from __future__ import annotations

import copy
import logging
from typing import Any

from rl_guards.core.rng import forked_rng
from rl_guards.guards.base import RunContext
from rl_guards.rewards.slicing import drain_watched

logger = logging.getLogger("rl_guards")
_UNSET = object()  # an attribute the trainer did not have


def probe_generate(run: Any, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Generate and score ``rows`` (each ``num_generations`` times) with the trainer's own path, outside of
    training: the trainer's metrics, completions table and token count are restored afterwards and no guard
    sees the batch. Returns this rank's completions: ids (unpadded), terminated flags, rewards per function;
    or ``{"error": why}`` on every rank alike when it failed on some rank.

    Collective (TRL's path gathers): a failure on one rank (an out-of-memory in generation) must not leave the
    ranks in different collectives. The local stages (prompt templating, generation, log-prob forwards) fail
    softly: the rank goes on with placeholder rows through the same collectives as the others, and one
    all_reduce then tells every rank whether to drop the result.
    """
    import torch

    trainer = run.trainer
    training = bool(getattr(trainer.model, "training", True))
    group = int(
        trainer.num_generations
        if training
        else (getattr(trainer, "num_generations_eval", None) or trainer.num_generations)
    )
    inputs = [dict(row) for row in rows for _ in range(group)]
    saved = (copy.deepcopy(trainer._metrics), copy.deepcopy(getattr(trainer, "_logs", None)),
             getattr(trainer.state, "num_input_tokens_seen", None))  # fmt: skip
    stages = _SoftLocalStages(trainer, run.ctx)
    failure: str | None = None
    output: Any = None
    pending: tuple[Any, ...] | None = None
    try:
        # Sampling draws from the run's generators: forked, so the run samples as if the probe never ran.
        with forked_rng(), torch.no_grad(), stages:
            output = run._original_generate(inputs)
        pending = run._pending_rewards
        failure = stages.failure
    except Exception as exc:  # past the local stages: this rank's error is agreed on below all the same
        failure = stages.failure or f"{type(exc).__name__}: {exc}"
    finally:
        trainer._metrics = saved[0]
        if saved[1] is not None:
            trainer._logs = saved[1]
        if saved[2] is not None:
            trainer.state.num_input_tokens_seen = saved[2]
        run._pending_rewards = None
        if run.ctx.reward_error_log is not None:
            run.ctx.reward_error_log.take()
        drain_watched()  # a watched judge's inputs of the probe batch are not a training batch's
    failed_rank = run.engine.agreement.failed_rank(failure)
    if failed_rank is not None:
        where = f"on rank {failed_rank}" if run.ctx.world_size > 1 else ""
        why = f": {failure}" if failure is not None else " (the error is in that rank's log)"
        if failure is not None:
            logger.warning("rl_guards: probe generation failed %s: %s", where or "here", failure)
        return {"error": f"probe generation failed{' ' + where if where else ''}{why}"}
    ids = output["completion_ids"].detach().cpu()
    mask = output["completion_mask"].detach().cpu()
    eos = set(run.ctx.eos_token_ids)
    completions = [
        [int(t) for t, m in zip(row, keep, strict=True) if m]
        for row, keep in zip(ids.tolist(), mask.tolist(), strict=True)
    ]
    rewards = torch.as_tensor(pending[4]).detach().float().cpu() if pending is not None else None
    n_local = len(completions)
    start = run.ctx.process_index * n_local if rewards is not None and rewards.shape[0] != n_local else 0
    local = rewards[start : start + n_local].tolist() if rewards is not None else [[] for _ in completions]
    weights = getattr(trainer, "reward_weights", None)
    return {
        "group_size": group,
        "completion_ids": completions,
        "terminated": [bool(c) and c[-1] in eos for c in completions],
        "rewards": [[None if v != v else float(v) for v in row] for row in local],
        "reward_names": list(run.ctx.reward_func_names),
        "reward_weights": [float(w) for w in weights.tolist()] if weights is not None else None,
    }


class _SoftLocalStages:
    """While a probe runs: TRL's local, memory-hungry stages return placeholders instead of raising.

    ``_tokenize_prompts``, ``_generate_single_turn`` and ``_get_per_token_logps_and_entropies`` run no collective
    (with transformers generation), so a rank whose stage fails (out of memory) can carry on with one-token rows
    through the collectives that follow, as the other ranks do; ``failure`` says what failed. Patched on the
    instance for the probe only, then put back.
    """

    STAGES = ("_tokenize_prompts", "_generate_single_turn", "_get_per_token_logps_and_entropies")

    def __init__(self, trainer: Any, ctx: RunContext) -> None:
        self.trainer = trainer
        self.failure: str | None = None
        pad = ctx.pad_token_id if ctx.pad_token_id is not None else 0
        self.pad = int(pad)
        self.eos = int(ctx.eos_token_ids[0]) if ctx.eos_token_ids else self.pad
        self._saved: dict[str, Any] = {}

    def _fail(self, stage: str, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{stage}: {type(exc).__name__}: {exc}"

    def __enter__(self) -> _SoftLocalStages:
        trainer = self.trainer
        for name in self.STAGES:
            original = getattr(trainer, name, None)
            if not callable(original):
                continue
            self._saved[name] = trainer.__dict__.get(name, _UNSET)
            setattr(trainer, name, getattr(self, f"_soft{name}")(original))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, before in self._saved.items():
            if before is _UNSET:
                self.trainer.__dict__.pop(name, None)
            else:
                setattr(self.trainer, name, before)
        self._saved = {}

    def _soft_tokenize_prompts(self, original: Any) -> Any:
        def run(prompts: list[Any], *args: Any, **kwargs: Any) -> Any:
            if self.failure is None:
                try:
                    return original(prompts, *args, **kwargs)
                except Exception as exc:
                    self._fail("prompt templating", exc)
            return [[self.pad] for _ in prompts], None, {}

        return run

    def _soft_generate_single_turn(self, original: Any) -> Any:
        def run(prompt_ids: list[Any], *args: Any, **kwargs: Any) -> Any:
            if self.failure is None:
                try:
                    return original(prompt_ids, *args, **kwargs)
                except Exception as exc:
                    self._fail("generation", exc)
            return [[self.eos] for _ in prompt_ids], None

        return run

    def _soft_get_per_token_logps_and_entropies(self, original: Any) -> Any:
        def run(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any, **kwargs: Any) -> Any:
            if self.failure is None:
                try:
                    return original(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
                except Exception as exc:
                    self._fail("log-prob forward", exc)
            import torch

            return torch.zeros(input_ids.size(0), logits_to_keep, device=input_ids.device), None, None

        return run


__all__ = ["probe_generate"]
