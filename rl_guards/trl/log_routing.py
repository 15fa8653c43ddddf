"""Where rl_guards' signal shows up: tracker sections of its own, alerts and summary entries, a console status line.

The metrics travel in the trainer's own metric buffer, so they reach ``trainer.state.log_history`` and every
``report_to`` tracker. The callbacks the trainer already has are wrapped on the instance:

- HF's ``WandbCallback``: ``rl_guards/...`` and ``rl_guards_task/...`` keys are logged to the run as they are
  (``commit=False``, merged into the row HF commits right after, so the trainer step is their x-axis) instead of
  under ``train/``: W&B groups panels by the first path segment, so the guards' health and the per-task curves each
  get a section, apart from TRL's panels.
- HF's other tracker callbacks (trackio, TensorBoard, Comet, ...): while one logs, HF's ``rewrite_logs`` leaves
  those keys as they are, so they get the same sections there. trackio's logs its rows at the trainer's step (HF
  gives it none: trackio would number them itself) and carries the values held for it (:mod:`rl_guards.trl.wandb_io`)
  in the row it logs.
- the console printer (``PrinterCallback`` / ``ProgressCallback``): it prints the trainer's log without those keys;
  the status line (``[rl_guards] step 12: ok``, or the most severe level and the finding kinds so far) follows it on
  the ``rl_guards`` logger when the status changes, every ``console.status_every`` steps, and at every log in
  verbose mode (``console.verbose``).

Findings reach W&B and trackio as they happen: each kind's severity, count and first step in the run summary
(``rl_guards/findings/<guard>/<kind>``: ``{"severity", "count", "first_step"}``; notes are not findings; trackio:
the ``rl_guards/summary`` table at train end), and the first finding of each kind at warn or raise severity as an
alert (title ``rl_guards: <guard>/<kind>``, text the message with its decoded rows; at most ``MAX_ALERTS`` a run).
The effective GuardsConfig is written into the run config under ``rl_guards``. All of it is best effort, on the
main process only: tracker trouble never breaks training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rl_guards.config import ConsoleConfig
from rl_guards.console import say
from rl_guards.core.metric_keys import METRIC_PREFIX, TASK_PREFIX
from rl_guards.core.severity import BLOCKING, INFO, OK, worst
from rl_guards.guards.base import Finding, GuardSession
from rl_guards.trl import wandb_io

logger = logging.getLogger("rl_guards")

MAX_ALERTS = 20  # alerts a run sends at most (one per finding kind)
ALERT_CHARS = 3000  # characters of a message kept in an alert
STATUS_KINDS = 3  # finding kinds named on the console status line
_OURS = (f"{METRIC_PREFIX}/", TASK_PREFIX)
INTEGRATIONS = "transformers.integrations.integration_utils"  # the module of HF's tracker callbacks


def is_guard_key(key: str) -> bool:
    """A metric rl_guards logs (train mode; eval keys carry TRL's ``eval_`` prefix and stay with HF)."""
    return key.startswith(_OURS)


def _keeping_guard_keys(rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], Any]:
    """HF's ``rewrite_logs`` (``loss`` -> ``train/loss``) leaving rl_guards' keys in their own section."""

    def rewrite_logs(d: dict[str, Any]) -> dict[str, Any]:
        ours = {k: v for k, v in d.items() if is_guard_key(k)}
        return {**rewrite({k: v for k, v in d.items() if k not in ours}), **ours}

    rewrite_logs.keeps_guard_keys = True  # type: ignore[attr-defined]
    return rewrite_logs


def finding_summary(session: GuardSession, key: tuple[str, str]) -> dict[str, Any]:
    """What the run summary holds for one finding kind: its severity, count and first step."""
    return {
        "severity": session.severity.get(key, "info"),
        "count": session.counts.get(key, 0),
        "first_step": session.first_step.get(key),
    }


class _AtStep:
    """The ``trackio`` module as HF's ``TrackioCallback`` holds it, with ``log`` at the trainer's step by default."""

    def __init__(self, module: Any, step: int) -> None:
        self._module, self._step = module, step

    def log(self, metrics: dict[str, Any], step: int | None = None) -> Any:
        return self._module.log(metrics, step=self._step if step is None else step)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class SignalRouter:
    """Wraps the trainer's tracker and console callbacks, and turns findings into summary entries and alerts."""

    def __init__(
        self, trainer: Any, session: GuardSession, is_main_process: bool, console: ConsoleConfig | None = None
    ) -> None:
        self.session = session
        self.is_main = is_main_process
        self.console = console or ConsoleConfig()
        self._status: tuple[str, tuple[str, ...]] | None = None  # the status said last: level and finding kinds
        self._status_step = 0
        self.alerted: set[tuple[str, str]] = set()
        self.wrapped: list[str] = []
        self.before_tracker_end: Callable[[Any], None] | None = None  # called before a tracker finishes its run
        handler = getattr(trainer, "callback_handler", None)
        callbacks = list(getattr(handler, "callbacks", []))
        trackio = any(type(cb).__name__ == "TrackioCallback" for cb in callbacks)
        if is_main_process:
            wandb_io.reset_trackio(merge=trackio)
        for callback in callbacks:
            name = type(callback).__name__
            if name == "WandbCallback":
                self._wrap_wandb(callback)
                self.wrapped.append(name)
            elif name in ("PrinterCallback", "ProgressCallback"):
                self._wrap_printer(callback)
                self.wrapped.append(name)
            elif type(callback).__module__ == INTEGRATIONS:  # trackio, TensorBoard, Comet, MLflow, ...
                self._wrap_tracker(callback)
                self.wrapped.append(name)
        session.listeners.append(self.on_finding)
        session.stop_listeners.append(self.on_stop)

    def bind(self, session: GuardSession) -> None:
        """Route another session's findings (a new run on the same trainer) instead; its alerts start over."""
        if self.on_finding in self.session.listeners:
            self.session.listeners.remove(self.on_finding)
        if self.on_stop in self.session.stop_listeners:
            self.session.stop_listeners.remove(self.on_stop)
        self.session = session
        self.alerted = set()
        self._status = None
        session.listeners.append(self.on_finding)
        session.stop_listeners.append(self.on_stop)

    # ----- logs ---------------------------------------------------------------------------------------------
    def _wrap_wandb(self, callback: Any) -> None:
        original = callback.on_log

        def on_log(args: Any, state: Any, control: Any, model: Any = None, logs: Any = None, **kwargs: Any) -> Any:
            if logs and state.is_world_process_zero and getattr(callback, "_wandb", None) is not None:
                ours = {k: v for k, v in logs.items() if is_guard_key(k)}
                if ours:
                    if not getattr(callback, "_initialized", True):
                        callback.setup(args, state, model)
                    wandb_io.log(ours)  # commit=False: the row HF commits next carries them, at this step
                    logs = {k: v for k, v in logs.items() if k not in ours}
            return original(args, state, control, model=model, logs=logs, **kwargs)

        callback.on_log = on_log

    def _wrap_tracker(self, callback: Any) -> None:
        """Another tracker's callback: HF's ``rewrite_logs`` would file our keys under ``train/``; while it logs,
        that function keeps them as they are. trackio also gets the tables and reports held for it in the same row,
        and the held values and summary before HF's callback finishes its run."""
        import transformers.integrations.integration_utils as integrations

        original_log = callback.on_log
        trackio = type(callback).__name__ == "TrackioCallback"

        def on_log(args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            module = getattr(callback, "_trackio", None) if trackio else None
            if trackio and logs is not None and state.is_world_process_zero:
                logs = {**logs, **wandb_io.take_trackio_rows()}
                if module is not None:  # HF logs without a step: trackio would count its own; the trainer's instead
                    callback._trackio = _AtStep(module, int(state.global_step))
            rewrite = integrations.rewrite_logs
            try:
                if getattr(rewrite, "keeps_guard_keys", False):  # already inside a wrapped call
                    return original_log(args, state, control, logs=logs, **kwargs)
                integrations.rewrite_logs = _keeping_guard_keys(rewrite)
                try:
                    return original_log(args, state, control, logs=logs, **kwargs)
                finally:
                    integrations.rewrite_logs = rewrite
            finally:
                if module is not None:
                    callback._trackio = module

        callback.on_log = on_log
        if trackio:
            original_end = callback.on_train_end

            def on_train_end(args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                try:
                    if self.before_tracker_end is not None:  # every rank: the train-end work may be collective
                        self.before_tracker_end(state)
                finally:  # a guard stopping here still leaves the tracker's run finished
                    if self.is_main:
                        wandb_io.flush_trackio()
                    result = original_end(args, state, control, **kwargs)
                return result

            callback.on_train_end = on_train_end

    def _wrap_printer(self, callback: Any) -> None:
        original = callback.on_log

        def on_log(args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            if not logs or not any(is_guard_key(k) for k in logs):
                return original(args, state, control, logs=logs, **kwargs)
            result = original(
                args, state, control, logs={k: v for k, v in logs.items() if not is_guard_key(k)}, **kwargs
            )
            if state.is_world_process_zero:
                self.say_status(int(state.global_step))
            return result

        callback.on_log = on_log

    def status(self) -> tuple[str, list[dict[str, Any]]]:
        """The most severe level found so far (``ok`` when nothing above info) and its warning/blocking kinds."""
        rows = [r for r in self.session.summary_rows() if r["severity"] != INFO]
        return worst(r["severity"] for r in rows), rows

    def say_status(self, step: int) -> bool:
        """Say the status line when it changed (level or finding kinds), at each multiple of
        ``console.status_every`` steps, and at every log in verbose mode; True when it was said."""
        level, rows = self.status()
        now = (level, tuple(sorted(f"{r['guard']}/{r['kind']}" for r in rows)))
        every = self.console.status_every
        due = self.console.verbose or now != self._status or step // every != self._status_step // every
        if not due:
            return False
        self._status, self._status_step = now, step
        say(self.status_line(step), severity=level, level=logging.INFO)
        return True

    def status_line(self, step: int) -> str:
        """``[rl_guards] step 12: ok`` or ``[rl_guards] step 12: warning: 2 finding kinds: think_tags/unclosed x3,
        ...`` (the most severe level so far, then the warning/blocking kinds, most frequent first)."""
        level, rows = self.status()
        if not rows:
            return f"[rl_guards] step {step}: {OK}"
        rows.sort(key=lambda r: (-r["count"], r["guard"], r["kind"]))
        named = ", ".join(f"{r['guard']}/{r['kind']} x{r['count']}" for r in rows[:STATUS_KINDS])
        more = f" (+{len(rows) - STATUS_KINDS} more kinds)" if len(rows) > STATUS_KINDS else ""
        return f"[rl_guards] step {step}: {level}: {len(rows)} finding kind(s): {named}{more}"

    # ----- findings -----------------------------------------------------------------------------------------
    def on_finding(self, finding: Finding, shown: bool) -> None:
        """Summary entries for every finding; an alert for the first of each kind at warn or raise severity."""
        if not self.is_main or wandb_io.active_run() is None:
            return
        key = (finding.guard, finding.kind)
        name = f"{finding.guard}/{finding.kind}"
        wandb_io.set_summary({f"rl_guards/findings/{name}": finding_summary(self.session, key)})
        loud = shown or finding.severity == BLOCKING
        if loud and finding.message and key not in self.alerted and len(self.alerted) < MAX_ALERTS:
            self.alerted.add(key)
            text = finding.message if len(finding.message) <= ALERT_CHARS else finding.message[:ALERT_CHARS] + " …"
            wandb_io.alert(f"rl_guards: {name}", text, finding.severity)

    def on_stop(self, finding: Finding) -> None:
        """The finding whose error stops the run: ``rl_guards/stopped_by`` names it (the session's one stop)."""
        if self.is_main and wandb_io.active_run() is not None:
            wandb_io.set_summary({"rl_guards/stopped_by": f"{finding.guard}/{finding.kind} at step {finding.step}"})

    def write_config(self, config: dict[str, Any]) -> None:
        """The effective GuardsConfig, under ``rl_guards`` in the run config."""
        if self.is_main and wandb_io.active_run() is not None:
            wandb_io.update_config({"rl_guards": config})
