"""Completions cut by ``max_completion_length``, per task."""

from __future__ import annotations

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


def truncation_by_task(batch: RolloutBatch, max_examples: int = 2) -> dict[str, TaskTruncation]:
    """Per task: rows, truncated rows (no EOS: the completion hit the length cap), example rows."""
    names, index = batch.task_index
    cut = np.asarray(batch.truncated, dtype=bool)
    rows = np.bincount(index, minlength=len(names))
    truncated = np.bincount(index[cut], minlength=len(names))
    out = {}
    for t, task in enumerate(names):
        stats = TaskTruncation(task, rows=int(rows[t]), truncated=int(truncated[t]))
        if truncated[t]:
            stats.examples = np.flatnonzero(cut & (index == t))[:max_examples].tolist()
        out[task] = stats
    return out
