"""Reading the drift probe records a run wrote (``<rollouts folder>/drift/step_N.json``), for the CLI and the report."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rl_guards.core.behaviour import BehaviourStats, Drift, Thresholds, compare
from rl_guards.rollouts.store import default_rollouts_dir

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


def load_records(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records by step, and the names of files that could not be read (skipped): not JSON, a step that is no
    non-negative integer, statistics that are no numbers (:func:`clean_record`)."""
    records, bad = [], []
    for path in sorted(folder.glob("step_*.json")):
        try:
            records.append(clean_record(json.loads(path.read_text(encoding="utf-8"))))
        except Exception:  # anything on disk can be damaged or crafted: name it, never stop on it
            bad.append(path.name)
    return sorted(records, key=lambda r: r["step"]), bad


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _clean_stats(task: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"stats of task {task!r} are no mapping")
    fields = BehaviourStats.__dataclass_fields__
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue
        if key == "rewards":
            if not isinstance(value, dict) or not all(_number(v) for v in value.values()):
                raise ValueError(f"stats {task!r}.rewards are no mapping of numbers")
            value = {str(k): v for k, v in value.items()}
        elif not (_number(value) or (key == "reward_total" and value is None)):
            raise ValueError(f"stats {task!r}.{key} is no finite number: {value!r}"[:200])
        out[key] = value
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def clean_record(data: Any) -> dict[str, Any]:
    """A probe record as readers use it, or ValueError: the step a non-negative integer, every statistic a finite
    number; probes and alarms that are no mappings are left out, their texts made strings."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step {step!r} is no non-negative integer"[:200])
    stats = data.get("stats")
    if not isinstance(stats, dict):
        raise ValueError("no stats")
    probes = data.get("probes") if isinstance(data.get("probes"), list) else []
    alarms = data.get("alarms") if isinstance(data.get("alarms"), list) else []
    return {
        **data,
        "step": step,
        "source": _text(data.get("source")) or "?",
        "stats": {_text(t): _clean_stats(_text(t), s) for t, s in stats.items()},
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


def stats_of(record: dict[str, Any], task: str) -> BehaviourStats | None:
    data = record.get("stats", {}).get(task)
    return BehaviourStats.from_dict(data) if isinstance(data, dict) else None


def changes(records: list[dict[str, Any]], thresholds: Thresholds | None = None) -> list[tuple[str, int, list[Drift]]]:
    """Per task: the last checkpoint's drifts from the baseline (tasks with any first)."""
    if len(records) < 2:
        return []
    base, last = records[0], records[-1]
    out = []
    for task in sorted(base.get("stats", {})):
        before, after = stats_of(base, task), stats_of(last, task)
        if before is None or after is None:
            continue
        out.append((task, int(last["step"]), compare(before, after, thresholds or Thresholds())))
    return sorted(out, key=lambda x: (-len(x[2]), x[0]))


def probe_pair(records: list[dict[str, Any]], task: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first probe prompt of ``task`` at the baseline and at the last checkpoint."""
    if len(records) < 2:
        return None
    first = [p for p in records[0].get("probes", []) if p.get("task") == task]
    last = [p for p in records[-1].get("probes", []) if p.get("task") == task]
    return (first[0], last[0]) if first and last else None


__all__ = ["TABLE_STATS", "changes", "clean_record", "find_drift_dir", "load_records", "probe_pair", "stats_of"]
