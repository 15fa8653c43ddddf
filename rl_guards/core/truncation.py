"""Completions cut by ``max_completion_length``, per task, and the two tests that say the cut share is too high."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rl_guards.core.batch import RolloutBatch


@dataclass
class TaskTruncation:
    """Truncated completions of one task in one batch."""

    task: str
    rows: int = 0
    truncated: int = 0
    examples: list[int] = field(default_factory=list)  # first truncated row indices
    groups: int = 0  # complete groups (prompts) of the task
    cut_groups: int = 0  # of which every completion was truncated

    @property
    def rate(self) -> float:
        return self.truncated / self.rows if self.rows else 0.0


def share_lower_bound(hits: int, total: int, z: float = 1.96) -> float:
    """Wilson lower confidence bound of a share (``hits`` of ``total``; 95 % one-sided at z=1.645, two at 1.96)."""
    if total <= 0:
        return 0.0
    p = hits / total
    denom = 1 + z * z / total
    centre = p + z * z / (2 * total)
    spread = z * ((p * (1 - p) + z * z / (4 * total)) / total) ** 0.5
    return max(0.0, (centre - spread) / denom)


def binomial_tail(hits: int, total: int, rate: float) -> float:
    """``P(X >= hits)`` for ``X ~ Binomial(total, rate)``: how likely this many hits are when each has ``rate``."""
    if hits <= 0:
        return 1.0
    if hits > total:
        return 0.0
    if rate <= 0.0:
        return 0.0
    if rate >= 1.0:
        return 1.0
    return min(1.0, sum(math.comb(total, k) * rate**k * (1 - rate) ** (total - k) for k in range(hits, total + 1)))


def all_cut_evidence(cut_groups: int, groups: int, max_rate: float) -> float:
    """The p-value of "the task's truncated share is at most ``max_rate``" from its prompts whose completions were
    all cut: ``cut_groups`` of ``groups``.

    A prompt has every completion cut with probability at most the share of one of them being cut, however alike a
    prompt's completions are (they share their length), and prompts are independent: so under that hypothesis the
    number of all-cut prompts is at most ``Binomial(groups, max_rate)``, and its upper tail is a valid p-value
    whatever the within-group correlation. Completions of a prompt that did finish add nothing (conservative).
    At ``max_rate=0.1``: 4 of 4 prompts all cut give 1e-4, 3 of 3 give 1e-3, 1 of 6 gives 0.47.
    """
    return binomial_tail(cut_groups, groups, max_rate)


def truncation_by_task(batch: RolloutBatch, max_examples: int = 2) -> dict[str, TaskTruncation]:
    """Per task: rows, truncated rows (no EOS: the completion hit the length cap), example rows, and complete groups
    with every completion truncated."""
    names, index = batch.task_index
    cut = np.asarray(batch.truncated, dtype=bool)
    rows = np.bincount(index, minlength=len(names))
    truncated = np.bincount(index[cut], minlength=len(names))
    g, n_groups = batch.num_generations, batch.num_groups
    group_task = index[: n_groups * g : g]
    all_cut = cut[: n_groups * g].reshape(n_groups, g).all(axis=1) if n_groups else np.zeros(0, dtype=bool)
    groups = np.bincount(group_task, minlength=len(names))
    cut_groups = np.bincount(group_task[all_cut], minlength=len(names))
    out = {}
    for t, task in enumerate(names):
        stats = TaskTruncation(
            task,
            rows=int(rows[t]),
            truncated=int(truncated[t]),
            groups=int(groups[t]),
            cut_groups=int(cut_groups[t]),
        )
        if truncated[t]:
            stats.examples = np.flatnonzero(cut & (index == t))[:max_examples].tolist()
        out[task] = stats
    return out
