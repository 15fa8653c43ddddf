"""End-of-run per-task table from a trainer's ``log_history`` (pure: lists of dicts in, text out)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rl_guards.console import Column, render_table
from rl_guards.core.metric_keys import parse_task_metric_key

# (metric suffix, column title): the per-task curves a reader checks first.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("reward_mean", "reward"),
    ("dead_group_share", "dead groups"),
    ("truncated_rate", "truncated"),
    ("think/anomalous_rate", "think anomalies"),
    ("think/thinking_share", "thinking share"),
)


def task_curves(log_history: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """task -> metric -> values in logging order (None/NaN skipped)."""
    curves: dict[str, dict[str, list[float]]] = {}
    for row in log_history:
        for key, value in row.items():
            parsed = parse_task_metric_key(key)
            if parsed is None or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if not math.isfinite(value):
                continue
            task, metric = parsed
            curves.setdefault(task, {}).setdefault(metric, []).append(float(value))
    return curves


def task_summary_text(log_history: Sequence[dict[str, Any]], *, styled: bool = False, width: int | None = None) -> str:
    """One row per task: first → last value of each key curve (empty string when there are no task metrics)."""
    curves = task_curves(log_history)
    if not curves:
        return ""
    # Names that would print invisibly or ambiguously ("", " a", control characters) are shown quoted.
    names = {t: t if t and t == t.strip() and t.isprintable() else repr(t) for t in curves}
    rows = []
    for task in sorted(curves):
        cells = []
        for metric, _ in COLUMNS:
            values = curves[task].get(metric)
            cells.append(f"{values[0]:.3f} -> {values[-1]:.3f}" if values else "-")
        rows.append([names[task], *cells])
    columns = [Column("task"), *(Column(title, "right") for _, title in COLUMNS)]
    return render_table(columns, rows, title="per task (first -> last logged value)", styled=styled, width=width)
