"""Dead groups: groups whose rollouts all got the same total reward, so GRPO gives them zero advantage.

Totals follow TRL: the weighted sum of each function's reward with ``None`` counted as 0. A dead group is
*all pass* when its common value is the top of the task's observed range of totals (observed over the run so
far, this batch included), *all fail* when it is the bottom, and *other* otherwise (e.g. every rollout got
0.5 from a graded reward). While a task has only ever shown one value (range of width 0) that value counts as
pass when it is > 0 and as fail otherwise. A row *passes* by the same rule; a task's pass rate is the share
of its rows that pass, which for a 0/1 reward is the usual pass rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_guards.core.batch import RolloutBatch

REWARD_ATOL = 1e-6  # totals closer than this are equal (TRL computes them in float32)
ADVANTAGE_ATOL = 1e-8  # |advantage| below this contributes no gradient


def trl_totals(batch: RolloutBatch) -> list[float]:
    """Per row: weighted sum of the rewards, None counted as 0 (what TRL normalises into advantages)."""
    return [batch.total_reward(row) or 0.0 for row in range(len(batch))]


def update_ranges(ranges: dict[str, list[float]], batch: RolloutBatch, totals: list[float]) -> None:
    """Widen each task's observed ``[low, high]`` range of totals with this batch (in place)."""
    for task, total in zip(batch.tasks, totals, strict=True):
        lo_hi = ranges.get(task)
        if lo_hi is None:
            ranges[task] = [total, total]
        else:
            lo_hi[0], lo_hi[1] = min(lo_hi[0], total), max(lo_hi[1], total)


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
    pass_rows: int = 0  # rows whose total is the top of the range
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
        return self.pass_rows / self.rows if self.rows else None


def group_outcomes(batch: RolloutBatch, ranges: dict[str, list[float]], totals: list[float]) -> dict[str, TaskGroups]:
    """Per task: dead / live groups, pass rows and zero-advantage tokens, given the observed ``ranges``."""
    out = {task: TaskGroups(task) for task in batch.task_names()}
    for row, task in enumerate(batch.tasks):
        stats = out[task]
        low, high = ranges[task]
        stats.rows += 1
        stats.pass_rows += outcome(totals[row], low, high) == "pass"
        n_tokens = len(batch.completion_ids[row])
        stats.tokens += n_tokens
        if abs(batch.advantages[row]) <= ADVANTAGE_ATOL:
            stats.zero_adv_tokens += n_tokens
    for group in batch.groups():
        task = batch.tasks[group.start]
        stats = out[task]
        stats.groups += 1
        values = [totals[r] for r in group]
        if max(values) - min(values) <= REWARD_ATOL:
            stats.dead += 1
            kind = outcome(values[0], *ranges[task])
            stats.dead_all_pass += kind == "pass"
            stats.dead_all_fail += kind == "fail"
    return out
