"""The drift probe records a run writes (``<rollouts folder>/drift/step_N.json``): finite JSON on the way out, and
read back for the CLI and the report.

A record is written by :class:`rl_guards.guards.drift.DriftGuard` through :func:`record_text`: every number finite
(an infinite or NaN value is written as null and counted in ``nonfinite_dropped``), so no reader meets
``Infinity``. Readers take every file as untrusted: a file that is no record (no JSON object, no step) is named and
skipped; a statistic that is no finite number is left out of its record, which keeps the rest (its name in
``unreadable_fields``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rl_guards.core.behaviour import BehaviourStats, Drift, Thresholds, compare
from rl_guards.rollouts.render import printable
from rl_guards.rollouts.store import default_rollouts_dir
from rl_guards.rollouts.untrusted_json import read_json

TABLE_STATS: tuple[tuple[str, str], ...] = (
    ("length", "length"),
    ("repetition", "repeat"),
    ("distinct_2", "distinct2"),
    ("thinking_share", "thinking"),
    ("empty_answer_rate", "empty"),
    ("terminated", "ended"),
    ("reward_total", "reward"),
)


def find_drift_dir(run_dir: str | os.PathLike[str]) -> Path:
    """The drift folder of a run: given directly, under the rollouts folder, or under ``<run>/rollouts``."""
    run = Path(os.path.expandvars(os.path.expanduser(str(run_dir))))
    for candidate in (run, run / "drift", default_rollouts_dir(run) / "drift", run / "rollouts" / "drift"):
        if any(candidate.glob("step_*.json")):
            return candidate
    raise FileNotFoundError(
        f"no drift records under {run}: looked in {run / 'drift'} and {default_rollouts_dir(run) / 'drift'}. They are "
        "written by the drift guard at train start and at every checkpoint (drift.enabled)."
    )


def finite(value: Any) -> tuple[Any, int]:
    """``value`` with every non-finite float (inf, NaN) replaced by None, and how many were replaced."""
    if isinstance(value, float):
        return (value, 0) if math.isfinite(value) else (None, 1)
    if isinstance(value, dict):
        out, dropped = {}, 0
        for key, item in value.items():
            out[key], n = finite(item)
            dropped += n
        return out, dropped
    if isinstance(value, list | tuple):
        items = [finite(item) for item in value]
        return [item for item, _ in items], sum(n for _, n in items)
    return value, 0


def record_text(record: dict[str, Any]) -> str:
    """A record as the JSON text written to disk: finite numbers only (:func:`finite`; ``nonfinite_dropped`` counts
    the values written as null). A lone surrogate in a text (a task name decoded from bad bytes) is written as its
    JSON escape, which reads back as the same string."""
    clean, dropped = finite(record)
    if dropped:
        clean["nonfinite_dropped"] = dropped
    text = json.dumps(clean, ensure_ascii=False, indent=1, allow_nan=False)
    # backslashreplace turns U+D800 into the six characters \ud800: surrogates only occur inside JSON strings,
    # where that is the escape json.loads reads back
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def load_records(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records by step, and the names of files that could not be read (skipped): not JSON, no object, a step
    that is no non-negative integer (:func:`clean_record`). A record with unreadable statistics is kept without
    them."""
    records, bad = [], []
    for path in sorted(folder.glob("step_*.json")):
        try:
            records.append(clean_record(read_json(path)))
        except Exception:  # anything on disk can be damaged or crafted: name it, never stop on it
            bad.append(path.name)
    return sorted(records, key=lambda r: r["step"]), bad


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _clean_stats(task: str, data: Any, dropped: list[str]) -> dict[str, Any]:
    """A task's statistics, each a finite number; the others left out and named in ``dropped``."""
    if not isinstance(data, dict):
        dropped.append(f"stats.{task}")
        return {}
    fields = BehaviourStats.__dataclass_fields__
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue
        if key == "rewards":
            if not isinstance(value, dict):
                dropped.append(f"stats.{task}.rewards")
                continue
            bad = [str(k) for k, v in value.items() if not _number(v)]
            dropped += [f"stats.{task}.rewards.{k}" for k in bad]
            value = {str(k): v for k, v in value.items() if _number(v)}
        elif key == "completions" or key == "nonfinite_rewards":  # counts: BehaviourStats wants an int
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                dropped.append(f"stats.{task}.{key}")
                continue
        elif not (_number(value) or (key == "reward_total" and value is None)):
            dropped.append(f"stats.{task}.{key}")
            continue
        out[key] = value
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def clean_record(data: Any) -> dict[str, Any]:
    """A probe record as readers use it, or ValueError when it is none (no JSON object, a step that is no
    non-negative integer). Statistics that are no finite numbers are left out and named in ``unreadable_fields``;
    probes and alarms that are no mappings are left out, their texts made strings."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step {step!r} is no non-negative integer"[:200])
    dropped: list[str] = []
    stats = data.get("stats")
    if not isinstance(stats, dict):
        dropped.append("stats")
        stats = {}
    for name in ("probes", "alarms"):
        if name in data and not isinstance(data[name], list):
            dropped.append(name)
    probes = data.get("probes") if isinstance(data.get("probes"), list) else []
    alarms = data.get("alarms") if isinstance(data.get("alarms"), list) else []
    clean_stats = {_text(t): _clean_stats(_text(t), s, dropped) for t, s in stats.items()}
    return {
        **data,
        "step": step,
        "source": _text(data.get("source")) or "?",
        "stats": clean_stats,
        "unreadable_fields": dropped,
        "probes": [
            {
                **p,
                "task": _text(p.get("task")),
                "prompt": _text(p.get("prompt")),
                "completion": _text(p.get("completion")),
            }
            for p in probes
            if isinstance(p, dict)
        ],
        "alarms": [{**a, "task": _text(a.get("task"))} for a in alarms if isinstance(a, dict)],
    }


def record_notes(records: list[dict[str, Any]]) -> list[str]:
    """What a reader should know about the numbers: statistics left out as unreadable, non-finite values."""
    notes = []
    for record in records:
        step = record["step"]
        fields = record.get("unreadable_fields") or []
        if fields:
            shown = ", ".join(printable(f) for f in fields[:6]) + (", ..." if len(fields) > 6 else "")
            notes.append(f"step {step}: left out {len(fields)} unreadable field(s) ({shown}); the rest is shown")
        infinite = {t: s.get("nonfinite_rewards") for t, s in record.get("stats", {}).items()}
        infinite = {t: n for t, n in infinite.items() if isinstance(n, int) and n > 0}
        if infinite:
            per_task = ", ".join(f"{printable(t)} {n}" for t, n in sorted(infinite.items()))
            notes.append(f"step {step}: completions with an infinite reward, left out of the reward means: {per_task}")
        dropped = record.get("nonfinite_dropped")
        if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped > 0:
            notes.append(f"step {step}: {dropped} non-finite value(s) were written as null")
    return notes


def stats_of(record: dict[str, Any], task: str) -> BehaviourStats | None:
    data = record.get("stats", {}).get(task)
    return BehaviourStats.from_dict(data) if isinstance(data, dict) else None


def stat_value(record: dict[str, Any], task: str, key: str) -> Any:
    """One statistic of ``task`` as the record holds it; None when the record lacks it (left out as unreadable)."""
    data = record.get("stats", {}).get(task)
    return data.get(key) if isinstance(data, dict) else None


def changes(records: list[dict[str, Any]], thresholds: Thresholds | None = None) -> list[tuple[str, int, list[Drift]]]:
    """Per task: the last checkpoint's drifts from the baseline (tasks with any first); a statistic either record
    lacks is not compared (its default would read as a change)."""
    if len(records) < 2:
        return []
    base, last = records[0], records[-1]
    out = []
    for task in sorted(base.get("stats", {})):
        before, after = stats_of(base, task), stats_of(last, task)
        if before is None or after is None:
            continue
        drifts = compare(before, after, thresholds or Thresholds())
        held = [d for d in drifts if stat_value(base, task, d.stat) is not None
                and stat_value(last, task, d.stat) is not None]  # fmt: skip
        out.append((task, int(last["step"]), held))
    return sorted(out, key=lambda x: (-len(x[2]), x[0]))


def task_rows(records: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """The rows of a task's table, as the ``drift`` command and the report show them: per record with the task's
    statistics, ``step`` (``baseline`` marked), ``values`` (:data:`TABLE_STATS`, formatted) and ``alarm`` (the drift
    guard alarmed on this task at this checkpoint)."""
    from rl_guards.rollouts.render import fmt_number

    rows = []
    for record in records:
        if stats_of(record, task) is None:
            continue
        alarm = any(a.get("task") == task for a in record.get("alarms", []))
        rows.append(
            {
                "step": str(record["step"]) + (" (baseline)" if record is records[0] else ""),
                "values": [fmt_number(stat_value(record, task, key)) for key, _ in TABLE_STATS],
                "alarm": alarm,
            }
        )
    return rows


TABLE_HEADER: tuple[str, ...] = ("step", *(label for _, label in TABLE_STATS), "alarm")


def verdict(records: list[dict[str, Any]], tasks: list[str] | None = None) -> tuple[str, str]:
    """``(severity, sentence)`` over the records (of ``tasks``): ``warning`` when the drift guard alarmed (reward up
    while behaviour moved), else ``ok``, saying whether statistics moved beyond the default thresholds all the
    same."""
    if not records:
        return "ok", "no drift records"
    first, last = records[0]["step"], records[-1]["step"]
    wanted = set(tasks) if tasks is not None else None
    alarms = [
        (r["step"], a.get("task", "")) for r in records for a in r.get("alarms", [])
        if wanted is None or a.get("task") in wanted
    ]  # fmt: skip
    moved = [(t, d) for t, _, drifts in changes(records) if wanted is None or t in wanted for d in drifts]
    if alarms:
        steps = sorted({s for s, _ in alarms})
        names = ", ".join(sorted({printable(t) for _, t in alarms}))
        return "warning", (
            f"drift: the training reward rose while behaviour moved beyond its thresholds (task {names}; alarm at "
            f"step {', '.join(map(str, steps))})"
        )
    if moved:
        return "ok", (
            f"no alarm from the drift guard; {len(moved)} statistic(s) moved beyond the default thresholds between "
            f"step {first} and step {last}"
        )
    return "ok", f"no alarm: no statistic moved beyond its threshold between step {first} and step {last}"


def probe_pair(records: list[dict[str, Any]], task: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first probe prompt of ``task`` at the baseline and at the last checkpoint."""
    if len(records) < 2:
        return None
    first = [p for p in records[0].get("probes", []) if p.get("task") == task]
    last = [p for p in records[-1].get("probes", []) if p.get("task") == task]
    return (first[0], last[0]) if first and last else None


__all__ = [
    "TABLE_HEADER",
    "TABLE_STATS",
    "changes",
    "clean_record",
    "find_drift_dir",
    "finite",
    "load_records",
    "probe_pair",
    "record_notes",
    "record_text",
    "stat_value",
    "stats_of",
    "task_rows",
    "verdict",
]
