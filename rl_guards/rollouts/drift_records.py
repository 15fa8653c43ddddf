"""Reading the drift probe records a run wrote (``<rollouts folder>/drift/step_N.json``), for the CLI and the report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl_guards.core.behaviour import BehaviourStats, Drift, Thresholds, compare
from rl_guards.rollouts.recorder import default_rollouts_dir

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
    """The records by step, and the names of files that could not be read (skipped)."""
    records, bad = [], []
    for path in sorted(folder.glob("step_*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            int(data["step"])
            if not isinstance(data.get("stats"), dict):
                raise ValueError("no stats")
            records.append(data)
        except (OSError, ValueError, KeyError, TypeError):
            bad.append(path.name)
    return sorted(records, key=lambda r: int(r["step"])), bad


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


__all__ = ["TABLE_STATS", "changes", "find_drift_dir", "load_records", "probe_pair", "stats_of"]
