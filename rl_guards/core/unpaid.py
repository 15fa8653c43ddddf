"""A reward function that never pays on a task: one score on every row of the task it scored, over a window of
batches, while the task's total reward still moves (pure: numbers of the gathered batch).

Per batch, per task and reward function (:func:`function_entries`): the rows the function scored (None is not a
score), its lowest and highest score there, the task's complete groups and its live groups (totals not all equal).
Over a window of such entries, :func:`judge` says the function is stuck when

- it scored rows of the task in at least ``min_steps`` batches of the window, ``min_groups`` groups (prompts) in all:
  a reward that the policy earns on one prompt in three would have paid at least once on 8 prompts with 95 %
  probability ((2/3)**8 < 0.04);
- every score it gave them is one value (within ``REWARD_ATOL``);
- the task's totals varied within some group of those batches (a live group): other functions still move it, so
  no group need be dead and the dead-groups guard may say nothing.

Whether that value is below what the function can pay on the task (a reward the run needs and never gets, not a
penalty that never triggers) is not a question numbers answer: the guard asks the function itself
(:mod:`rl_guards.guards.unpaid_rewards`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.groups import REWARD_ATOL


@dataclass
class FunctionEntry:
    """One reward function on one task's rows in one batch."""

    scored: int = 0  # rows of the task the function scored (not None)
    low: float | None = None  # its lowest finite score on them (None: no finite score)
    high: float | None = None  # its highest
    groups: int = 0  # complete groups of the task in the batch
    live: int = 0  # of which groups whose totals differ

    def to_list(self) -> list[float | int | None]:
        return [self.scored, self.low, self.high, self.groups, self.live]

    @classmethod
    def from_list(cls, values: Sequence[float | int | None]) -> FunctionEntry:
        scored, low, high, groups, live = (list(values) + [0, None, None, 0, 0][len(values) :])[:5]
        return cls(
            int(scored or 0),
            None if low is None else float(low),
            None if high is None else float(high),
            int(groups or 0),
            int(live or 0),
        )


@dataclass
class Stuck:
    """A function that gave one score on every row of a task it scored over the window."""

    value: float  # the one score
    rows: int  # rows scored
    groups: int  # groups of the task in the batches where it scored
    live: int  # of which live
    steps: int  # batches where it scored


def function_entries(batch: RolloutBatch) -> dict[str, list[FunctionEntry]]:
    """Per task label: one entry per reward function (in ``batch.reward_names`` order)."""
    names, index = batch.task_index
    matrix = batch.reward_matrix
    totals = np.asarray(batch.weighted_totals, dtype=np.float64)
    g, n_groups = batch.num_generations, batch.num_groups
    group_task = index[: n_groups * g : g]
    if n_groups:
        grouped = totals[: n_groups * g].reshape(n_groups, g)
        with np.errstate(invalid="ignore"):
            live = ~(np.ptp(grouped, axis=1) <= REWARD_ATOL)
        live &= np.isfinite(grouped).all(axis=1)
    else:
        live = np.zeros(0, dtype=bool)
    groups = np.bincount(group_task, minlength=len(names))
    lives = np.bincount(group_task[live], minlength=len(names))
    out: dict[str, list[FunctionEntry]] = {}
    for t, task in enumerate(names):
        rows = matrix[index == t]
        entries = []
        for f in range(matrix.shape[1]):
            column = rows[:, f]
            scored = ~np.isnan(column)
            finite = column[np.isfinite(column)]
            entries.append(
                FunctionEntry(
                    scored=int(scored.sum()),
                    low=float(finite.min()) if finite.size else None,
                    high=float(finite.max()) if finite.size else None,
                    groups=int(groups[t]),
                    live=int(lives[t]),
                )
            )
        out[task] = entries
    return out


def judge(window: Sequence[FunctionEntry], *, min_groups: int, min_steps: int) -> Stuck | None:
    """The function is stuck over ``window`` (see the module doc), else None."""
    scoring = [e for e in window if e.scored]
    if len(scoring) < min_steps:
        return None
    groups = sum(e.groups for e in scoring)
    if groups < min_groups:
        return None
    if any(e.low is None or e.high is None for e in scoring):
        return None  # a non-finite score (inf, NaN) is not one value
    low = min(e.low for e in scoring if e.low is not None)
    high = max(e.high for e in scoring if e.high is not None)
    if not (math.isfinite(low) and math.isfinite(high)) or high - low > REWARD_ATOL:
        return None
    live = sum(e.live for e in scoring)
    if not live:
        return None
    return Stuck(value=low, rows=sum(e.scored for e in scoring), groups=groups, live=live, steps=len(scoring))


def varied(window: Sequence[FunctionEntry]) -> bool:
    """The function gave more than one score over ``window`` (it paid something other than its constant)."""
    lows = [e.low for e in window if e.low is not None]
    highs = [e.high for e in window if e.high is not None]
    return bool(lows) and max(highs) - min(lows) > REWARD_ATOL


__all__ = ["FunctionEntry", "Stuck", "function_entries", "judge", "varied"]
