"""Per-task statistics of one rollout batch: rewards, per-function rewards, lengths, rows and groups."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from rl_guards.core.batch import RolloutBatch

BINARY_VALUES = (0.0, 1.0)


@dataclass
class TaskStats:
    """What one task's rows in one batch looked like."""

    task: str
    rows: int = 0  # rows of the task
    groups: int = 0  # complete groups whose first row belongs to the task
    scored_rows: int = 0  # rows at least one reward function scored
    reward_mean: float | None = None  # weighted total reward, scored rows only
    reward_std: float | None = None  # population std of the same
    completion_length_mean: float = 0.0  # completion tokens (EOS included)
    func_values: dict[str, list[float]] = field(default_factory=dict)  # function -> values on rows it scored


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation; (None, None) for no values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(var)


def is_binary(values: Iterable[float]) -> bool:
    """True when every value is exactly 0 or 1."""
    return all(v in BINARY_VALUES for v in values)


def task_stats(batch: RolloutBatch) -> dict[str, TaskStats]:
    """Statistics per task, keyed and ordered by task name."""
    out: dict[str, TaskStats] = {task: TaskStats(task) for task in batch.task_names()}
    totals: dict[str, list[float]] = {task: [] for task in out}
    lengths: dict[str, int] = dict.fromkeys(out, 0)
    for row, task in enumerate(batch.tasks):
        stats = out[task]
        stats.rows += 1
        lengths[task] += len(batch.completion_ids[row])
        total = batch.total_reward(row)
        if total is not None:
            stats.scored_rows += 1
            totals[task].append(total)
        for name, value in zip(batch.reward_names, batch.rewards[row], strict=False):
            if value is not None and not math.isnan(value):
                stats.func_values.setdefault(name, []).append(float(value))
    for group in batch.groups():
        out[batch.tasks[group.start]].groups += 1
    for task, stats in out.items():
        stats.reward_mean, stats.reward_std = mean_std(totals[task])
        stats.completion_length_mean = lengths[task] / stats.rows if stats.rows else 0.0
    return out
