"""What the guards found, on disk next to the rollout dumps: ``findings.jsonl``, one JSON object a line, appended as
findings happen (main process only), so a stopped or killed run still has them; read back by the report.

Records (``type``)::

    begin    {"type": "begin", "step": 0, "time": ...}     # a (resumed) run starts: readers forget what came before;
                                                           # the restored counts follow as finding records
    finding  {"type": "finding", "guard", "kind", "severity", "first_step", "count", "step", "message", "time"}
                                                           # the latest line of a (guard, kind) holds its count
    stop     {"type": "stop", "guard", "kind", "step", "message", "time"}   # a guard stopped the run

Each line is written with one ``os.write`` on a file opened for appending: a reader sees whole lines only (a kill
can leave the last one cut: readers skip it, and the next record starts on a line of its own). No guard machinery
here: the adapter's listener writes the records (:class:`rl_guards.engine.findings_file.FindingsFile`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.severity import BLOCKING, SEVERITIES, WARNING, rank, severity_of
from rl_guards.rollouts.store import default_rollouts_dir
from rl_guards.rollouts.untrusted_json import UnreadableJSON, parse_json

FINDINGS_FILE = "findings.jsonl"
FINDING_FIELDS = ("guard", "kind", "severity", "first_step", "count", "message")


def append_record(folder: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append one record as one line (one ``write`` call on an ``O_APPEND`` file); OSError when it cannot."""
    path = Path(folder) / FINDINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut by a kill: never glue a record to it
            line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)


@dataclass
class FindingsLog:
    """The findings of the latest run in a folder: one entry per (guard, kind), the stop, unreadable lines."""

    path: Path | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)  # most severe first, then by first step
    stop: dict[str, Any] | None = None
    bad_lines: int = 0


def find_findings_file(run_dir: str | os.PathLike[str]) -> Path | None:
    """``findings.jsonl`` of a run: in ``run_dir`` itself, its default rollouts folder (TRL runs),
    ``<run_dir>/rl_guards`` (verl runs, next to that folder) or ``<run_dir>/rollouts``."""
    run = Path(os.path.expandvars(os.path.expanduser(str(run_dir))))
    for folder in (run, default_rollouts_dir(run), default_rollouts_dir(run).parent, run / "rollouts"):
        if (folder / FINDINGS_FILE).is_file():
            return folder / FINDINGS_FILE
    return None


def _clean(record: dict[str, Any]) -> dict[str, Any] | None:
    """A finding record with the fields readers use, or None when it is damaged or crafted."""
    out = {name: record.get(name) for name in FINDING_FIELDS}
    if not isinstance(out["guard"], str) or not isinstance(out["kind"], str):
        return None
    out["severity"] = severity_of(out["severity"])  # "error" (written before the one scale) is "blocking"
    if out["severity"] not in SEVERITIES:
        out["severity"] = WARNING
    for name in ("first_step", "count"):
        value = out[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            out[name] = None
    out["message"] = out["message"] if isinstance(out["message"], str) else ""  # a crafted list or object: none
    step = record.get("step")
    out["step"] = step if isinstance(step, int) and not isinstance(step, bool) else None
    return out


def load_findings(path: str | os.PathLike[str] | None) -> FindingsLog:
    """Read ``findings.jsonl`` (as written by :func:`append_record`): the latest state of each kind since the last
    ``begin`` record, and the stop. Lines that are no JSON object (a cut last line, damage) are counted, not fatal."""
    log = FindingsLog(path=Path(path) if path is not None else None)
    if log.path is None or not log.path.is_file():
        return log
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    with open(log.path, "rb") as handle:
        for raw in handle:
            try:
                record = parse_json(raw)
            except UnreadableJSON:
                record = None
            if not isinstance(record, dict):
                log.bad_lines += 1
                continue
            kind = record.get("type")
            if kind == "begin":
                latest, log.stop = {}, None
            elif kind == "finding":
                clean = _clean(record)
                if clean is None:
                    log.bad_lines += 1
                    continue
                key = (clean["guard"], clean["kind"])
                previous = latest.get(key)
                if previous is not None and not clean["message"]:
                    clean["message"] = previous["message"]  # a count update keeps the message said before
                latest[key] = clean
            elif kind == "stop":
                clean = _clean({**record, "severity": BLOCKING})
                if clean is None:
                    log.bad_lines += 1
                    continue
                log.stop = clean
    log.findings = sorted(
        latest.values(),
        key=lambda f: (-rank(f["severity"]), f["first_step"] is None, f["first_step"] or 0),
    )
    return log
