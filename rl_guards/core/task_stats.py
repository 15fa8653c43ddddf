"""Per-task statistics of one rollout batch: rewards, per-function rewards, lengths, rows and groups."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rl_guards.core.batch import RolloutBatch, weighted_sum


@dataclass
class TaskStats:
    """What one task's rows in one batch looked like."""

    task: str
    rows: int = 0  # rows of the task
    groups: int = 0  # complete groups whose first row belongs to the task
    scored_rows: int = 0  # rows at least one reward function scored
    nonfinite_rows: int = 0  # of those, rows whose total is inf or NaN (left out of the means below)
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


def task_stats(batch: RolloutBatch) -> dict[str, TaskStats]:
    """Statistics per task, keyed and ordered by task name (vectorised over the batch's rows)."""
    names, index = batch.task_index
    matrix, scored = batch.reward_matrix, batch.scored
    weights = batch.reward_weights
    any_scored = scored.any(axis=1)
    totals = weighted_sum(matrix, weights)  # a skipped function adds nothing (TRL's nansum); inf stays inf
    finite = np.isfinite(totals)
    rows = np.bincount(index, minlength=len(names))
    length_sums = np.bincount(index, weights=batch.lengths, minlength=len(names))
    group_starts = index[: batch.num_groups * batch.num_generations : batch.num_generations]
    groups = np.bincount(group_starts, minlength=len(names))
    out: dict[str, TaskStats] = {}
    for t, task in enumerate(names):
        mine = index == t
        stats = TaskStats(task, rows=int(rows[t]), groups=int(groups[t]))
        task_scored = mine & any_scored
        task_totals = totals[task_scored & finite]  # a non-finite total is counted, never averaged
        stats.scored_rows = int(task_scored.sum())
        stats.nonfinite_rows = stats.scored_rows - int(task_totals.size)
        if task_totals.size:
            with np.errstate(over="ignore", invalid="ignore"):
                mean, std = float(task_totals.mean()), float(task_totals.std())
            if math.isfinite(mean) and math.isfinite(std):  # finite values near the float limit can overflow
                stats.reward_mean, stats.reward_std = mean, std
        for f, name in enumerate(batch.reward_names[: matrix.shape[1]]):
            values = matrix[mine & scored[:, f] & np.isfinite(matrix[:, f]), f]
            if values.size:
                stats.func_values.setdefault(name, []).extend(values.tolist())
        stats.completion_length_mean = float(length_sums[t] / rows[t]) if rows[t] else 0.0
        out[task] = stats
    return out
