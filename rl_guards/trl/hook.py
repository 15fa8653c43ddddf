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

Each generation batch then goes to the engine (:mod:`rl_guards.engine.driver`: one gather of numbers, every
guard, one stop decision for all ranks), and the guards' metrics into ``trainer._metrics[mode]`` (-> the trainer's
log -> ``log_history`` / W&B). Both methods are private TRL API (stable from 0.19 to 1.16). They are checked at
install; when they are missing, the guards that need them are reported unavailable and the others still run.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Any

from transformers import TrainerCallback

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.engine.assembly import LocalRows
from rl_guards.engine.driver import Engine
from rl_guards.engine.ranks import Ranks
from rl_guards.errors import ConfigError, GuardError
from rl_guards.guards.base import Guard
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.rewards.checked_calls import CheckedCalls
from rl_guards.trl import context as trl_context
from rl_guards.trl import state as trl_state
from rl_guards.trl.log_routing import SignalRouter
from rl_guards.trl.probe_generation import probe_generate
from rl_guards.trl.rollout_rows import local_rows
from rl_guards.trl.state import GuardRunState

logger = logging.getLogger("rl_guards")

REQUIRED_OUTPUT_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


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


class GuardRun(TrainerCallback):
    """The engine on a TRL trainer: builds its context, feeds it the trainer's batches and events."""

    def __init__(self, trainer: Any, config: GuardsConfig, guard_classes: list[type[Guard]]) -> None:
        self.trainer = trainer
        self.config = config
        self.saved_state = GuardRunState()  # the trainer's stateful callback for this run (see GuardRunState)
        self.saved_state.bind(self)
        self._pending_rewards: tuple[Any, ...] | None = None
        self._begun = False  # a train() began on this trainer (a second one starts the guards over)
        self._last_step = 0  # the last optimizer step of the current run
        self._ended = False
        if config.think_tags.per_row_thinking:
            from rl_guards.trl.thinking_mix import honour_thinking_column, thinking_column_of

            if thinking_column_of(trainer) is None:  # not already done by hand
                honour_thinking_column(trainer, column=config.think_tags.thinking_column)
        guards = [g for g in (cls(config) for cls in guard_classes) if g.enabled]
        ctx = trl_context.build_context(trainer)
        self.markup = markup_from_config(config.think_tags, ctx.template_text)
        ranks = Ranks(ctx.world_size, ctx.process_index, ctx.is_main_process, device=self._device)
        self.unavailable = trl_context.check_compatibility(trainer, guards)
        if not self.unavailable:  # the context is complete before any guard's setup
            if config.reward_errors.enabled:
                ctx.reward_error_log = trl_context.catch_reward_errors(trainer)
            timers = ctx.reward_error_log.timers if ctx.reward_error_log is not None else {}
            ctx.checked_calls = CheckedCalls(
                trl_context.reward_callers(trainer, ctx), cap=config.probes.call_timeout, timers=timers
            )
            ctx.probe_generate = partial(probe_generate, self)
            ctx.all_gather_rows = ranks.all_gather_float_rows
        columns = getattr(ctx.train_dataset, "column_names", None)
        self._guard_classes = guard_classes
        self._task_counts = trl_context.dataset_task_counts(ctx.train_dataset, config.tasks)
        self._single_task = isinstance(columns, list) and config.tasks.task_column not in columns
        self.engine = self._new_engine(guards, ctx, ranks)
        self.router = SignalRouter(trainer, self.session, ctx.is_main_process, config.console)
        self.router.before_tracker_end = self._end_training  # a tracker's run finishing: the train-end work first
        self.engine.setup()
        trl_context.configure_reward_funcs(ctx, config.metrics.level)
        self._wrap()
        trl_state.shield_callback_restore(trainer)

    def _new_engine(self, guards: list[Guard], ctx: Any, ranks: Ranks) -> Engine:
        """An engine with these guards, wired to the trainer (its metric buffer, its log, its mode); not set up."""
        from rl_guards.trl.wandb_io import RunTracker

        engine = Engine(
            self.config, guards, ctx, ranks=ranks, task_counts=self._task_counts, single_task=self._single_task
        )
        engine.session.tracker = RunTracker()  # guards' tables and reports go to the run's W&B / trackio run
        engine.metrics_sink = self._to_trainer_metrics
        engine.log_now = self._log_now
        engine.current_mode = self._mode
        return engine

    def _start_over(self) -> None:
        """A new ``train()`` on this trainer: the previous run is ended if it was not (a Ctrl-C skips the trainer's
        train end: its pending dumps are written, its findings file closed), and the guards start from their fresh
        state, as a new install's would; a resume then restores the checkpoint's state into them."""
        previous = self.engine
        if not self._ended:
            self._ended = True
            try:
                previous.end(self._last_step)
            except Exception as exc:  # the new run matters more than the old one's end
                logger.warning("rl_guards: could not end the previous run of this trainer: %s", exc)
        guards = [g for g in (cls(self.config) for cls in self._guard_classes) if g.enabled]
        self.engine = self._new_engine(guards, previous.ctx, previous.ranks)
        self.router.bind(self.session)
        self.engine.setup()
        logger.info("rl_guards: a new train() on this trainer: the guards start over (findings, counts, schedules).")

    # ----- the engine's parts, as the run's handle shows them ----------------------------------------------------
    @property
    def session(self) -> Any:
        return self.engine.session

    @property
    def guards(self) -> list[Guard]:
        return self.engine.guards

    @property
    def ctx(self) -> Any:
        return self.engine.ctx

    @property
    def task_labels(self) -> Any:
        return self.engine.task_labels

    @property
    def batches_seen(self) -> int:
        return self.engine.batches_seen

    @property
    def last_batch(self) -> RolloutBatch | None:
        return self.engine.last_batch

    @property
    def findings(self) -> list[Any]:
        return self.session.findings

    def guard(self, name: str) -> Guard:
        """The installed guard with this name."""
        return self.engine.guard(name)

    def summary(self) -> str:
        """Readable table of findings, the per-task curves, what the reward probes covered, unavailable guards."""
        history = getattr(self.trainer.state, "log_history", []) or []
        return self.engine.summary(history, self.unavailable)

    def state(self) -> dict[str, Any]:
        """The run's section of ``trainer_state.json``, saved by the Trainer at each checkpoint. Never raises."""
        return trl_state.run_section(self.engine, self.trainer)

    # ----- the two wraps ---------------------------------------------------------------------------------------
    def _wrap(self) -> None:
        if self.unavailable:
            return
        trainer = self.trainer
        original_rewards = trainer._calculate_rewards
        original_generate = trainer._generate_and_score_completions

        def _calculate_rewards(inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            self.engine.join()  # a batch still in flight is decided before the reward functions run again
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

    def _mode(self) -> str:
        model = getattr(self.trainer, "model", None)
        return "train" if getattr(model, "training", True) else "eval"

    def _step(self) -> int:
        # TRL's numbering: a train batch belongs to the step it is trained in (global_step + 1 once the optimizer
        # steps), as TRL's completions table and W&B show it; an eval batch to the step it evaluates.
        return int(self.trainer.state.global_step) + (1 if self._mode() == "train" else 0)

    def _after_generation(self, output: dict[str, Any]) -> None:
        """One generation batch, on every rank: the loss tensors, then this rank's rows, to the engine."""
        missing = [k for k in REQUIRED_OUTPUT_KEYS if k not in output]
        pending, self._pending_rewards = self._pending_rewards, None
        if missing or pending is None:
            key = ("hook", "missing_keys")
            if key not in self.session.counts:
                logger.warning("rl_guards: rollout batch lacks %s; batch guards skipped (TRL drift).", missing)
            self.session.counts[key] += 1
            return
        step = self._step()
        self.engine.check_tensors(step, output)  # the mask check stages per-row bits on the device
        try:
            rows = self._local_rows(output, pending)
        except Exception as exc:  # still joins the gather: every rank skips the batch, none hangs
            rows = LocalRows.failed(step, self._mode(), len(pending[0]), pending[4], f"{type(exc).__name__}: {exc}")
        self.engine.submit(rows, self._device())

    def _local_rows(self, output: dict[str, Any], pending: tuple[Any, ...]) -> LocalRows:
        """This rank's rows, as the engine takes them."""
        return local_rows(
            output,
            pending,
            step=self._step(),
            mode=self._mode(),
            trainer=self.trainer,
            ctx=self.ctx,
            config=self.config,
            markup=self.markup,
        )

    def _device(self) -> Any:
        return getattr(getattr(self.trainer, "accelerator", None), "device", None)

    def _to_trainer_metrics(self, mode: str, metrics: dict[str, list[float]]) -> None:
        buffers = getattr(self.trainer, "_metrics", None)
        if isinstance(buffers, dict):
            buffer = buffers[mode]
            for key, values in metrics.items():
                buffer[key].extend(values)

    # ----- trainer events --------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from rl_guards.trl.thinking_mix import thinking_column_of

        if self._begun:  # train() again on this trainer (a notebook after Ctrl-C): nothing carries over by accident
            self._start_over()
        self._begun = True
        self._ended = False
        self.ctx.per_row_thinking_column = thinking_column_of(self.trainer)  # honoured by hand after install
        # A resume (resume_from_checkpoint) restores the checkpoint's section in place, whether or not HF rebuilt the
        # stateful callbacks; a fresh start (step 0) keeps the fresh state.
        trl_state.restore_from(self.engine, state)
        trl_state.file_state(self, self.trainer, state)
        self.router.write_config(self.config.to_dict())
        self.engine.begin(int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The trainer saves a checkpoint right after this event: evidence tied to it (the checkpoint's rollout
        # dump) is written first, so a kill during or after the save never leaves a checkpoint without it.
        step = self._last_step = int(state.global_step)
        final = bool(getattr(control, "should_training_stop", False)) or step >= int(
            getattr(state, "max_steps", 0) or 0
        )
        saving = bool(getattr(control, "should_save", False))
        self.engine.step_end(step, final=final, checkpoint_dir=self._checkpoint_dir(args, state) if saving else None)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.engine.saved(int(state.global_step), self._checkpoint_dir(args, state))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end_training(state)

    def _end_training(self, state: Any) -> None:
        """The guards' train-end work, once: from this event, or earlier from a tracker's callback about to finish
        its run (trackio's), so the last dump's table and the summary still reach it."""
        if self._ended:
            return
        self._ended = True
        self.engine.end(int(state.global_step))
        if self.ctx.is_main_process:
            from rl_guards.trl import wandb_io
            from rl_guards.trl.log_routing import finding_summary

            wandb_io.set_summary(
                {
                    f"rl_guards/findings/{guard}/{kind}": finding_summary(self.session, (guard, kind))
                    for guard, kind in self.session.counts
                }
            )

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

    @staticmethod
    def _checkpoint_dir(args: Any, state: Any) -> str:
        return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")


__all__ = ["GuardError", "GuardRun", "install"]
