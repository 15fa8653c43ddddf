"""The engine on a verl trainer: built from the verl config in the trainer process, fed one step's rows at a time.

Both trainers' hooks (:mod:`rl_guards.verl.replay` for the default V1 trainer, :mod:`rl_guards.verl.agent_loop`
for the legacy one) drive a :class:`VerlGuardRun` the same way, as the TRL adapter drives the engine::

    run = VerlGuardRun(config)                   # the trainer's config: tokenizer, scorer, folders, guards
    run.starting(step)                           # before each step's rollout (training begins at the first)
    metrics = run.process(step_batch)            # each training step's rows, before verl computes advantages:
                                                 #   begin (first step) / step_end (previous step) / check_tensors /
                                                 #   process; a stop raises the guard's GuardError here
    run.saved(step, checkpoint_dir)              # a checkpoint was written (V1: the checkpoint callback)
    run.end(step)                                # the last step

``process`` returns the guards' metrics as ``{key: value}`` (``rl_guards/<guard>/<metric>``,
``rl_guards_task/<task>/<metric>``; the mean where a key got several values), for the hook to hand to verl's own
logger. Findings go to ``<run folder>/rl_guards/findings.jsonl`` as they happen, dumps to
``<run folder>/rl_guards/rollouts/`` (the run folder: ``reward.rl_guards.output_dir``, else
``trainer.default_local_dir``); ``rl-guards rollouts / report / drift <run folder>`` read them.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from rl_guards.chat.markup import markup_from_config
from rl_guards.engine.driver import Engine
from rl_guards.engine.state import engine_state, restore_engine
from rl_guards.guards.base import Guard
from rl_guards.rewards.row_errors import RowErrorLog
from rl_guards.verl.context import UNAVAILABLE, VERL_GUARDS, build_context, text_decoder
from rl_guards.verl.rows import StepBatch, StepRows, step_rows
from rl_guards.verl.settings import GUARDS_DIR, VerlSettings, select

logger = logging.getLogger("rl_guards")

STATE_FILE = "rl_guards_state.json"  # in verl's checkpoint folder (global_step_<k>/)


class VerlGuardRun:
    """Holds the engine of one verl run and turns each step's rows into its batches."""

    def __init__(
        self,
        config: Any,
        *,
        tokenizer: Any = None,
        guards: list[type[Guard]] | None = None,
        settings: VerlSettings | None = None,
    ) -> None:
        self.config = config
        self.settings = settings or VerlSettings.from_config(config)
        guards_config = self.settings.guards.validate()
        classes = guards if guards is not None else VERL_GUARDS
        ctx = build_context(config, self.settings, tokenizer)
        self.error_log = RowErrorLog()
        if guards_config.reward_errors.enabled:
            ctx.reward_error_log = self.error_log
        self.markup = markup_from_config(guards_config.think_tags, ctx.template_text)
        self.folder = Path(ctx.output_dir) / GUARDS_DIR
        self.unavailable = {name: why for name, why in UNAVAILABLE.items() if getattr(guards_config, name).enabled}
        self.engine = Engine(
            guards_config,
            [cls(guards_config) for cls in classes],
            ctx,
            findings_folder=lambda: self.folder,
        )
        self.engine.metrics_sink = self._collect
        self.engine.log_now = self._log_now
        self.engine.setup()
        self._decode_all = text_decoder(ctx.tokenizer)
        self.group_size = int(select(config, "actor_rollout_ref.rollout.n", 0) or 0)
        self.response_length = int(select(config, "actor_rollout_ref.rollout.response_length", 0) or 0)
        self.task_column = str(select(config, "data.reward_fn_key", "data_source"))
        if guards_config.tasks.task_column != "task":  # the user named a column: it wins over verl's reward key
            self.task_column = guards_config.tasks.task_column
        self.norm_by_std = bool(select(config, "algorithm.norm_adv_by_std_in_grpo", True))
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self._begun = False
        self._ended = False
        self._open_step: int | None = None  # a step whose rows were processed and whose end is not yet told
        self.steps_seen = 0
        if self.unavailable:
            logger.info(
                "rl_guards on verl: not available here: %s",
                "; ".join(f"{k} ({v})" for k, v in sorted(self.unavailable.items())),
            )

    # ----- the engine's parts, as a run handle shows them -------------------------------------------------------
    @property
    def session(self) -> Any:
        return self.engine.session

    @property
    def findings(self) -> list[Any]:
        return self.engine.session.findings

    @property
    def guards(self) -> list[Guard]:
        return self.engine.guards

    def summary(self) -> str:
        """Readable table of findings and what is not available on verl."""
        return self.engine.summary((), self.unavailable)

    # ----- per step ---------------------------------------------------------------------------------------------
    def starting(self, step: int) -> None:
        """The trainer is about to roll out ``step``: training begins here at the first one, so that the run's clock
        (the reward probes' time budget is a share of it) counts the first step's rollout as well."""
        if not self._begun:
            self._begin(int(step))

    def process(self, batch: StepBatch) -> dict[str, float]:
        """One training step's rows, before verl computes advantages and updates: the guards' metrics (raises the
        guard's error when one stops the run)."""
        step = int(batch.step)
        if not self._begun:
            self._begin(step)
        elif self._open_step is not None and step > self._open_step:
            self._close(self._open_step, final=False)
        rows = self._rows(batch)
        if rows is not None:
            self._time_scorer(rows)
            self.engine.check_tensors(step, rows.tensors)
            taken = rows.errors.take()
            self.error_log.errors, self.error_log.failed_whole = taken
            self.engine.process(rows.rows)
        self._open_step = step
        self.steps_seen += 1
        return self.take_metrics()

    def _rows(self, batch: StepBatch) -> StepRows | None:
        """The engine's rows of the batch; None (said once, counted) when they cannot be built."""
        try:
            rows = step_rows(
                batch,
                ctx=self.engine.ctx,
                markup=self.markup,
                group_size=self.group_size,
                response_length=self.response_length,
                task_column=self.task_column,
                default_task=self.settings.guards.tasks.default_task,
                norm_adv_by_std=self.norm_by_std,
                decode_text=self._decode_all,
            )
        except Exception as exc:  # the driver's own bug or an unexpected layout: the run goes on unguarded
            self.engine.record_warning(
                "hook", "rows_failed", f"step {batch.step}: the rows could not be read ({type(exc).__name__}: {exc})",
                batch.step,
            )  # fmt: skip
            return None
        groups = len(set(batch.columns.get("uid") or []))
        missing = max(0, (batch.expected_groups or 0) - groups)
        if missing:
            self._say_once(
                "failed_groups",
                f"step {batch.step}: {missing} of the {batch.expected_groups} prompt groups verl sampled have no rows: "
                "every rollout session of those prompts failed, and verl's V1 trainer logs the exception ('Error in "
                "_run_prompt') and trains on the other groups. Causes: a reward worker's exception (with "
                "reward_errors off), an empty response (verl 0.9.1 cannot store one: rm_scores[-1] of no token), an "
                "agent loop error. Counted in rl_guards/hook/failed_groups.",
                batch.step,
            )
            self._collect("train", {"rl_guards/hook/failed_groups": [float(missing)]})
        if rows.left_out:
            self._say_once(
                "incomplete_groups",
                f"step {batch.step}: {rows.left_out} row(s) of groups with other than rollout.n={self.group_size} rows "
                "were left out of the guards (counted in rl_guards/hook/rows_left_out): on verl's V1 trainer a rollout "
                "session that fails leaves its group short (see failed_groups), and verl trains on the rest.",
                batch.step,
            )
            self._collect("train", {"rl_guards/hook/rows_left_out": [float(rows.left_out)]})
        return rows

    def _time_scorer(self, rows: StepRows) -> None:
        """The scorer's time on each of the step's rows (one text per call, as verl calls it), measured in the reward
        workers, to the probes' timer: their deadlines and their share of the run's time are sized from it."""
        calls = self.engine.ctx.checked_calls
        if calls is None or not calls.callers:
            return
        timer = calls.timer(0)
        for call in rows.rows.reward_inputs or ():
            seconds = getattr(call, "seconds", None)
            if seconds is not None:
                timer.add(1, seconds)

    def _say_once(self, kind: str, message: str, step: int) -> None:
        """A finding of the driver's own (rows it could not give the guards), recorded and warned once."""
        if ("hook", kind) not in self.engine.session.counts:
            self.engine.record_warning("hook", kind, message, step)

    # ----- events -----------------------------------------------------------------------------------------------
    def _begin(self, step: int) -> None:
        """Training starts before ``step`` (verl counts from 1): a resumed run's state is restored first."""
        self._begun = True
        start = max(step - 1, 0)
        if start > 0:
            self._restore(start)
        self.engine.begin(start)

    def _close(self, step: int, *, final: bool, checkpoint_dir: str | None = None) -> None:
        self._open_step = None
        self.engine.step_end(step, final=final, checkpoint_dir=checkpoint_dir)

    def saved(self, step: int, checkpoint_dir: str, *, final: bool = False) -> dict[str, float]:
        """verl wrote ``checkpoint_dir`` (after training ``step``): the step ends with its checkpoint's dump, and the
        guards' state is saved next to it for a resume."""
        if not self._begun:
            return {}
        if self._open_step is not None:
            self._close(self._open_step, final=final, checkpoint_dir=checkpoint_dir)
        self.engine.saved(step, checkpoint_dir)
        self._save_state(step, checkpoint_dir)
        if final:
            self.end(step)
        return self.take_metrics()

    def end(self, step: int) -> None:
        """The run ends after ``step`` (once)."""
        if self._ended or not self._begun:
            return
        self._ended = True
        if self._open_step is not None:
            self._close(self._open_step, final=True)
        self.engine.end(step)
        self.engine.flush(step)

    # ----- state ------------------------------------------------------------------------------------------------
    def _save_state(self, step: int, checkpoint_dir: str) -> None:
        path = Path(checkpoint_dir) / STATE_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"attributes": engine_state(self.engine, step)}, sort_keys=True))
            os.replace(tmp, path)
        except Exception as exc:  # the checkpoint matters more than the guards' state
            self.engine.record_warning("state", "state_not_saved", f"could not write {path}: {exc}", step)

    def _restore(self, step: int) -> None:
        folder = select(self.config, "trainer.default_local_dir")
        path = Path(str(folder)) / f"global_step_{step}" / STATE_FILE if folder else None
        if path is None or not path.is_file():
            return
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.engine.record_warning("state", "state_not_restored", f"could not read {path}: {exc}", step)
            return
        restore_engine(self.engine, saved, step)

    # ----- metrics ----------------------------------------------------------------------------------------------
    def _collect(self, mode: str, metrics: dict[str, list[float]]) -> None:
        prefix = "" if mode == "train" else "val-rl_guards/"
        for key, values in metrics.items():
            self._metrics[prefix + key].extend(values)

    def take_metrics(self) -> dict[str, float]:
        """The metrics gathered since the last call, one number per key (the mean), as verl's loggers take them."""
        self.engine.flush_metrics("train")
        out = {k: sum(v) / len(v) for k, v in self._metrics.items() if v and all(math.isfinite(x) for x in v)}
        self._metrics.clear()
        return out

    def _log_now(self, step: int | None) -> None:
        """A stop: verl will not log the failing step, so its guard metrics go to the log here."""
        metrics = self.take_metrics()
        if metrics:
            logger.warning(
                "rl_guards: metrics of the stopped step %s: %s",
                step,
                ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())),
            )


__all__ = ["STATE_FILE", "VerlGuardRun"]
