"""Findings, metrics and modes of a run: :class:`GuardSession` holds them, a guard writes through a :class:`Reporter`.

Findings are said on the ``rl_guards`` logger, once each (:mod:`rl_guards.console`), on the one severity scale
(:mod:`rl_guards.core.severity`). Tables and rendered reports for a tracker go through :meth:`Reporter.table` and
:meth:`Reporter.html`; the adapter that drives the guards sets :attr:`GuardSession.tracker` (W&B, trackio) and
delivers them, so no guard imports a tracker. Without one (guards driven by hand, tests, preflight) they are dropped.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from rl_guards.config import GuardConfig
from rl_guards.console import Column, render_table, say
from rl_guards.core.metric_keys import metric_key, task_metric_key
from rl_guards.core.metric_set import MetricFilter
from rl_guards.core.severity import BLOCKING, INFO, SEVERITIES, WARNING, mode_severity, rank, severity_of
from rl_guards.errors import GuardError

logger = logging.getLogger("rl_guards")


class Tracker(Protocol):
    """Where the adapter delivers guards' tables, reports and summary values (W&B, trackio)."""

    def active(self) -> bool: ...

    def log(self, data: dict[str, Any], step: int | None = None) -> bool: ...

    def table(self, columns: list[str], rows: list[list[Any]]) -> Any: ...

    def html(self, text: str) -> Any: ...

    def set_summary(self, values: dict[str, Any]) -> bool: ...


@dataclass
class Finding:
    """One thing a guard noticed."""

    guard: str
    kind: str  # short machine code, e.g. "dead_task", "prompt_unmasked"
    severity: str  # "blocking" (raise mode: stops the run), "warning", "info" (rl_guards.core.severity)
    message: str
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Pending:
    """A finding whose message is rendered later (see :meth:`GuardSession.settle`)."""

    finding: Finding
    render: Callable[[], str]
    rows: tuple[int, ...]  # rows whose text the message shows
    shown: bool  # warned (the first of its kind)


class GuardSession:
    """Collects metrics and findings of all guards for a run; applies modes; warns once per kind.

    Its state (:meth:`state_dict`) is saved with every checkpoint and restored on resume, so counts, first steps
    and warnings continue as in an uninterrupted run. Start-of-training checks run again on every resume; while
    :attr:`phase` is ``"begin"``, a kind that the restored run already recorded at its own start is not counted
    twice.
    """

    MAX_FINDINGS_PER_KIND = 5  # findings kept per (guard, kind), besides every error: bounded memory

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}
        self.findings: list[Finding] = []
        self.counts: Counter[tuple[str, str]] = Counter()  # (guard, kind) -> occurrences
        self.first_step: dict[tuple[str, str], int | None] = {}
        self.severity: dict[tuple[str, str], str] = {}  # (guard, kind) -> most severe severity seen
        self.phase = "run"  # "begin" while the start-of-training checks run
        # False: a raise-mode violation raises at once. True (the TRL adapter): stops and lazy messages wait for
        # settle(), so every guard of the batch runs and the text of remote rows can be fetched first.
        self.defer = False
        self.begin_keys: set[tuple[str, str]] = set()  # kinds recorded by start-of-training checks
        self._restored_begin_keys: set[tuple[str, str]] = set()
        self._warned: set[tuple[str, str]] = set()
        self.metric_filter: MetricFilter | None = None  # None: every metric (guards driven by hand, tests)
        # called as (finding, shown) when a finding is counted (its message may still be pending) and when it is
        # shown; the TRL adapter writes W&B summary entries and alerts from it
        self.listeners: list[Callable[[Finding, bool], None]] = []
        self._pending: list[_Pending] = []  # findings whose message is rendered at settle()
        # one-time notes (guard, kind) -> text: said once, never counted as findings (a confirmation, advice, a
        # check that could not run without evidence of a problem)
        self.notes: dict[tuple[str, str], str] = {}
        self._stops: list[tuple[type[GuardError], Finding]] = []  # raise-mode findings since the last settle()
        # called with the finding whose error stops the run (its message is the error's): the one source of truth
        # for every place that names the stop (findings.jsonl's stop record, the tracker's stopped_by)
        self.stop_listeners: list[Callable[[Finding], None]] = []
        self.tracker: Tracker | None = None  # set by the adapter: where Reporter.table/html/summary go
        self.verbose = False  # console.verbose: info findings and notes said at INFO too (else DEBUG only)

    def reporter(self, guard: str, config: GuardConfig, step: int | None) -> Reporter:
        return Reporter(self, guard, config, step)

    def add_metric(self, key: str, value: float) -> None:
        if self.metric_filter is not None and not self.metric_filter.keep(key, float(value)):
            return
        self.metrics.setdefault(key, []).append(float(value))

    def pop_metrics(self) -> dict[str, list[float]]:
        """Take the metrics collected since the last call."""
        out, self.metrics = self.metrics, {}
        return out

    def note(self, guard: str, kind: str, message: str) -> bool:
        """Say ``message`` once per (guard, kind) at info level; not a finding: no count, alert or summary entry.

        Returns True when it was said now (False: said before, in this run or before a resume).
        """
        key = (guard, kind)
        if key in self.notes:
            return False
        self.notes[key] = message
        say(f"[rl_guards/{guard}] note: {message}", level=logging.INFO if self.verbose else logging.DEBUG)
        return True

    def record(
        self,
        finding: Finding,
        *,
        warn: bool,
        render: Callable[[], str] | None = None,
        rows: Sequence[int] = (),
        error: type[GuardError] | None = None,
    ) -> None:
        """Count a finding and show it: warned once per kind (``warn``), else logged at info level.

        ``render`` builds the message later, at :meth:`settle` (after the adapter moved the text of ``rows`` to
        this process); ``error`` (raise mode) makes :meth:`settle` return the error that stops the run.
        """
        key = (finding.guard, finding.kind)
        repeated_start_check = self.phase == "begin" and key in self._restored_begin_keys
        if self.phase == "begin":
            self.begin_keys.add(key)
        kept = False
        if not repeated_start_check:
            self.counts[key] += 1
            self.first_step.setdefault(key, finding.step)
            if rank(finding.severity) > rank(self.severity.get(key, INFO)):
                self.severity[key] = finding.severity
            self.severity.setdefault(key, finding.severity)
            # Keep every blocking finding, and the first few findings of each kind, so memory stays bounded.
            if finding.severity == BLOCKING or self.counts[key] <= self.MAX_FINDINGS_PER_KIND:
                self.findings.append(finding)
                kept = True
        shown = warn and key not in self._warned
        if shown:
            self._warned.add(key)
        if error is not None:
            self._stops.append((error, finding))
        if render is not None and (kept or shown or error is not None):
            self._pending.append(_Pending(finding, render, tuple(int(r) for r in rows), shown))
        elif render is None:
            self._show(finding, shown=shown, warn=warn)
        else:
            self._notify(finding, False)  # counted, never shown: listeners still see the count

    def _show(self, finding: Finding, *, shown: bool, warn: bool) -> None:
        """One message per finding, on the ``rl_guards`` logger: a warning in full, once per kind; a blocking
        finding in full unless it is the one whose error stops the run (that error carries the same text); an info
        finding (and a repeat) only in verbose mode."""
        self._notify(finding, shown)
        line = f"[rl_guards/{finding.guard}] {finding.severity}: {finding.message}"
        if finding.severity == BLOCKING:
            stopping = any(f is finding for _, f in self._stops) or not self.defer
            first_stop = not self._stops or self._stops[0][1] is finding
            if not (stopping and first_stop):
                say(line, severity=BLOCKING)
        elif shown:
            say(line, severity=WARNING)
        elif not warn:
            say(line, level=logging.INFO if self.verbose else logging.DEBUG)

    def _notify(self, finding: Finding, shown: bool) -> None:
        for listener in self.listeners:
            try:
                listener(finding, shown)
            except Exception as exc:  # a listener (W&B) must never break the accounting
                logger.warning("rl_guards: finding listener failed: %s", exc)

    @property
    def stopping(self) -> Finding | None:
        """The first raise-mode finding not yet settled (the one that stops the run), or None."""
        return self._stops[0][1] if self._stops else None

    def pending_rows(self) -> set[int]:
        """Rows whose text the messages still to render need."""
        return {row for pending in self._pending for row in pending.rows}

    def settle(self) -> GuardError | None:
        """Render deferred messages, show them, and return the error of the first raise-mode finding (or None)."""
        pending, self._pending = self._pending, []
        for item in pending:
            try:
                item.finding.message = item.render()
            except Exception as exc:  # a message must never hide the finding it reports
                item.finding.message = f"{item.finding.kind} (its message failed: {type(exc).__name__}: {exc})"
            self._show(item.finding, shown=item.shown, warn=item.shown or item.finding.severity == "warning")
        stops, self._stops = self._stops, []
        if not stops:
            return None
        error, finding = stops[0]
        self.stopped(finding)
        return error(f"[rl_guards/{finding.guard}] {finding.message}", guard=finding.guard, step=finding.step)

    def stopped(self, finding: Finding) -> None:
        """``finding`` stops the run: tell the stop listeners (never raises)."""
        for listener in self.stop_listeners:
            try:
                listener(finding)
            except Exception as exc:  # the stop matters more than where it is written down
                logger.warning("rl_guards: stop listener failed: %s", exc)

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per (guard, kind), most severe first: severity, count and first step (None when unknown)."""
        rows = [
            {
                "guard": guard,
                "kind": kind,
                "severity": self.severity.get((guard, kind), "info"),
                "count": count,
                "first_step": self.first_step.get((guard, kind)),
            }
            for (guard, kind), count in sorted(self.counts.items())
        ]
        rows.sort(key=lambda r: -rank(r["severity"]))  # stable: by name within a severity
        return rows

    def summary_text(self, *, styled: bool = False, width: int | None = None, notes: bool | None = None) -> str:
        """The end-of-run table of what the guards found (most severe first); then the notes said once (``notes``:
        default in verbose mode)."""
        rows = self.summary_rows()
        if not rows:
            lines = ["rl_guards: no findings."]
        else:
            table = render_table(
                ["severity", "guard/kind", Column("count", "right"), Column("first step", "right")],
                [[r["severity"], f"{r['guard']}/{r['kind']}", r["count"], _step(r["first_step"])] for r in rows],
                title="rl_guards findings",
                styled=styled,
                width=width,
                severity_column=0,
            )
            lines = [table]
        if self.notes and (self.verbose if notes is None else notes):
            lines.append("rl_guards notes (said once, not findings):")
            for (guard, kind), text in self.notes.items():
                first_line = text.strip().splitlines()[0] if text.strip() else ""
                lines.append(f"  {guard}/{kind}: {first_line}")
        return "\n".join(lines)

    # ----- resume -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: counts with first steps, kept findings, warned kinds, start-check kinds."""
        return {
            "counts": [
                [g, k, c, self.first_step.get((g, k)), self.severity.get((g, k), "info")]
                for (g, k), c in sorted(self.counts.items())
            ],
            "findings": [f.to_dict() for f in self.findings],
            "warned": sorted([g, k] for g, k in self._warned),
            "begin_keys": sorted([g, k] for g, k in self.begin_keys),
            "nonzero_metrics": sorted(self.metric_filter.nonzero_seen) if self.metric_filter is not None else [],
            "notes": [[g, k, text[:2000]] for (g, k), text in sorted(self.notes.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` in place (also accepts the 0.1 format: ``[guard, kind, count]`` rows)."""
        self.counts = Counter()
        self.first_step = {}
        self.severity = {}
        for row in state.get("counts", []):
            guard, kind, count = str(row[0]), str(row[1]), int(row[2])
            self.counts[(guard, kind)] = count
            first = row[3] if len(row) > 3 else None
            self.first_step[(guard, kind)] = None if first is None else int(first)
            self.severity[(guard, kind)] = severity_of(row[4]) if len(row) > 4 else WARNING
            if self.severity[(guard, kind)] not in SEVERITIES:  # "ok" is a status, never a finding's severity
                self.severity[(guard, kind)] = WARNING
        kept = [f for f in state.get("findings", []) if isinstance(f, dict)]
        self.findings = [Finding(**{**f, "severity": severity_of(f.get("severity"))}) for f in kept]
        self._warned = {(str(g), str(k)) for g, k in state.get("warned", [])}
        self.begin_keys = {(str(g), str(k)) for g, k in state.get("begin_keys", [])}
        self._restored_begin_keys = set(self.begin_keys)
        # notes said before the resume are not said again
        self.notes = {(str(n[0]), str(n[1])): str(n[2]) if len(n) > 2 else "" for n in state.get("notes", [])}
        if self.metric_filter is not None:
            self.metric_filter.nonzero_seen = set(state.get("nonzero_metrics", []))


def _step(step: int | None) -> Any:
    return "-" if step is None else step


class Reporter:
    """A guard's handle on the session for one batch: metrics, findings, violations."""

    def __init__(self, session: GuardSession, guard: str, config: GuardConfig, step: int | None) -> None:
        self.session = session
        self.guard = guard
        self.config = config
        self.step = step

    def metric(self, name: str, value: float) -> None:
        """Log ``rl_guards/<guard>/<name>``."""
        self.session.add_metric(metric_key(self.guard, name), value)

    def task_metric(self, task: str, name: str, value: float) -> None:
        """Log ``rl_guards_task/<task>/<name>`` (the task name encoded: :mod:`rl_guards.core.metric_keys`)."""
        self.session.add_metric(task_metric_key(task, name), value)

    def info(self, kind: str, message: str) -> None:
        """Record an observation that never stops the run."""
        self.session.record(Finding(self.guard, kind, INFO, message, self.step), warn=False)

    def note(self, kind: str, message: str) -> bool:
        """Say something once that is not a problem of this run (a confirmation, advice, a check that could not
        run): logged at info level and listed under the run summary's notes; no count, no alert. True: said now."""
        return self.session.note(self.guard, kind, message)

    def notice(self, kind: str, message: str) -> None:
        """Tell the user once (a warning), count it; never stops the run and is not a violation."""
        self.session.record(Finding(self.guard, kind, WARNING, message, self.step), warn=True)

    def suspect(self, kind: str, message: str | Callable[[], str], rows: Sequence[int] = ()) -> None:
        """Evidence that may be the model's own doing: warned once and counted (mode log: counted only), never a
        stop whatever the guard's mode. ``message`` may be rendered lazily, as for :meth:`violation`."""
        warn = self.config.mode != "log"
        render, text = self._message(message)
        finding = Finding(self.guard, kind, WARNING if warn else INFO, text, self.step)
        self.session.record(finding, warn=warn, render=render, rows=rows)

    def _message(self, message: str | Callable[[], str]) -> tuple[Callable[[], str] | None, str]:
        """``(render, text)``: a callable message is rendered later when the session defers, else now."""
        render = message if callable(message) and self.session.defer else None
        return render, "" if render else (message() if callable(message) else str(message))

    def violation(
        self,
        kind: str,
        message: str | Callable[[], str],
        error: type[GuardError] = GuardError,
        rows: Sequence[int] = (),
    ) -> None:
        """Something is wrong: stop the run, warn once, or only count, per the guard's mode.

        ``message`` may be a callable rendered after the hook returns, once the text of ``rows`` (global row
        indices) is on this process; in raise mode the run stops when the hook settles (every guard of the batch
        has run, so its metrics and other findings are complete).
        """
        mode = self.config.mode
        severity = mode_severity(mode)
        defer = self.session.defer
        render, text = self._message(message)
        finding = Finding(self.guard, kind, severity, text, self.step)
        stop = error if mode == "raise" and defer else None
        self.session.record(finding, warn=mode == "warn", render=render, rows=rows, error=stop)
        self.session.add_metric(metric_key(self.guard, "violations"), 1.0)
        if mode == "raise" and not defer:
            self.session.stopped(finding)
            raise error(f"[rl_guards/{self.guard}] {text}", guard=self.guard, step=self.step)

    # ----- tables and reports for a tracker (delivered by the adapter; dropped without one) -------------------
    @property
    def tracker_active(self) -> bool:
        """Whether a tracker run takes tables now (ask before building a costly one)."""
        tracker = self.session.tracker
        try:
            return tracker is not None and bool(tracker.active())
        except Exception:  # a tracker's problem is never the run's
            return False

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> bool:
        """Log a table under ``key`` to the tracker run, at this reporter's step (the trainer's step it is about);
        never raises. True: delivered."""
        return self._deliver(key, lambda t: t.log({key: t.table(columns, rows)}, step=self.step))

    def html(self, key: str, text: str) -> bool:
        """Log an HTML page (a rendered report) under ``key``, at this reporter's step; never raises. True:
        delivered."""
        return self._deliver(key, lambda t: t.log({key: t.html(text)}, step=self.step))

    def summary(self, values: dict[str, Any]) -> bool:
        """Set run-summary values on the tracker run; never raises. True: delivered."""
        return self._deliver("summary", lambda t: t.set_summary(values))

    def _deliver(self, what: str, send: Callable[[Tracker], Any]) -> bool:
        if not self.tracker_active:
            return False
        try:
            return bool(send(self.session.tracker))  # type: ignore[arg-type]
        except Exception as exc:  # a tracker's problem is never the run's
            logger.warning("rl_guards/%s: %s not logged to the tracker: %s", self.guard, what, exc)
            return False


__all__ = ["SEVERITIES", "Finding", "GuardSession", "Reporter", "Tracker"]
