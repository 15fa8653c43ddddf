"""Dead groups: groups whose rollouts all got the same total reward, so GRPO gives them zero advantage.

Totals follow TRL: the weighted sum of each function's reward with ``None`` counted as 0. A dead group is
*all pass* when its common value is the top of the task's observed range of totals (observed over the run so
far, this batch included), *all fail* when it is the bottom, and *other* otherwise (e.g. every rollout got
0.5 from a graded reward). While a task has only ever shown one value (range of width 0) that value counts as
pass when it is > 0 and as fail otherwise. A row *passes* by the same rule; a task's pass rate is the share
of its rows that pass, which for a 0/1 reward is the usual pass rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rl_guards.core.batch import RolloutBatch

REWARD_ATOL = 1e-6  # totals closer than this are equal (TRL computes them in float32)
ADVANTAGE_ATOL = 1e-8  # |advantage| below this contributes no gradient


def trl_totals(batch: RolloutBatch) -> list[float]:
    """Per row: weighted sum of the rewards, None counted as 0 (what TRL normalises into advantages)."""
    return batch.weighted_totals.tolist()


def update_ranges(ranges: dict[str, list[float]], batch: RolloutBatch, totals: Sequence[float]) -> None:
    """Widen each task's observed ``[low, high]`` range of totals with this batch (in place)."""
    names, index = batch.task_index
    values = np.asarray(totals, dtype=np.float64)
    for t, task in enumerate(names):
        mine = values[index == t]
        if not mine.size:
            continue
        low, high = float(mine.min()), float(mine.max())
        lo_hi = ranges.get(task)
        if lo_hi is None:
            ranges[task] = [low, high]
        else:
            lo_hi[0], lo_hi[1] = min(lo_hi[0], low), max(lo_hi[1], high)


def outcome(value: float, low: float, high: float) -> str:
    """``"pass"``, ``"fail"`` or ``"other"`` for a total within the task's observed range (see module doc)."""
    if high - low <= REWARD_ATOL:
        return "pass" if value > REWARD_ATOL else "fail"
    if abs(value - high) <= REWARD_ATOL:
        return "pass"
    if abs(value - low) <= REWARD_ATOL:
        return "fail"
    return "other"


@dataclass
class TaskGroups:
    """Group outcomes of one task in one batch."""

    task: str
    groups: int = 0  # complete groups
    dead: int = 0  # groups whose totals are all equal
    dead_all_pass: int = 0  # dead at the top of the task's range
    dead_all_fail: int = 0  # dead at the bottom of the task's range
    rows: int = 0
    pass_rows: int = 0  # judged rows that passed (see outcome_passes)
    judged: int = 0  # rows a pass/fail reward function of the task scored
    tokens: int = 0  # completion tokens of the task's rows
    zero_adv_tokens: int = 0  # of which in rows with zero advantage

    @property
    def live(self) -> int:
        return self.groups - self.dead

    @property
    def dead_other(self) -> int:
        return self.dead - self.dead_all_pass - self.dead_all_fail

    def share(self, count: int) -> float:
        return count / self.groups if self.groups else 0.0

    @property
    def zero_adv_token_share(self) -> float:
        return self.zero_adv_tokens / self.tokens if self.tokens else 0.0

    @property
    def pass_rate(self) -> float | None:
        return self.pass_rows / self.judged if self.judged else None


def _passes(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """:func:`outcome` ``== "pass"`` element-wise."""
    flat = high - low <= REWARD_ATOL
    return np.where(flat, values > REWARD_ATOL, np.abs(values - high) <= REWARD_ATOL)


def _fails(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """:func:`outcome` ``== "fail"`` element-wise."""
    flat = high - low <= REWARD_ATOL
    return np.where(
        flat, values <= REWARD_ATOL, (np.abs(values - high) > REWARD_ATOL) & (np.abs(values - low) <= REWARD_ATOL)
    )


def group_outcomes(
    batch: RolloutBatch, ranges: dict[str, list[float]], totals: Sequence[float]
) -> dict[str, TaskGroups]:
    """Per task: dead / live groups, pass rows and zero-advantage tokens, given the observed ``ranges``."""
    names, index = batch.task_index
    values = np.asarray(totals, dtype=np.float64)
    bounds = np.array([ranges[t] for t in names], dtype=np.float64).reshape(len(names), 2)
    lengths = batch.lengths
    zero_adv = np.abs(np.asarray(batch.advantages, dtype=np.float64)) <= ADVANTAGE_ATOL
    k = len(names)
    rows = np.bincount(index, minlength=k)
    tokens = np.bincount(index, weights=lengths, minlength=k)
    zero_tokens = np.bincount(index, weights=lengths * zero_adv, minlength=k)
    g, n_groups = batch.num_generations, batch.num_groups
    grouped = values[: n_groups * g].reshape(n_groups, g)
    group_task = index[: n_groups * g : g]
    dead = grouped.max(axis=1) - grouped.min(axis=1) <= REWARD_ATOL if n_groups else np.zeros(0, dtype=bool)
    first = grouped[:, 0] if n_groups else np.zeros(0)
    glow, ghigh = bounds[group_task, 0], bounds[group_task, 1]
    groups = np.bincount(group_task, minlength=k)
    dead_n = np.bincount(group_task, weights=dead, minlength=k)
    dead_pass = np.bincount(group_task, weights=dead & _passes(first, glow, ghigh), minlength=k)
    dead_fail = np.bincount(group_task, weights=dead & _fails(first, glow, ghigh), minlength=k)
    out = {}
    for t, task in enumerate(names):
        out[task] = TaskGroups(
            task,
            groups=int(groups[t]),
            dead=int(dead_n[t]),
            dead_all_pass=int(dead_pass[t]),
            dead_all_fail=int(dead_fail[t]),
            rows=int(rows[t]),
            tokens=int(tokens[t]),
            zero_adv_tokens=int(zero_tokens[t]),
        )
    return out


# ----- pass rate: what the task's pass/fail reward functions say -------------------------------------------------
MAX_DISTINCT = 3  # distinct values kept per (task, function): a third one means the function is not pass/fail


def _add_distinct(seen: list[float], value: float) -> None:
    """Append ``value`` unless ``seen`` already holds it (within ``REWARD_ATOL``)."""
    if not any(abs(value - s) <= REWARD_ATOL for s in seen):
        seen.append(float(value))


def update_outcome_values(values: dict[str, dict[str, list[float]]], batch: RolloutBatch) -> None:
    """Record the distinct scores each reward function gave each task's rows (up to ``MAX_DISTINCT``)."""
    names, index = batch.task_index
    matrix = batch.reward_matrix
    for t, task in enumerate(names):
        rows = matrix[index == t]
        per_task = values.setdefault(task, {})
        for f, fname in enumerate(batch.reward_names[: matrix.shape[1]]):
            seen = per_task.setdefault(fname, [])
            if len(seen) >= MAX_DISTINCT:
                continue
            for v in np.unique(rows[:, f][np.isfinite(rows[:, f])]):
                _add_distinct(seen, v)
                if len(seen) >= MAX_DISTINCT:
                    break


def _pass_score(values: dict[str, dict[str, list[float]]], task: str, fname: str) -> float | None:
    """The score that means "pass" for ``fname`` on ``task`` when the function is pass/fail (else None): over
    every task it gave exactly two distinct scores, and it scored this task."""
    if not values.get(task, {}).get(fname):
        return None
    every: list[float] = []
    for per_task in values.values():
        for v in per_task.get(fname, []):
            _add_distinct(every, v)
    return max(every) if len(every) == 2 else None


def outcome_passes(batch: RolloutBatch, values: dict[str, dict[str, list[float]]]) -> dict[str, tuple[int, int]]:
    """Per task: ``(passed rows, judged rows)`` by its pass/fail reward functions.

    A function is pass/fail once it has given exactly two distinct scores over every task's rows (so a task always
    solved, or never, is still judged by the scores it gave the others); a row is judged when one of them scored
    it, and passes when every one that scored it gave its higher score. A task with no such function yet (one score
    seen so far, or only shaped scores) has ``(0, 0)``: its pass rate is unknown.
    """
    names, index = batch.task_index
    matrix = batch.reward_matrix
    out: dict[str, tuple[int, int]] = {}
    for t, task in enumerate(names):
        rows = matrix[index == t]
        judged = np.zeros(len(rows), dtype=bool)
        failed = np.zeros(len(rows), dtype=bool)
        for f, fname in enumerate(batch.reward_names[: matrix.shape[1]]):
            top = _pass_score(values, task, fname)
            if top is None:
                continue
            column = rows[:, f]
            scored = np.isfinite(column)
            judged |= scored
            failed |= scored & (np.abs(column - top) > REWARD_ATOL)
        out[task] = (int((judged & ~failed).sum()), int(judged.sum()))
    return out
