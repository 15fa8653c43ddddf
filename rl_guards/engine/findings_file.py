"""Findings to disk as they happen: a session listener appending to ``<rollouts folder>/findings.jsonl``
(format: :mod:`rl_guards.rollouts.findings`), on the main process only.

A line is written for the first finding of each kind, when its message is first known (later lines carry counts,
not messages), when its count reaches a power of two, and for every blocking finding; the stop record once, for the
finding whose error stops the run (the session's stop listener, or the agreed error when another rank stopped); all
kinds again at the end of training. So a run that
finds the same thing every step writes a few lines per kind, not one per step. The file is created with the first
finding (a healthy run writes none); a run that starts where the file exists (a resume, a rerun) appends a ``begin``
record and the restored counts. A write that fails is said once and never stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rl_guards.core.severity import BLOCKING
from rl_guards.guards.base import Finding, GuardSession
from rl_guards.rollouts.findings import FINDINGS_FILE, append_record

logger = logging.getLogger("rl_guards")


class FindingsFile:
    """Appends the session's findings to ``findings.jsonl`` in ``folder()`` (called when the first line is due)."""

    def __init__(self, session: GuardSession, folder: Callable[[], Path]) -> None:
        self.session = session
        self.folder = folder
        self.begin_step: int | None = None
        self._begun = False  # the begin record (and the restored counts) is written
        self._said: set[tuple[str, str]] = set()  # kinds whose message is on disk
        self._restored: set[tuple[str, str]] = set()  # kinds counted before this start (a resume): the begin record's
        self._stopped = False  # a stop record is on disk
        self._failed = False
        session.listeners.append(self.on_finding)
        session.stop_listeners.append(self.on_stop)

    def begin(self, step: int) -> None:
        """Training starts at ``step``: where the file already exists, say so now (readers forget older lines)."""
        self.begin_step = int(step)
        self._restored = set(self.session.counts)
        try:
            exists = (self.folder() / FINDINGS_FILE).is_file()
        except Exception:  # no folder to write to: said at the first write
            exists = False
        if exists:
            self._write_begin()

    def on_finding(self, finding: Finding, shown: bool) -> None:
        key = (finding.guard, finding.kind)
        count = self.session.counts.get(key, 0)
        first_message = bool(finding.message) and key not in self._said
        due = count <= 1 or first_message or finding.severity == BLOCKING or count & (count - 1) == 0
        if not due:
            return
        # the first message of a kind is the one shown (it goes with the first step); later lines update the count
        self._write(self._record(key, finding.message if first_message else "", finding.step))
        if finding.message:
            self._said.add(key)

    def on_stop(self, finding: Finding) -> None:
        """The finding whose error stops the run (the session's, so the record names what the error says)."""
        if not self._stopped:
            self._write_stop(finding.guard, finding.kind, finding.step, finding.message)

    def stop(self, error: Exception, step: int | None) -> None:
        """The run stops with ``error``: its stop record, unless a finding of this process already wrote one (a
        stop decided on another rank, or a guard that raised its own error, records no finding here)."""
        if not self._stopped:
            guard = getattr(error, "guard", "") or "rl_guards"
            self._write_stop(guard, "", getattr(error, "step", None) if step is None else step, str(error))

    def _write_stop(self, guard: str, kind: str, step: int | None, message: str) -> None:
        self._stopped = True
        self._write({"type": "stop", "guard": guard, "kind": kind, "step": step, "message": message,
                     "time": time.time()})  # fmt: skip

    def snapshot(self) -> None:
        """Every kind's current count (the end of training): exact counts on disk."""
        if not self.session.counts:
            return
        for key in sorted(self.session.counts):
            self._write(self._record(key, "", None))

    def _record(self, key: tuple[str, str], message: str, step: int | None) -> dict[str, Any]:
        return {
            "type": "finding", "guard": key[0], "kind": key[1], "severity": self.session.severity.get(key, "info"),
            "first_step": self.session.first_step.get(key), "count": self.session.counts.get(key, 0),
            "step": step, "message": message, "time": time.time(),
        }  # fmt: skip

    def _write_begin(self) -> None:
        self._begun = True
        self._write({"type": "begin", "step": self.begin_step, "time": time.time()})
        kept = {(f.guard, f.kind): f.message for f in self.session.findings}  # restored by a resume
        for key in sorted(self._restored):  # a kind found since then gets its own line from on_finding
            self._write(self._record(key, kept.get(key, ""), None))
            if kept.get(key):
                self._said.add(key)

    def _write(self, record: dict[str, Any]) -> None:
        if not self._begun and record["type"] != "begin":
            self._write_begin()
        try:
            append_record(self.folder(), record)
        except Exception as exc:  # disk full, an unwritable folder: the run matters more than this file
            if not self._failed:
                self._failed = True
                logger.warning("rl_guards: could not write the findings to %s: %s", FINDINGS_FILE, exc)
