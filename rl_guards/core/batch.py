"""The rollout batch every guard sees: plain Python lists, gathered across ranks.

Rows are in TRL's global order (rank 0's rows, then rank 1's, ...), so rows ``g*G .. g*G+G-1`` form group
``g`` with ``G = num_generations``, even when a group is split across ranks. Every rank holds the same
batch, so every rank reaches the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RolloutBatch:
    """One generation batch (all ranks), as scored by the reward functions."""

    step: int  # trainer global step when the batch was generated
    mode: str  # "train" or "eval"
    num_generations: int  # group size G
    reward_names: list[str]  # one per reward function, TRL's names (the W&B keys)
    reward_weights: list[float]  # one per reward function
    rewards: list[list[float | None]]  # [row][func]; None where the function returned None (not its row)
    advantages: list[float]  # one per row, as the trainer computed them
    tasks: list[str]  # one per row: the task's metric label (its name, or OTHER_TASKS beyond tasks.max_tasks)
    completions: list[str]  # the completion text the reward functions saw
    completion_ids: list[list[int]]  # generated ids, unpadded, cut after the first EOS (EOS kept)
    prompt_ids: list[list[int]]  # rendered prompt ids, unpadded
    truncated: list[bool]  # completion did not end with EOS (hit max_completion_length)
    thinking: list[bool | None]  # per-row thinking mode, None when unknown
    max_completion_length: int = 0
    prompts: list[Any] = field(default_factory=list)  # raw prompts (messages or strings)
    columns: dict[str, list[Any]] = field(default_factory=dict)  # other dataset columns, one value per row
    # per row: the rendered prompt ends inside an open think block (template prefill); empty = unknown
    prompt_opened: list[bool] = field(default_factory=list)
    # per row: the task name from the dataset (default task when null or absent); empty = same as ``tasks``
    raw_tasks: list[str] = field(default_factory=list)
    # Decoders supplied by the adapter; None in pure unit tests.
    decode: Any = None  # callable(list[int]) -> str with special tokens kept
    epoch: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.completions)
        for name in ("rewards", "advantages", "tasks", "completion_ids", "truncated", "thinking"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"RolloutBatch.{name} has {got} rows, completions has {n}")
        if self.num_generations <= 0:
            raise ValueError(f"num_generations must be > 0, got {self.num_generations}")

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def num_groups(self) -> int:
        """Number of complete groups in the batch."""
        return len(self) // self.num_generations

    def group_of(self, row: int) -> int:
        """Group index of a row."""
        return row // self.num_generations

    def groups(self) -> Iterator[range]:
        """Row ranges of each group."""
        g = self.num_generations
        for start in range(0, self.num_groups * g, g):
            yield range(start, start + g)

    def total_reward(self, row: int) -> float | None:
        """Weighted sum of the row's rewards, ignoring functions that skipped it; None if all skipped."""
        values = self.rewards[row]
        if all(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
            return None
        return sum(
            w * v for w, v in zip(self.reward_weights, values, strict=True) if v is not None and not math.isnan(v)
        )

    def task_names(self) -> list[str]:
        """Sorted distinct task names."""
        return sorted(set(self.tasks))

    def rows_of_task(self, task: str) -> list[int]:
        """Row indices of one task."""
        return [i for i, t in enumerate(self.tasks) if t == task]


def nan_to_none(values: Sequence[float]) -> list[float | None]:
    """Map NaN to None (TRL turns a reward function's None into NaN)."""
    return [None if (v is None or math.isnan(v)) else float(v) for v in values]
