"""Task labels for per-task metrics: a row's task name, or :data:`OTHER_TASKS` once the per-task cap is full.

A dataset with hundreds of task values would otherwise log hundreds of curves per metric. The first
``max_tasks`` names keep their own curves: the most frequent in the train dataset (ties by name) when the
dataset can be counted up front, then names in order of first appearance (sorted within a batch, so every rank
that sees the same batch decides the same). Later names share one bucket. The kept names are state: a resumed
run keeps the same curves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from rl_guards.core.metric_keys import OTHER_TASKS, decode_task, encode_task

TASK_HASH_BITS = 52  # exact in a float64, so a task travels between ranks inside the per-row feature tensor


def task_hash(name: str) -> int:
    """A stable 52-bit id of a task name (the same on every rank and every run)."""
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - TASK_HASH_BITS)


def task_name(value: Any, default: str) -> str:
    """A dataset value as a task name: ``default`` for a missing (None) value, ``str(value)`` otherwise."""
    return default if value is None else str(value)


class TaskLabels:
    """Maps task names to metric labels under a cap of ``max_tasks`` names (0 = no cap)."""

    def __init__(self, max_tasks: int) -> None:
        self.max_tasks = max_tasks
        self.kept: dict[str, None] = {}  # insertion-ordered set of names with their own curves
        self.capped: set[str] = set()  # names seen beyond the cap

    def seed(self, counts: Mapping[str, int]) -> None:
        """Keep the most frequent names of the dataset (ties by name) before training starts."""
        for name in sorted(counts, key=lambda t: (-counts[t], t)):
            if self.max_tasks and len(self.kept) >= self.max_tasks:
                break
            self.kept.setdefault(name, None)

    def labels(self, names: Iterable[str]) -> list[str]:
        """One label per name; names not seen before take free places first (sorted), then the bucket."""
        names = list(names)
        for name in sorted(set(names) - self.kept.keys() - self.capped):
            if not self.max_tasks or len(self.kept) < self.max_tasks:
                self.kept[name] = None
            else:
                self.capped.add(name)
        return [name if name in self.kept else OTHER_TASKS for name in names]

    def state_dict(self) -> dict[str, Any]:
        return {"kept": [encode_task(t) for t in self.kept], "capped": sorted(encode_task(t) for t in self.capped)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.kept = {decode_task(t): None for t in state.get("kept", [])}
        self.capped = {decode_task(t) for t in state.get("capped", [])}


TASK_LIKE_NAMES: tuple[str, ...] = (
    "category", "source", "data_source", "domain", "type", "subject", "dataset", "task_type", "skill", "topic",
    "difficulty", "level", "split", "env", "environment",
)  # fmt: skip


def task_column_candidates(
    rows: list[dict[str, Any]], columns: list[str], *, max_values: int = 32, exclude: tuple[str, ...] = ()
) -> list[tuple[str, list[str]]]:
    """Columns that look like task labels: short strings with 2..``max_values`` distinct values over ``rows``.

    Returned as (column, its distinct values sorted), usual task-label names first, then by fewest values.
    """
    found: list[tuple[int, int, str, list[str]]] = []
    for column in columns:
        if column in exclude:
            continue
        values = [row.get(column) for row in rows]
        if not values or not all(isinstance(v, str) and 0 < len(v) <= 64 for v in values):
            continue
        distinct = sorted(set(values))
        if 2 <= len(distinct) <= max_values and len(distinct) <= max(2, len(values) // 2):
            usual = column.lower() in TASK_LIKE_NAMES
            found.append((0 if usual else 1, len(distinct), column, distinct))
    return [(column, distinct) for _, _, column, distinct in sorted(found)]
