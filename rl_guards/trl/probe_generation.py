"""Probe generation: the trainer's own rollout path, run outside of training for the guards that probe (drift,
reward probes), leaving the trainer's metrics, logs and random state as they were."""

from __future__ import annotations

import copy
import logging
from contextlib import nullcontext
from typing import Any

from rl_guards.core.rng import forked_rng
from rl_guards.guards.base import RunContext
from rl_guards.rewards.slicing import drain_watched
from rl_guards.tensors.lockstep import Reported, gated_torch

logger = logging.getLogger("rl_guards")
_UNSET = object()  # an attribute the trainer did not have


def generation_batch_size(trainer: Any) -> int:
    """Completions per rank in one training generation call: ``per_device_train_batch_size * steps_per_generation``
    (what TRL's dataloader hands ``_generate_and_score_completions``)."""
    args = trainer.args
    return max(1, int(args.per_device_train_batch_size) * int(getattr(args, "steps_per_generation", None) or 1))


def probe_generate(run: Any, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Generate and score ``rows`` (each ``num_generations`` times) as training batches, with the trainer's own
    path, outside of training: the trainer's metrics, completions table and token count are restored afterwards and
    no guard sees the batch. Returns this rank's completions: ids (unpadded), terminated flags, rewards per function;
    or ``{"error": why, "cause": "memory" | "trainer"}`` on every rank alike when it failed on some rank.

    The rows go through ``_generate_and_score_completions`` in batches of the trainer's own generation batch size,
    the last one filled up with repeats of the first rows (dropped afterwards): each call is shaped as a training
    call, so whatever the configuration does to a batch (tool calls and their second generation, masking truncated
    completions, environments) happens to the probe as it happens in training, and the probe never needs more
    memory than a training batch.

    Collective (TRL's path gathers): it runs in a lockstep section (:mod:`rl_guards.tensors.lockstep`) in which the
    trainer's own collectives are gated too, so an exception on any rank, before, inside or after TRL's path, leaves
    every rank at the same point, each knowing that rank's error. The local stages (prompt templating, generation,
    log-prob forwards) fail softly: the rank goes on with placeholder rows through the same collectives as the
    others and reports its failure once they are done, so an out-of-memory costs no unwinding of TRL's code.
    """
    with run.engine.ranks.section("probe generation") as section:
        result = _generate(run, rows)
    failure = section.failure
    if failure is None:
        return result
    where = f" {failure.where}" if run.ctx.world_size > 1 else ""
    logger.warning("rl_guards: probe generation failed%s: %s", where, failure.message)
    memory = failure.error_type in ("OutOfMemoryError", "MemoryError") or "out of memory" in failure.message
    return {"error": f"probe generation failed{where}: {failure.message}", "cause": "memory" if memory else "trainer"}


def _generate(run: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`probe_generate` on this rank; raises on a failure (its section agrees on it)."""
    import torch

    trainer = run.trainer
    group = int(trainer.num_generations)
    inputs = [dict(row) for row in rows for _ in range(group)]
    size = generation_batch_size(trainer)
    batches = [inputs[i : i + size] for i in range(0, len(inputs), size)]
    if batches and len(batches[-1]) < size:  # the filler rows' completions are dropped below
        batches[-1] = batches[-1] + [dict(inputs[i % len(inputs)]) for i in range(size - len(batches[-1]))]
    saved = (copy.deepcopy(trainer._metrics), copy.deepcopy(getattr(trainer, "_logs", None)),
             getattr(trainer.state, "num_input_tokens_seen", None))  # fmt: skip
    stages = _SoftLocalStages(trainer, run.ctx)
    outputs: list[tuple[Any, tuple[Any, ...] | None]] = []
    model = trainer.model
    was_training = bool(getattr(model, "training", True))
    report_to = getattr(trainer.args, "report_to", None)
    try:
        # TRL's profiling_context logs every timed call straight to the trackers (W&B rows of their own): the probe's
        # calls are not training's, so they are timed for no one.
        trainer.args.report_to = []
        # A training batch whenever the probe runs (at train start the model is not in train mode yet): TRL reads the
        # mode for its generation settings, so the baseline and the checkpoints' probes sample alike.
        model.train(True)
        # Sampling draws from the run's generators: forked, so the run samples as if the probe never ran.
        log = run.ctx.reward_error_log
        checking = log.checking(run.ctx.checked_calls) if log is not None and run.ctx.checked_calls else nullcontext()
        # the reward functions score the probe's completions for the guards, not for training: every call bounded
        with forked_rng(), torch.no_grad(), stages, gated_torch(), checking:
            for batch in batches:
                outputs.append((run._original_generate(batch), run._pending_rewards))
                run._pending_rewards = None
    finally:
        trainer.args.report_to = report_to
        model.train(was_training)
        trainer._metrics = saved[0]
        if saved[1] is not None:
            trainer._logs = saved[1]
        if saved[2] is not None:
            trainer.state.num_input_tokens_seen = saved[2]
        run._pending_rewards = None
        if run.ctx.reward_error_log is not None:
            run.ctx.reward_error_log.take()
        drain_watched()  # a watched judge's inputs of the probe batch are not a training batch's
    if stages.failure is not None:  # every rank is past TRL's collectives: the section agrees on it
        raise Reported(stages.failure, stages.error_type)
    eos = set(run.ctx.eos_token_ids)
    completions: list[list[int]] = []
    local: list[list[float]] = []
    for output, pending in outputs:
        ids = output["completion_ids"].detach().cpu()
        mask = output["completion_mask"].detach().cpu()
        part = [
            [int(t) for t, m in zip(row, keep, strict=True) if m]
            for row, keep in zip(ids.tolist(), mask.tolist(), strict=True)
        ]
        rewards = torch.as_tensor(pending[4]).detach().float().cpu() if pending is not None else None
        start = run.ctx.process_index * len(part) if rewards is not None and rewards.shape[0] != len(part) else 0
        local += rewards[start : start + len(part)].tolist() if rewards is not None else [[] for _ in part]
        completions += part
    completions, local = completions[: len(inputs)], local[: len(inputs)]
    weights = getattr(trainer, "reward_weights", None)
    log = run.ctx.reward_error_log
    stalled = dict(log.stalled_now) if log is not None else {}
    if log is not None:
        log.stalled_now.clear()
    names = list(run.ctx.reward_func_names)
    return {
        "stalled": {names[i] if i < len(names) else str(i): why for i, why in stalled.items()},
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
        self.error_type = ""
        pad = ctx.pad_token_id if ctx.pad_token_id is not None else 0
        self.pad = int(pad)
        self.eos = int(ctx.eos_token_ids[0]) if ctx.eos_token_ids else self.pad
        self._saved: dict[str, Any] = {}

    def _fail(self, stage: str, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{stage}: {type(exc).__name__}: {exc}"
            self.error_type = type(exc).__name__

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


__all__ = ["generation_batch_size", "probe_generate"]
