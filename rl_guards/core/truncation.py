"""Completions cut by ``max_completion_length``, per task, and the evidence of prompts cut whole."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.evidence import binomial_tail


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
