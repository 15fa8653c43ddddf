"""Completions cut by ``max_completion_length``, per task."""

from __future__ import annotations

from dataclasses import dataclass, field

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


def truncation_by_task(batch: RolloutBatch, max_examples: int = 2) -> dict[str, TaskTruncation]:
    """Per task: rows, truncated rows (no EOS: the completion hit the length cap), example rows."""
    out = {task: TaskTruncation(task) for task in batch.task_names()}
    for row, (task, cut) in enumerate(zip(batch.tasks, batch.truncated, strict=True)):
        stats = out[task]
        stats.rows += 1
        if cut:
            stats.truncated += 1
            if len(stats.examples) < max_examples:
                stats.examples.append(row)
    return out
