"""The TRL adapter: one call puts every guard on a built ``GRPOTrainer``.

::

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=ds)
    run = rl_guards.install(trainer, GuardsConfig.from_yaml("guards.yaml"))
    trainer.train()
    print(run.summary())

What it wraps (on the instance, never the class):

- ``_calculate_rewards``: to see this rank's rows exactly as the reward functions saw them (dataset columns such
  as ``task``, completion text and ids) and the rewards of every function (TRL gathers those over ranks).
- ``_generate_and_score_completions``: to see the tensors the loss will use (masks, advantages).

Per generation batch, on every rank (cost flat in the number of ranks: each rank looks at its own rows)::

    output = trainer._generate_and_score_completions(inputs)   # TRL
    masking.check_tensors(output)          # per-row rule bits, on the batch's device (no sync)
    scan(own rows) for think tags, slicing  # per-row numbers, this rank's rows only
    all_gather([rows, features])           # numbers only (~16 floats a row); the batch's one host transfer
    for guard in guards: guard.on_batch(batch, reporter)   # every rank decides from the same numbers
    all_reduce([stop, guard, need_text])   # all ranks stop together
    text moves only for a message that shows rows, and to the main process for a dump
    trainer._metrics[mode] += guard metrics                 # -> trainer.log -> log_history / W&B

Dumps are written by a background thread (:mod:`rl_guards.rollouts.writer`); a checkpoint's dump is on disk
before the trainer writes the checkpoint. Both methods are private TRL API (stable from 0.19 to 1.16). They are
checked at install; when they are missing, the guards that need them are reported unavailable and the others
still run.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import math
import warnings
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch, nan_to_none
from rl_guards.core.completions import completion_text
from rl_guards.core.metric_set import MetricFilter
from rl_guards.core.rng import forked_rng
from rl_guards.core.run_summary import task_summary_text
from rl_guards.core.task_labels import TaskLabels, task_hash, task_name
from rl_guards.core.think_markup import prompts_open_block
from rl_guards.engine.findings_file import FindingsFile
from rl_guards.engine.start_checks import run_begin
from rl_guards.errors import ConfigError, GuardError
from rl_guards.guards.base import Finding, Guard, GuardSession, RLGuardsWarning, RunContext, run_hook
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.guards.think_tags import markup_from_config
from rl_guards.rewards.callables import is_async_reward, trl_awaits_async_objects
from rl_guards.rewards.row_errors import CatchRowErrors, RowErrorLog, catch_row_errors
from rl_guards.rewards.slicing import drain_watched
from rl_guards.tensors import collectives
from rl_guards.trl.log_routing import SignalRouter

logger = logging.getLogger("rl_guards")

TESTED_TRL = ("1.13", "1.14", "1.15", "1.16")  # the suite runs on the oldest and the newest in CI
REQUIRED_METHODS = ("_generate_and_score_completions", "_calculate_rewards")
REQUIRED_OUTPUT_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
# Dataset columns never copied into RolloutBatch.columns (TRL's own or too large to gather).
_SKIP_COLUMNS = frozenset({"prompt", "completion", "completion_ids", "images", "image"})
# Per-row numbers every rank contributes for its rows (then guards' features): the gathered batch.
_UNSET = object()  # an attribute the trainer did not have
BASE_FEATURES = ("ok", "advantage", "task", "length", "truncated", "thinking", "prompt_opened")
# The run's section in trainer_state.json (``stateful_callbacks``): filed by HF under the class name of its
# ExportableState. Up to 437f4ff that was GuardRun itself; such sections are still read.
STATE_KEY = "GuardRunState"
LEGACY_STATE_KEY = "GuardRun"
STATE_VERSION = 1  # bumped when a saved part changes meaning; a newer section is not read, it is said and dropped


def install(
    trainer: Any,
    config: GuardsConfig | dict[str, Any] | str | None = None,
    *,
    guards: list[type[Guard]] | None = None,
) -> GuardRun:
    """Attach rl_guards to a built TRL ``GRPOTrainer`` and return the run handle.

    ``config`` may be a GuardsConfig, a dict, or a YAML path. ``guards`` overrides the registry (tests).
    """
    if config is None:
        config = GuardsConfig()
    elif isinstance(config, dict):
        config = GuardsConfig.from_dict(config)
    elif isinstance(config, str):
        config = GuardsConfig.from_yaml(config)
    elif not isinstance(config, GuardsConfig):
        raise ConfigError(f"config must be a GuardsConfig, dict or YAML path, got {type(config).__name__}")
    config.validate()  # a config edited in code after construction is checked again before training
    handler = getattr(trainer, "callback_handler", None)
    if any(isinstance(cb, GuardRun) for cb in getattr(handler, "callbacks", [])):
        raise ConfigError("rl_guards is already installed on this trainer; call install() once per trainer")
    run = GuardRun(trainer, config, guards if guards is not None else BATCH_GUARDS)
    trainer.add_callback(run)
    trainer.add_callback(run.saved_state)
    return run


def rl_guards_version() -> str:
    from rl_guards import __version__

    return __version__


def _trl_version() -> str:
    try:
        import trl

        return str(trl.__version__)
    except Exception:
        return "unknown"


class GuardRunState(TrainerCallback, ExportableState):
    """What the trainer saves of a :class:`GuardRun` in ``trainer_state.json`` (``stateful_callbacks``).

    A small object apart from the run, because with ``restore_callback_states_from_checkpoint=True`` HF rebuilds
    each stateful callback as ``type(cb)(**saved["args"])``, sets the saved attributes on the new instance and puts
    it in the old one's place. Here that is harmless: any args are accepted, the attributes are kept as data in
    ``saved`` (never over a method), and the run binds the rebuilt instance to itself at train begin. The run's state
    itself is restored in place into the live run, from ``state.stateful_callbacks``, with or without that flag.
    """

    def __init__(self, **args: Any) -> None:
        object.__setattr__(self, "run", None)
        object.__setattr__(self, "saved", {"args": dict(args)})

    def __setattr__(self, name: str, value: Any) -> None:
        self.saved[name] = value  # HF's rebuild sets the saved attributes: kept as data

    def bind(self, run: GuardRun) -> None:
        object.__setattr__(self, "run", run)

    def state(self) -> dict[str, Any]:
        if self.run is None:  # never bound (a run that never began): nothing of a run to save
            return {"args": {}, "attributes": {"version": STATE_VERSION}}
        return self.run.state()


class GuardRun(TrainerCallback):
    """Drives the guards from a trainer's events; holds the findings (``session``) and the guards."""

    def __init__(self, trainer: Any, config: GuardsConfig, guard_classes: list[type[Guard]]) -> None:
        self.trainer = trainer
        self.saved_state = GuardRunState()  # the trainer's stateful callback for this run (see GuardRunState)
        self.saved_state.bind(self)
        self.config = config
        self.session = GuardSession()
        self.unavailable: dict[str, str] = {}
        self.batches_seen = 0
        self.last_batch: RolloutBatch | None = None
        self._pending_rewards: tuple[Any, ...] | None = None
        self._restored = False
        self.task_labels = TaskLabels(config.tasks.max_tasks)
        self.session.defer = True  # stops and row-showing messages settle once the batch's text is in place
        self._step_batches: list[RolloutBatch] = []  # this step's train batches (a checkpoint dumps them)
        self._filled_on_main: set[int] = set()  # ids of batches whose rows the main process already holds
        self._task_registry: dict[int, str] = {}  # task_hash -> name, the same on every rank
        self._held_stop: GuardError | None = None  # found between batches; raised at the next agreement

        if config.think_tags.per_row_thinking:
            from rl_guards.trl.thinking_mix import PER_ROW_ATTR, honour_thinking_column

            if getattr(trainer.args, PER_ROW_ATTR, None) is None:  # not already done by hand
                honour_thinking_column(trainer, column=config.think_tags.thinking_column)
        self.guards: list[Guard] = [cls(config) for cls in guard_classes]
        self.guards = [g for g in self.guards if g.enabled]
        self.ctx = self._build_context()
        self.markup = markup_from_config(config.think_tags, self.ctx.template_text)
        counts = _dataset_task_counts(self.ctx.train_dataset, config.tasks)
        columns = getattr(self.ctx.train_dataset, "column_names", None)
        single_task = isinstance(columns, list) and config.tasks.task_column not in columns
        self.session.metric_filter = MetricFilter(config.metrics.level, single_task=single_task)
        self.router = SignalRouter(trainer, self.session, self.ctx.is_main_process)
        self.router.before_tracker_end = self._end_training  # a tracker's run finishing: the train-end work first
        self._ended = False
        # findings on disk next to the dumps as they happen (main process; the file only once something is found)
        self.findings_file = FindingsFile(self.session, self._rollouts_folder) if self.ctx.is_main_process else None
        self.task_labels.seed(counts)
        self._task_registry.update({task_hash(name): name for name in counts})
        for guard in self.guards:
            guard.setup(self.ctx)
        self._configure_reward_funcs()
        self._check_compatibility()
        self._wrap()
        self._shield_callback_restore()

    # ----- set-up ----------------------------------------------------------------------------------------
    def _build_context(self) -> RunContext:
        trainer = self.trainer
        args = trainer.args
        tokenizer = getattr(trainer, "_tokenizer", None) or getattr(trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer
        accelerator = getattr(trainer, "accelerator", None)
        kwargs = getattr(trainer, "chat_template_kwargs", None) or getattr(args, "chat_template_kwargs", None) or {}

        def render_prompts(prompts: list[Any]) -> list[list[int]]:
            # With environment_factory, TRL renders each prompt with its batch environment's tools, which it sets
            # only inside a rollout: outside one, render with the first environment's (the only one, usually).
            factories = getattr(trainer, "environment_factories", None)
            if not factories:
                ids = trainer._tokenize_prompts(prompts)[0]
                return [list(map(int, row)) for row in ids]
            before = trainer.__dict__.get("_batch_environments", _UNSET)
            trainer._batch_environments = [next(iter(factories))] * len(prompts)
            try:
                ids = trainer._tokenize_prompts(prompts)[0]
            finally:
                if before is _UNSET:
                    trainer.__dict__.pop("_batch_environments", None)
                else:
                    trainer._batch_environments = before
            return [list(map(int, row)) for row in ids]

        def decode(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=False)

        def decode_text(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=True)

        eos = list(getattr(trainer, "eos_token_ids", None) or [])
        if not eos and getattr(tokenizer, "eos_token_id", None) is not None:
            eos = [tokenizer.eos_token_id]
        return RunContext(
            output_dir=str(args.output_dir),
            is_main_process=bool(getattr(accelerator, "is_main_process", True)),
            world_size=int(getattr(accelerator, "num_processes", 1)),
            process_index=int(getattr(accelerator, "process_index", 0)),
            tokenizer=tokenizer,
            args=args,
            train_dataset=getattr(trainer, "train_dataset", None),
            eval_dataset=getattr(trainer, "eval_dataset", None),
            chat_template=getattr(trainer, "chat_template", None),
            chat_template_kwargs=dict(kwargs),
            eos_token_ids=[int(e) for e in eos],
            pad_token_id=getattr(tokenizer, "pad_token_id", None),
            reward_func_names=list(getattr(trainer, "reward_func_names", []) or []),
            reward_funcs=list(getattr(trainer, "reward_funcs", []) or []),
            render_prompts=render_prompts if hasattr(trainer, "_tokenize_prompts") else None,
            decode=decode if tokenizer is not None else None,
            decode_text=decode_text if tokenizer is not None else None,
        )

    def _configure_reward_funcs(self) -> None:
        """Give reward functions that ask for it (``configure``) the tokenizer and the trainer's template kwargs."""
        for fn in self.ctx.reward_funcs:
            configure = getattr(fn, "configure", None)
            if callable(configure) and not isinstance(fn, type):
                try:
                    kwargs: dict[str, Any] = {"tokenizer": self.ctx.tokenizer}
                    kwargs["chat_template_kwargs"] = self.ctx.chat_template_kwargs
                    if "metrics_level" in inspect.signature(configure).parameters:
                        kwargs["metrics_level"] = self.config.metrics.level
                    configure(**kwargs)
                except Exception as exc:  # never fatal: the function keeps its own defaults
                    logger.warning("rl_guards: could not configure reward function %r: %s", fn, exc)

    def _check_compatibility(self) -> None:
        """Say what this trainer and TRL version get; batch guards off (with the reason) where TRL's hook points are
        missing, e.g. a trainer that scores rollouts in another process (TRL's experimental AsyncGRPOTrainer)."""
        version = _trl_version()
        kind = type(self.trainer).__name__
        tested = ", ".join(TESTED_TRL)
        if not any(version == v or version.startswith(f"{v}.") for v in TESTED_TRL):
            logger.warning("rl_guards %s was tested with TRL %s; this is TRL %s.", rl_guards_version(), tested, version)
        missing = [m for m in REQUIRED_METHODS if not callable(getattr(self.trainer, m, None))]
        if not isinstance(getattr(self.trainer, "_metrics", None), dict):
            missing.append("_metrics")
        if missing:
            reason = f"{kind} (TRL {version}) has no {', '.join(missing)}"
            for guard in self.guards:
                if type(guard).on_batch is not Guard.on_batch or hasattr(guard, "check_tensors"):
                    self.unavailable[guard.name] = reason
            message = (
                f"rl_guards: {reason}: it scores rollouts where the batch guards cannot see them. Off: "
                f"{', '.join(sorted(self.unavailable))}. Still on: the start-of-training checks and the "
                "reward-function wrappers (StrayThinkPenalty, route(), blind_judge, watch_inputs), which run "
                "wherever the reward functions run."
            )
            warnings.warn(message, RLGuardsWarning, stacklevel=4)
            logger.warning(message)
        else:
            logger.info("rl_guards: installed on %s (TRL %s; tested with TRL %s).", kind, version, tested)

    def _wrap(self) -> None:
        if self.unavailable:
            return
        trainer = self.trainer
        self._catch_reward_errors()
        original_rewards = trainer._calculate_rewards
        original_generate = trainer._generate_and_score_completions

        def _calculate_rewards(inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            rewards = original_rewards(inputs, prompts, completions, completion_ids_list)
            self._pending_rewards = (inputs, prompts, completions, completion_ids_list, rewards)
            return rewards

        def _generate_and_score_completions(inputs: Any) -> Any:
            output = original_generate(inputs)
            self._after_generation(output)
            return output

        trainer._calculate_rewards = _calculate_rewards
        trainer._generate_and_score_completions = _generate_and_score_completions
        self._original_generate = original_generate
        self.ctx.probe_generate = self._probe_generate
        self.ctx.all_gather_rows = self._all_gather_rows

    def _probe_generate(self, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Generate and score ``rows`` (each ``num_generations`` times) with the trainer's own path, outside of
        training: the trainer's metrics, completions table and token count are restored afterwards and no guard
        sees the batch. Returns this rank's completions: ids (unpadded), terminated flags, rewards per function;
        or ``{"error": why}`` on every rank alike when it failed on some rank.

        Collective (TRL's path gathers): a failure on one rank (an out-of-memory in generation) must not leave the
        ranks in different collectives. The local stages (prompt templating, generation, log-prob forwards) fail
        softly: the rank goes on with placeholder rows through the same collectives as the others, and one
        all_reduce then tells every rank whether to drop the result.
        """
        import copy

        import torch

        trainer = self.trainer
        training = bool(getattr(trainer.model, "training", True))
        group = int(
            trainer.num_generations
            if training
            else (getattr(trainer, "num_generations_eval", None) or trainer.num_generations)
        )
        inputs = [dict(row) for row in rows for _ in range(group)]
        saved = (copy.deepcopy(trainer._metrics), copy.deepcopy(getattr(trainer, "_logs", None)),
                 getattr(trainer.state, "num_input_tokens_seen", None))  # fmt: skip
        stages = _SoftLocalStages(trainer, self.ctx)
        failure: str | None = None
        output: Any = None
        pending: tuple[Any, ...] | None = None
        try:
            # Sampling draws from the run's generators: forked, so the run samples as if the probe never ran.
            with forked_rng(), torch.no_grad(), stages:
                output = self._original_generate(inputs)
            pending = self._pending_rewards
            failure = stages.failure
        except Exception as exc:  # past the local stages: this rank's error is agreed on below all the same
            failure = stages.failure or f"{type(exc).__name__}: {exc}"
        finally:
            trainer._metrics = saved[0]
            if saved[1] is not None:
                trainer._logs = saved[1]
            if saved[2] is not None:
                trainer.state.num_input_tokens_seen = saved[2]
            self._pending_rewards = None
            if self.ctx.reward_error_log is not None:
                self.ctx.reward_error_log.take()
            drain_watched()  # a watched judge's inputs of the probe batch are not a training batch's
        failed_rank = self._agree_on_failure(failure)
        if failed_rank is not None:
            where = f"on rank {failed_rank}" if self.ctx.world_size > 1 else ""
            why = f": {failure}" if failure is not None else " (the error is in that rank's log)"
            if failure is not None:
                logger.warning("rl_guards: probe generation failed %s: %s", where or "here", failure)
            return {"error": f"probe generation failed{' ' + where if where else ''}{why}"}
        ids = output["completion_ids"].detach().cpu()
        mask = output["completion_mask"].detach().cpu()
        eos = set(self.ctx.eos_token_ids)
        completions = [
            [int(t) for t, m in zip(row, keep, strict=True) if m]
            for row, keep in zip(ids.tolist(), mask.tolist(), strict=True)
        ]
        rewards = torch.as_tensor(pending[4]).detach().float().cpu() if pending is not None else None
        n_local = len(completions)
        start = self.ctx.process_index * n_local if rewards is not None and rewards.shape[0] != n_local else 0
        local = rewards[start : start + n_local].tolist() if rewards is not None else [[] for _ in completions]
        weights = getattr(trainer, "reward_weights", None)
        return {
            "group_size": group,
            "completion_ids": completions,
            "terminated": [bool(c) and c[-1] in eos for c in completions],
            "rewards": [[None if v != v else float(v) for v in row] for row in local],
            "reward_names": list(self.ctx.reward_func_names),
            "reward_weights": [float(w) for w in weights.tolist()] if weights is not None else None,
        }

    def _all_gather_rows(self, rows: list[list[float]]) -> list[list[float]]:
        """Every rank's numeric rows (rank order); this rank's alone without a process group."""
        import torch

        if self.ctx.world_size <= 1 or not collectives.distributed():
            return rows
        width = len(rows[0]) if rows else 0
        local = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), width).to(self._device())
        return collectives.all_gather_rows(local).cpu().tolist()

    def _agree_on_failure(self, failure: str | None) -> int | None:
        """Whether some rank failed (one all_reduce on every rank): the highest failing rank, or None."""
        if self.ctx.world_size <= 1 or not collectives.distributed():
            return None if failure is None else self.ctx.process_index
        failed, rank = collectives.all_reduce_ints(
            [int(failure is not None), self.ctx.process_index + 1 if failure is not None else 0],
            op="max",
            device=self._device(),
        )
        return rank - 1 if failed else None

    def _catch_reward_errors(self) -> None:
        """Wrap each plain reward function so that rows it raises on are scored None and reported, not fatal."""
        funcs = getattr(self.trainer, "reward_funcs", None)
        if not self.config.reward_errors.enabled or not isinstance(funcs, list):
            return
        log = RowErrorLog()
        async_ok = trl_awaits_async_objects()  # TRL 1.13 awaits only plain coroutine functions: leave those as is
        for index, fn in enumerate(funcs):
            if not callable(fn) or isinstance(fn, CatchRowErrors) or hasattr(fn, "forward"):
                continue
            if is_async_reward(fn) and not async_ok:
                continue
            funcs[index] = catch_row_errors(fn, index, log)
        self.ctx.reward_error_log = log

    # ----- per batch -------------------------------------------------------------------------------------
    def _mode(self) -> str:
        model = getattr(self.trainer, "model", None)
        return "train" if getattr(model, "training", True) else "eval"

    def _after_generation(self, output: dict[str, Any]) -> None:
        """One generation batch, on every rank: shard-local scans, one gather of numbers, global decisions.

        Collectives, in the same order on every rank whatever happens locally: the per-row feature gather, a name
        exchange (only when a task name is new), the decision all_reduce, and only when a message or a dump needs
        it, the text of the rows concerned.
        """
        missing = [k for k in REQUIRED_OUTPUT_KEYS if k not in output]
        pending, self._pending_rewards = self._pending_rewards, None
        if missing or pending is None:
            key = ("hook", "missing_keys")
            if key not in self.session.counts:
                logger.warning("rl_guards: rollout batch lacks %s; batch guards skipped (TRL drift).", missing)
            self.session.counts[key] += 1
            return
        # TRL's numbering: a train batch belongs to the step it is trained in (global_step + 1 once the optimizer
        # steps), as TRL's completions table and W&B show it; an eval batch to the step it evaluates.
        step = int(self.trainer.state.global_step) + (1 if self._mode() == "train" else 0)
        self._run_guards("check_tensors", step, output)  # the mask check stages per-row bits on the device
        batch = self._gather_batch(output, pending, step)
        if batch is None:  # some rank could not build its rows: skipped on every rank, no hang
            held = self._take_held_stop()
            stop, _ = self._decide(held, step, need_text=False)
            if stop is not None:
                self._flush_metrics()
                self._log_now(step)
                raise self._share_stop(held, stop)
            self._flush_metrics()
            return
        self.batches_seen += 1
        self.last_batch = batch
        if batch.mode == "train":
            self._step_batches = [b for b in self._step_batches if b.step == step] + [batch]
        raised = self._run_guards("on_batch", step, batch) or self._take_held_stop()
        needed = self.session.pending_rows()
        stop, need_text = self._decide(raised, step, need_text=any(not batch.holds(r) for r in needed))
        if need_text:
            self._fill_rows([batch], everywhere=True, rows=needed)
        if stop is not None or any(g.wants_rows(batch) for g in self.guards if hasattr(g, "wants_rows")):
            self._fill_rows([batch], everywhere=False)
        self._run_guards("after_batch", step, batch)
        error = self.session.settle()  # messages rendered now that their rows are here
        if stop is not None:
            stop = self._share_stop(raised or error, stop)
            self._on_stop(batch, step)
        self._flush_metrics()
        if stop is not None:
            self._log_now(step)
            raise stop

    def _run_guards(self, hook: str, step: int, *args: Any) -> GuardError | None:
        """Call ``hook`` on every guard that has it; the first GuardError a guard raised itself is returned.

        Raise-mode violations do not raise here (the session defers them to :meth:`GuardSession.settle`), so the
        guards after a stopping one still run and the failing batch's metrics and findings are complete.
        """
        stop: GuardError | None = None
        for guard in self.guards:
            if not hasattr(guard, hook):
                continue
            try:
                run_hook(guard, hook, self.session, step, *args, settle=False)
            except GuardError as exc:
                stop = stop or exc
        return stop

    def _decide(self, raised: GuardError | None, step: int, *, need_text: bool) -> tuple[GuardError | None, bool]:
        """Stop or not, fetch text or not: one decision for all ranks (one all_reduce of three integers, max).

        Every rank calls this at the same points, stopping or not, so no rank is left waiting in a collective.
        """
        stop = raised
        stopping = self.session.stopping
        if stop is None and stopping is not None:  # its message is rendered at settle(); this only carries the guard
            stop = GuardError(f"[rl_guards/{stopping.guard}] {stopping.kind}", guard=stopping.guard, step=step)
        if self.ctx.world_size <= 1 or not collectives.distributed():
            return stop, need_text
        names = [g.name for g in self.guards]
        mine = names.index(stop.guard) + 1 if stop is not None and stop.guard in names else 0
        stopping_any, index, text = collectives.all_reduce_ints(
            [int(stop is not None), mine, int(need_text)], op="max", device=self._device()
        )
        if stop is None and stopping_any:
            name = names[index - 1] if index else "hook"
            stop = GuardError(
                f"[rl_guards/{name}] a guard stopped the run on another rank at step {step}; this rank stops with "
                "it (the finding and its message are in that rank's log).",
                guard=name,
                step=step,
            )
        return stop, bool(text)

    def _device(self) -> Any:
        return getattr(getattr(self.trainer, "accelerator", None), "device", None)

    def _on_stop(self, batch: RolloutBatch, step: int) -> None:
        """A guard is stopping the run: let the others save evidence (the recorder dumps the batch)."""
        for guard in self.guards:
            try:
                run_hook(guard, "on_stop", self.session, step, batch)
            except GuardError:  # already stopping; a second stop adds nothing
                pass

    # ----- the batch: this rank's rows, then numbers for every row -----------------------------------------
    def _gather_batch(self, output: dict[str, Any], pending: tuple[Any, ...], step: int) -> RolloutBatch | None:
        """The batch every guard sees: per-row numbers gathered from every rank, text for this rank's rows.

        Returns None (on every rank alike) when some rank could not build its rows.
        """
        import numpy as np
        import torch

        rewards = torch.as_tensor(pending[4]).detach().float().cpu()  # TRL gathered them: every row, every rank
        n_local = len(pending[0])
        n_global = int(rewards.shape[0])
        start = self.ctx.process_index * n_local if n_global != n_local else 0  # TRL's process slice
        held = range(start, start + n_local)
        feature_names = self._feature_names()
        host_names = [n for n in feature_names if n not in self._tensor_feature_names()]
        batch = None
        error = None
        try:
            batch = self._shell_batch(output, pending, step, rewards, held)
            host = self._host_features(batch, output)
            values = torch.tensor([host[n] for n in host_names], dtype=torch.float64).reshape(len(host_names), -1).T
        except Exception as exc:  # the hook's own bug: never fatal, never a hang
            error = f"{type(exc).__name__}: {exc}"
            values = torch.zeros((n_local, len(host_names)), dtype=torch.float64)
        device_feats = self._device_features(n_local)
        if device_feats is not None:
            values = torch.cat([values.to(device_feats.device), device_feats], dim=1)
        gathered = collectives.all_gather_rows(values).cpu().numpy()  # the batch's one host transfer
        columns = dict(zip(feature_names, gathered.T, strict=True))
        if error is not None or not (columns["ok"] == 1).all() or batch is None:
            self.session.record(
                Finding(
                    "hook",
                    "internal_error",
                    "warning",
                    f"batch guards skipped at step {step}: {error or 'another rank could not build its rows'}",
                    step,
                ),
                warn=True,
            )
            return None
        names = self._task_names_of(columns["task"].astype(np.int64), batch.raw_tasks, held)
        batch.raw_tasks = names
        batch.tasks = self._task_labels(names, step)
        batch.advantages = columns["advantage"].tolist()
        batch.completion_lengths = columns["length"].astype(np.int64).tolist()
        batch.truncated = (columns["truncated"] != 0).tolist()
        batch.thinking = [None if v < 0 else bool(v) for v in columns["thinking"].tolist()]
        batch.prompt_opened = (columns["prompt_opened"] != 0).tolist()
        batch.features = {n: columns[n].tolist() for n in feature_names if "/" in n}
        batch.__post_init__()
        return batch

    def _feature_names(self) -> list[str]:
        """Columns of the per-row feature tensor, the same on every rank: base numbers, then guards' features."""
        names = list(BASE_FEATURES)
        names += [f"{g.name}/{f}" for g in self.guards for f in getattr(g, "FEATURES", ())]
        return names + self._tensor_feature_names()

    def _tensor_feature_names(self) -> list[str]:
        return [f"{g.name}/{f}" for g in self.guards for f in getattr(g, "TENSOR_FEATURES", ())]

    def _device_features(self, rows: int) -> Any:
        """Features guards computed on the batch's device (the mask check's bits): ``[rows, k]`` or None."""
        import torch

        columns = []
        for guard in self.guards:
            names = getattr(guard, "TENSOR_FEATURES", ())
            if not names:
                continue
            try:
                feats = guard.tensor_features(rows, self._device())
                columns += [feats[n].reshape(rows).to(torch.float64) for n in names]
            except Exception as exc:  # zeros: the guard sees an unchecked batch
                logger.warning("rl_guards: %s features failed: %s", guard.name, exc)
                columns += [torch.zeros(rows, dtype=torch.float64, device=self._device()) for _ in names]
        return torch.stack(columns, dim=1) if columns else None

    def _shell_batch(
        self, output: dict[str, Any], pending: tuple[Any, ...], step: int, rewards: Any, held: range
    ) -> RolloutBatch:
        """The batch shaped for every row, holding this rank's rows only (numbers of other rows come later)."""
        trainer = self.trainer
        rows = self._local_rows(output, pending)
        n = int(rewards.shape[0])
        mode = self._mode()
        num_generations = trainer.num_generations if mode == "train" else getattr(trainer, "num_generations_eval", 1)
        weights = getattr(trainer, "reward_weights", None)
        reward_values = [nan_to_none(r) for r in rewards.tolist()]
        weight_list = [float(w) for w in weights.tolist()] if weights is not None else [1.0] * rewards.shape[1]

        def spread(key: str, fill: Any) -> list[Any]:
            out = [fill] * n
            for i, row in zip(held, rows, strict=True):
                out[i] = row[key]
            return out

        column_names = sorted({k for r in rows for k in r["columns"]})
        columns = {name: [None] * n for name in column_names}
        for i, row in zip(held, rows, strict=True):
            for name, value in row["columns"].items():
                columns[name][i] = value
        advantages = [0.0] * n
        for i, value in zip(held, output["advantages"].detach().float().cpu().tolist(), strict=False):
            advantages[i] = float(value)
        return RolloutBatch(
            step=step,
            mode=mode,
            num_generations=int(num_generations or 1),
            reward_names=list(self.ctx.reward_func_names),
            reward_weights=weight_list,
            rewards=reward_values,
            advantages=advantages,
            tasks=spread("task", ""),
            raw_tasks=spread("task", ""),
            completions=spread("completion", None),
            completion_ids=spread("completion_ids", []),
            prompt_ids=spread("prompt_ids", []),
            truncated=spread("truncated", False),
            thinking=spread("thinking", None),
            max_completion_length=int(getattr(trainer.args, "max_completion_length", 0) or 0),
            prompts=spread("prompt", None),
            columns=columns,
            decode=self.ctx.decode,
            epoch=float(trainer.state.epoch or 0.0),
            prompt_opened=spread("prompt_opened", False),
            local_rows=held if n != len(held) else None,
            reward_inputs=(*pending[:4], trainer.state),
        )

    def _host_features(self, batch: RolloutBatch, output: dict[str, Any]) -> dict[str, list[float]]:
        """The base numbers and every guard's ``scan`` features of the held rows (zeros for a failing guard)."""
        held = batch.held_rows
        out: dict[str, list[float]] = {
            "ok": [1.0] * len(held),
            "advantage": [batch.advantages[i] for i in held],
            "task": [float(task_hash(batch.raw_tasks[i])) for i in held],
            "length": [float(len(batch.completion_ids[i])) for i in held],
            "truncated": [float(batch.truncated[i]) for i in held],
            "thinking": [-1.0 if batch.thinking[i] is None else float(batch.thinking[i]) for i in held],
            "prompt_opened": [float(batch.prompt_opened[i]) for i in held],
        }
        for guard in self.guards:
            names = getattr(guard, "FEATURES", ())
            if not names:
                continue
            feats: dict[str, list[float]] = {}
            try:
                feats = guard.scan(batch)
            except Exception as exc:  # a guard's own bug: counted, its features read as zeros
                self.session.record(
                    Finding(
                        guard.name, "internal_error", "warning", f"scan failed: {type(exc).__name__}: {exc}", batch.step
                    ),
                    warn=True,
                )
            for name in names:
                values = feats.get(name)
                out[f"{guard.name}/{name}"] = (
                    list(values) if values is not None and len(values) == len(held) else [0.0] * len(held)
                )
        return out

    def _task_names_of(self, hashes: Any, local_names: list[str], held: range) -> list[str]:
        """Every row's task name from the gathered ids; names new to the run are exchanged once, in sorted order."""
        known = self._task_registry
        unknown = sorted({int(h) for h in hashes} - known.keys())
        if unknown:
            wanted = set(unknown)
            mine = {task_hash(local_names[i]): local_names[i] for i in held}
            for part in collectives.all_gather_objects({h: t for h, t in mine.items() if h in wanted}):
                known.update(part)
        return [known.get(int(h), "") for h in hashes]

    def _fill_rows(self, batches: list[RolloutBatch], *, everywhere: bool, rows: set[int] | None = None) -> None:
        """Bring rows' text to the main process (dumps) or to every rank (messages); only with several ranks.

        Collective: every rank calls it with the same batches. ``rows`` limits it to the rows a message shows;
        for messages, guards' :meth:`~rl_guards.guards.base.Guard.row_evidence` of the rows travels too.
        """
        if self.ctx.world_size <= 1 or not collectives.distributed():
            return
        todo = [b for b in batches if everywhere or id(b) not in self._filled_on_main]
        if not todo:
            return
        payload: dict[tuple[int, int], dict[str, Any]] = {}
        for b, batch in enumerate(todo):
            for row in batch.local_rows or ():
                if rows is not None and row not in rows:
                    continue
                item = {
                    "completion": batch.completions[row],
                    "completion_ids": batch.completion_ids[row],
                    "prompt_ids": batch.prompt_ids[row],
                    "prompt": batch.prompts[row] if row < len(batch.prompts) else None,
                    "columns": {k: v[row] for k, v in batch.columns.items()},
                }
                if everywhere:
                    item["evidence"] = {
                        g.name: text for g in self.guards if (text := _safe_evidence(g, batch, row)) is not None
                    }
                payload[(b, row)] = item
        parts = collectives.all_gather_objects(payload) if everywhere else collectives.gather_objects_to_main(payload)
        if not everywhere:
            self._filled_on_main.update(id(b) for b in todo)
        for part in parts or []:
            for (b, row), item in part.items():
                batch = todo[b]
                if batch.local_rows is not None and row in batch.local_rows:
                    continue
                batch.completions[row] = item["completion"]
                batch.completion_ids[row] = item["completion_ids"]
                batch.prompt_ids[row] = item["prompt_ids"]
                if row < len(batch.prompts):
                    batch.prompts[row] = item["prompt"]
                for name, value in item["columns"].items():
                    batch.columns.setdefault(name, [None] * len(batch))[row] = value
                for guard_name, text in item.get("evidence", {}).items():
                    batch.evidence[(guard_name, row)] = text

    def _task_labels(self, names: list[str], step: int) -> list[str]:
        """Metric labels of the batch's tasks under ``tasks.max_tasks``; says once when the cap applies."""
        capped_before = len(self.task_labels.capped)
        labels = self.task_labels.labels(names)
        if self.task_labels.capped and not capped_before:
            kept, capped = list(self.task_labels.kept), sorted(self.task_labels.capped)
            self.session.record(
                Finding(
                    "tasks",
                    "task_cap",
                    "warning",
                    f"more than tasks.max_tasks={self.config.tasks.max_tasks} distinct tasks: per-task metrics are "
                    f"logged for {len(kept)} tasks ({', '.join(map(repr, kept[:5]))}{', ...' if len(kept) > 5 else ''})"
                    f" and the others ({', '.join(map(repr, capped[:5]))}{', ...' if len(capped) > 5 else ''}) share "
                    "the rl_guards_task/~other/... curves. Dumps keep every row's own task name. Raise "
                    "tasks.max_tasks (0 = no cap) to give every task its own curves.",
                    step,
                ),
                warn=True,
            )
        return labels

    def _local_rows(self, output: dict[str, Any], pending: tuple[Any, ...]) -> list[dict[str, Any]]:
        """This rank's rows, as plain Python objects ready to gather."""
        inputs, prompts, completions, completion_ids_list, _ = pending
        cfg = self.config
        task_col = cfg.tasks.task_column
        think_col = cfg.think_tags.thinking_column
        default_thinking = self.ctx.chat_template_kwargs.get("enable_thinking")
        eos_and_pad = set(self.ctx.eos_token_ids)
        if self.ctx.pad_token_id is not None:
            eos_and_pad.add(int(self.ctx.pad_token_id))

        # Unpad the prompt ids once on the host: one transfer per batch, not per row.
        prompt_ids = output["prompt_ids"].tolist()
        prompt_mask = output["prompt_mask"].tolist()
        prompt_rows = [
            [t for t, m in zip(ids, mask, strict=True) if m] for ids, mask in zip(prompt_ids, prompt_mask, strict=True)
        ]
        opened = prompts_open_block(prompt_rows, self.ctx.decode, self.markup)

        local_rows = []
        for i, example in enumerate(inputs):
            ids = list(map(int, completion_ids_list[i]))
            thinking = example.get(think_col, default_thinking)
            columns = {
                k: v
                for k, v in example.items()
                if k not in _SKIP_COLUMNS and k != task_col and isinstance(v, str | int | float | bool | type(None))
            }
            local_rows.append(
                {
                    "task": task_name(example.get(task_col), cfg.tasks.default_task),
                    "completion": completion_text(completions[i], self.markup),
                    "completion_ids": ids,
                    "prompt_ids": prompt_rows[i] if i < len(prompt_rows) else [],
                    "prompt": prompts[i],
                    "truncated": not ids or ids[-1] not in eos_and_pad,
                    "thinking": None if thinking is None else bool(thinking),
                    "prompt_opened": opened[i] if i < len(opened) else False,
                    "columns": columns,
                }
            )
        return local_rows

    def _flush_metrics(self, mode: str | None = None) -> None:
        metrics = self.session.pop_metrics()
        buffers = getattr(self.trainer, "_metrics", None)
        if not metrics or not isinstance(buffers, dict):
            return
        buffer = buffers[mode or self._mode()]
        for key, values in metrics.items():
            clean = [v for v in values if not math.isnan(v)]
            if clean:
                buffer[key].extend(clean)

    # ----- trainer events --------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._ended = False
        self._restore(state)
        self._file_state(state)
        self.router.write_config(self.config.to_dict())
        step = int(state.global_step)
        if self.findings_file is not None:
            self.findings_file.begin(step)
        stop = self._settled(run_begin(self.guards, self.session, step), step)
        self._share_template_verdict()
        # The model is not yet in train mode here; these metrics belong to the first training log.
        self._flush_metrics("train")
        if stop is not None:
            self._log_now()
            raise stop

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The trainer saves a checkpoint right after this event: evidence tied to it (the checkpoint's rollout
        # dump) is written first, so a kill during or after the save never leaves a checkpoint without it.
        step = int(state.global_step)
        final = bool(getattr(control, "should_training_stop", False)) or step >= int(
            getattr(state, "max_steps", 0) or 0
        )
        if final:
            self._dispatch("on_step_end", step, final)  # no batch follows: agree now
        else:
            # No collective on every step: what a guard finds here (the writer's results, on the main process) is
            # shown now and, if it stops the run, stops every rank at the next agreement (the next batch's).
            raised = self._run_guards("on_step_end", step, final)
            self._held_stop = self._held_stop or raised or self.session.settle()
        if getattr(control, "should_save", False):
            if any(hasattr(g, "wants_rows") for g in self.guards):  # the checkpoint's dump needs its rows
                self._fill_rows(self._step_batches, everywhere=False)
            self._dispatch("before_save", step, self._checkpoint_dir(args, state))
        self._flush_metrics("train")  # before the trainer's log of this step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._dispatch("on_save", int(state.global_step), self._checkpoint_dir(args, state))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end_training(state)

    def _end_training(self, state: Any) -> None:
        """The guards' train-end work, once: from this event, or earlier from a tracker's callback about to finish
        its run (trackio's), so the last dump's table and the summary still reach it."""
        if self._ended:
            return
        self._ended = True
        self._dispatch("on_train_end", int(state.global_step))
        if self.findings_file is not None:
            self.findings_file.snapshot()
        if self.ctx.is_main_process:
            from rl_guards.trl import wandb_io
            from rl_guards.trl.log_routing import finding_summary

            wandb_io.set_summary(
                {
                    f"rl_guards/findings/{guard}/{kind}": finding_summary(self.session, (guard, kind))
                    for guard, kind in self.session.counts
                }
            )

    def _dispatch(self, hook: str, step: int, *args: Any) -> None:
        """Run a trainer event's hook on every guard; all ranks stop together if one stops."""
        stop = self._settled(self._run_guards(hook, step, *args), step)
        if stop is not None:
            self._flush_metrics()
            self._log_now()
            raise stop

    def _take_held_stop(self) -> GuardError | None:
        held, self._held_stop = self._held_stop, None
        return held

    def _settled(self, raised: GuardError | None, step: int) -> GuardError | None:
        """Agree across ranks, then render this rank's messages: the error to raise on this rank, or None."""
        raised = raised or self._take_held_stop()
        stop, _ = self._decide(raised, step, need_text=False)
        error = self.session.settle()
        return self._share_stop(raised or error, stop) if stop is not None else None

    def _share_stop(self, own: GuardError | None, agreed: GuardError) -> GuardError:
        """The error this rank raises: its own, else the stopping rank's, message and all (ranks that stop only
        because another did would otherwise fail first with a message that says nothing). Collective: every rank
        that stops calls it, and when one stops all do."""
        error = self._stop_error(own, agreed)
        if self.findings_file is not None:  # on disk whichever rank found it
            self.findings_file.stop(error, agreed.step)
        return error

    def _stop_error(self, own: GuardError | None, agreed: GuardError) -> GuardError:
        if self.ctx.world_size <= 1 or not collectives.distributed():
            return own or agreed
        texts = collectives.all_gather_objects(None if own is None else (own.guard, str(own)))
        if own is not None:
            return own
        first = next((t for t in texts if t is not None), None)
        if first is None:
            return agreed
        guard, text = first
        return GuardError(f"{text}\n(stopped on another rank; this rank stops with it)", guard=guard, step=agreed.step)

    def _log_now(self, step: int | None = None) -> None:
        """A stop: log the metrics of the failing batch now (the trainer will not log them), to W&B and the history,
        at the batch's own ``step`` (TRL's: the step it was to be trained in), not at the previous step's x."""
        state = self.trainer.state
        before = state.global_step
        try:
            if step is not None:
                state.global_step = max(int(before), int(step))  # HF logs (and W&B charts) at state.global_step
            self.trainer.log({})
        except Exception as exc:  # the stop matters more than its metrics
            logger.warning("rl_guards: could not log the failing batch's metrics: %s", exc)
        finally:
            state.global_step = before
        if self.ctx.is_main_process:  # no train end follows: trackio's summary table now
            from rl_guards.trl import wandb_io

            wandb_io.flush_trackio()

    def _rollouts_folder(self) -> Path:
        """The rollouts guard's folder (where ``findings.jsonl`` goes too), or its default when it is off."""
        from rl_guards.rollouts.recorder import RolloutRecorder, default_rollouts_dir

        recorder = next((g for g in self.guards if isinstance(g, RolloutRecorder)), None)
        return recorder.folder if recorder is not None else default_rollouts_dir(self.ctx.output_dir)

    @staticmethod
    def _checkpoint_dir(args: Any, state: Any) -> str:
        import os

        return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")

    def _share_template_verdict(self) -> None:
        """Tell reward functions that want it whether the generation prompt already opens ``<think>``."""
        template_guard = next((g for g in self.guards if hasattr(g, "prompt_opened")), None)
        if template_guard is None:
            return
        for fn in self.ctx.reward_funcs:
            setter = getattr(fn, "set_prompt_opened", None)
            if callable(setter):
                try:
                    setter(template_guard.prompt_opened(True), template_guard.prompt_opened(False))
                except Exception as exc:  # never fatal
                    logger.warning("rl_guards: could not pass the template verdict to %r: %s", fn, exc)

    # ----- resume ----------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The run's section of ``trainer_state.json``, saved by the Trainer at each checkpoint. Never raises: a part
        that cannot be saved (its ``state_dict()`` raises, or it is not JSON) is left out, said once, and a resume
        from that checkpoint starts it fresh."""
        guards = {}
        for guard in self.guards:
            part = self._saveable(guard.name, guard.state_dict)
            if part is not None:
                guards[guard.name] = part
        attributes: dict[str, Any] = {"version": STATE_VERSION, "guards": guards}
        for name, get in (("session", self.session.state_dict), ("task_labels", self.task_labels.state_dict)):
            part = self._saveable(name, get)
            if part is not None:
                attributes[name] = part
        attributes["batches_seen"] = int(self.batches_seen)
        return {"args": {}, "attributes": attributes}

    def _saveable(self, name: str, get: Any) -> Any:
        """``get()`` as trainer_state.json will hold it, or None (said once per part) when it cannot be written."""
        try:
            # The trainer writes with json.dumps(sort_keys=True) after the model and optimizer are on disk: a part
            # it cannot write would leave the checkpoint without trainer_state.json. The copy is what resumes read.
            return json.loads(json.dumps(get(), sort_keys=True))
        except Exception as exc:
            step = int(getattr(self.trainer.state, "global_step", 0) or 0)
            message = (
                f"the state of {name!r} could not be saved ({type(exc).__name__}: {exc}); checkpoints leave it out, "
                "and a resume from one of them starts it fresh. The rest of the checkpoint is complete."
            )
            guard = name if name in {g.name for g in self.guards} else "state"
            try:
                self.session.record(Finding(guard, "state_not_saved", "warning", message, step), warn=True)
            except Exception:  # the session itself may be what is broken
                logger.warning("[rl_guards/%s] %s", guard, message)
            return None

    def _file_state(self, state: Any) -> None:
        """Make sure the trainer's next checkpoint can file this run's section.

        The trainer updates ``state.stateful_callbacks[name]`` in place at each save and indexes it by name: after a
        resume from a checkpoint written without rl_guards (or installed after the trainer built its state, as
        GuardsCallback does) the name is missing and the save raised KeyError after the model and optimizer were
        written, leaving the checkpoint without trainer_state.json. Also binds the section's object when HF's
        ``restore_callback_states_from_checkpoint`` rebuilt it, so that what it saves is this run's state.
        """
        handler = getattr(self.trainer, "callback_handler", None)
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list):
            holders = [cb for cb in callbacks if isinstance(cb, GuardRunState)]
            if not holders:
                callbacks.append(self.saved_state)
            for holder in holders:
                holder.bind(self)
                self.saved_state = holder
        sections = getattr(state, "stateful_callbacks", None)
        if isinstance(sections, dict):
            sections.pop(LEGACY_STATE_KEY, None)  # restored above; the next checkpoint files it under STATE_KEY
            sections[STATE_KEY] = self.state()  # replaces what was restored (or dropped) with what will be saved

    def _shield_callback_restore(self) -> None:
        """With ``restore_callback_states_from_checkpoint=True`` HF reads every saved section as ``{"args": dict,
        "attributes": dict}`` before any callback runs, and raises on anything else: a damaged rl_guards section
        would stop the resume there. HF is shown an empty section instead; the run's own restore reads the real one
        and says what it drops. (Private Trainer method, checked: without it nothing is wrapped.)"""
        trainer = self.trainer
        original = getattr(trainer, "_load_callback_state", None)
        if not callable(original):
            return

        def _load_callback_state(*args: Any, **kwargs: Any) -> Any:
            sections = getattr(getattr(trainer, "state", None), "stateful_callbacks", None)
            held = sections.get(STATE_KEY) if isinstance(sections, dict) else None
            if held is None or _readable_by_hf(held):
                return original(*args, **kwargs)
            sections[STATE_KEY] = {"args": {}, "attributes": {}}
            try:
                return original(*args, **kwargs)
            finally:
                sections[STATE_KEY] = held

        trainer._load_callback_state = _load_callback_state

    def _restore(self, state: Any) -> None:
        """Restore the saved section into this run, part by part; what cannot be restored is said once and starts
        fresh (a damaged file, another version's layout): a resume never fails on the guards' state."""
        if self._restored or not int(getattr(state, "global_step", 0) or 0):
            return
        sections = getattr(state, "stateful_callbacks", None)
        if not isinstance(sections, dict):
            return
        key = STATE_KEY if STATE_KEY in sections else LEGACY_STATE_KEY
        if key not in sections:
            return  # a checkpoint written without rl_guards: everything starts fresh, nothing is wrong
        self._restored = True
        saved = sections[key]
        if isinstance(saved, list) and saved:
            saved = saved[-1]
        attributes = saved.get("attributes") if isinstance(saved, dict) else None
        if not isinstance(attributes, dict):
            self._say_not_restored(state, ["everything (the saved section is not a dict of attributes)"], [])
            return
        version = attributes.get("version", 0)  # 0: sections saved before the state was versioned (same layout)
        if type(version) is not int or not 0 <= version <= STATE_VERSION:
            self._say_not_restored(
                state, [f"everything (saved by a version of rl_guards with state version {version!r}; this one reads "
                        f"up to {STATE_VERSION})"], [])  # fmt: skip
            return
        dropped: list[str] = []
        guards = attributes.get("guards", {})
        if not isinstance(guards, dict):
            dropped.append(f"every guard's state (not a dict: {type(guards).__name__})")
            guards = {}
        for guard in self.guards:
            if guard.name in guards:
                self._load_part(guard.name, guard.state_dict, guard.load_state_dict, guards[guard.name], dropped)
        # 0.1 checkpoints saved only the counts, as [guard, kind, count] rows.
        session = attributes["session"] if "session" in attributes else {"counts": attributes.get("counts", [])}
        self._load_part("session", self.session.state_dict, self.session.load_state_dict, session, dropped)
        if "task_labels" in attributes:
            labels, saved_labels = self.task_labels, attributes["task_labels"]
            self._load_part("task_labels", labels.state_dict, labels.load_state_dict, saved_labels, dropped)
        seen = attributes.get("batches_seen", 0)
        if type(seen) is int and seen >= 0:
            self.batches_seen = seen
        else:
            dropped.append(f"batches_seen ({type(seen).__name__} {seen!r:.80})")
        known = {"version", "guards", "session", "counts", "task_labels", "batches_seen"}
        self._say_not_restored(state, dropped, sorted(str(k) for k in attributes if k not in known))

    @staticmethod
    def _load_part(name: str, current: Any, load: Any, saved: Any, dropped: list[str]) -> None:
        """``load(saved)``; when it fails, the part is put back as it was (fresh) and named in ``dropped``."""
        try:
            fresh = copy.deepcopy(current())
        except Exception:
            fresh = None
        try:
            if not isinstance(saved, dict):
                raise TypeError(f"not a dict: {type(saved).__name__}")
            load(saved)
        except Exception as exc:
            dropped.append(f"{name} ({type(exc).__name__}: {exc!s:.120})")
            if fresh is not None:
                try:
                    load(fresh)
                except Exception as again:
                    logger.warning("rl_guards: could not reset the %s state after a failed restore: %s", name, again)

    def _say_not_restored(self, state: Any, dropped: list[str], unknown: list[str]) -> None:
        """One warning for everything a resume could not take from the checkpoint (counted in the findings)."""
        if not dropped and not unknown:
            return
        parts = []
        if dropped:
            parts.append(f"dropped {'; '.join(dropped)}: these start fresh from this step")
        if unknown:
            parts.append(f"ignored fields this version does not know: {', '.join(unknown)}")
        message = (
            f"the checkpoint's rl_guards state could not be restored in full: {'. Also '.join(parts)}. The rest was "
            "restored and training goes on; the next checkpoint saves a complete section of this version."
        )
        finding = Finding("state", "state_not_restored", "warning", message, int(state.global_step))
        warned = getattr(self.session, "_warned", None)  # as restored: an earlier resume's warning of this kind
        if isinstance(warned, set):
            warned.discard((finding.guard, finding.kind))  # this message is about this resume: always said
        self.session.record(finding, warn=True)

    # ----- results ---------------------------------------------------------------------------------------
    @property
    def findings(self) -> list[Any]:
        return self.session.findings

    def summary(self) -> str:
        """Readable table of findings, the per-task curves, what the reward probes covered, unavailable guards."""
        text = self.session.summary_text()
        tasks = task_summary_text(getattr(self.trainer.state, "log_history", []) or [])
        if tasks:
            text += "\n" + tasks
        probes = next((g for g in self.guards if g.name == "probes"), None)
        if probes is not None and hasattr(probes, "coverage_text"):
            text += "\n" + probes.coverage_text()
        if self.unavailable:
            text += "\nunavailable: " + ", ".join(f"{k} ({v})" for k, v in sorted(self.unavailable.items()))
        return text

    def guard(self, name: str) -> Guard:
        """The installed guard with this name."""
        for g in self.guards:
            if g.name == name:
                return g
        raise KeyError(f"no guard named {name!r}; installed: {[g.name for g in self.guards]}")


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


def _dataset_task_counts(dataset: Any, tasks: Any) -> dict[str, int]:
    """Rows per task name in a map-style dataset's task column ({} when it cannot be counted cheaply)."""
    try:
        if tasks.task_column not in (getattr(dataset, "column_names", None) or []):
            return {}
        values = dataset.data.column(tasks.task_column).value_counts().to_pylist()  # Arrow: no Python row loop
    except Exception:  # iterable datasets, other containers: names are then taken as they appear
        return {}
    counts: dict[str, int] = {}
    for item in values:
        name = task_name(item["values"], tasks.default_task)
        counts[name] = counts.get(name, 0) + int(item["counts"])
    return counts


def _readable_by_hf(saved: Any) -> bool:
    """Whether transformers' ``_load_callback_state`` can rebuild a callback from this saved section."""
    items = saved if isinstance(saved, list) else [saved]
    return all(
        isinstance(item, dict)
        and isinstance(item.get("args", {}), dict)
        and isinstance(item.get("attributes", {}), dict)
        for item in items
    )


def _safe_evidence(guard: Guard, batch: RolloutBatch, row: int) -> str | None:
    try:
        return guard.row_evidence(batch, row)
    except Exception as exc:  # evidence is best effort: the message says the row could not be rendered
        logger.warning("rl_guards: %s could not render row %s: %s", guard.name, row, exc)
        return None


__all__ = ["GuardError", "GuardRun", "install"]
