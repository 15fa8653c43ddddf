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
    "difficulty", "level", "split", "env", "environment", "subset", "task_name", "benchmark",
)  # fmt: skip


def task_like_name(column: str) -> bool:
    """A column name people give task labels (``category``, ``data_source``, ...): the evidence a warning needs,
    since label-like values alone (``language``, ``license``, an answer type) also fit a single-task dataset."""
    return column.lower() in TASK_LIKE_NAMES


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


# Columns that hold a row's content or its reference answer, never its task (an answer column of a multiple-choice
# or yes/no dataset has few distinct values that each cover a fair share of the rows, exactly like task labels).
NOT_TASK_NAMES: tuple[str, ...] = (
    "prompt", "completion", "messages", "question", "response", "answer", "solution", "ground_truth", "reference",
    "target", "gold", "label", "id", "uid", "enable_thinking", "chat_template_kwargs", "images", "image",
)  # fmt: skip
ORDINAL_NAMES: tuple[str, ...] = ("difficulty", "level", "split")  # a grading of one task's rows, not another task
MIN_ROWS = 64  # rows a constant task column needs before it is judged (a toy dataset's columns say little)
MIN_ROWS_NEARLY = 200  # rows a nearly constant one needs (one value on >= DOMINANT of them)
DOMINANT = 0.95  # a task column whose top value holds this share of the rows says one task
FAIR_SHARE = 0.02  # each of at least two values of a look-alike column holds this share of the rows (and 5 rows)


def not_task_column(column: str) -> bool:
    """A content or reference column by its name, or by its last part (``problem_id``, ``final_answer``)."""
    lowered = column.lower()
    return lowered in NOT_TASK_NAMES or lowered.replace("-", "_").rsplit("_", 1)[-1] in NOT_TASK_NAMES


def _label_like(values: list[Any], max_values: int) -> dict[str, int] | None:
    """The value counts of a column that looks like task labels over ``values``, else None: short non-numeric
    strings (not single characters), 2..``max_values`` distinct, each ~10 rows on average, none holding
    ``DOMINANT`` of the rows, and at least two of them on a fair share of the rows."""
    n = len(values)
    if not n or not all(isinstance(v, str) and 0 < len(v.strip()) <= 64 for v in values):
        return None
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    if not 2 <= len(counts) <= min(max_values, n // 10):
        return None
    if all(len(v.strip()) == 1 or v.strip().lstrip("-").replace(".", "", 1).isdigit() for v in counts):
        return None  # choices ("A".."D") or numbers: answers, not task names
    if max(counts.values()) >= DOMINANT * n:
        return None
    fair = max(5, FAIR_SHARE * n)
    if sum(1 for c in counts.values() if c >= fair) < 2:
        return None
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def constant_task_column(
    rows: list[dict[str, Any]], task_column: str, columns: list[str], *, default: str = "", max_values: int = 32
) -> tuple[dict[str, int], list[tuple[str, dict[str, int]]]] | None:
    """A task column that says one task while another column looks like the real task labels.

    Returns (the task column's value counts, [(look-alike column, its value counts over the rows of the dominant
    task)], usual task-label names first, then fewest values), or None: the task column varies, there are too few
    rows to judge (``MIN_ROWS``; ``MIN_ROWS_NEARLY`` when it is only nearly constant), or no column looks like task
    labels (a genuinely single-task dataset).
    """
    n = len(rows)
    if n < MIN_ROWS:
        return None
    names = [task_name(row.get(task_column), default) for row in rows]
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    top, top_count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    if top_count < DOMINANT * n or (len(counts) > 1 and n < MIN_ROWS_NEARLY):
        return None
    mine = [row for row, name in zip(rows, names, strict=True) if name == top]
    found: list[tuple[int, int, str, dict[str, int]]] = []
    for column in columns:
        if column == task_column or not_task_column(column) or column.lower() in ORDINAL_NAMES:
            continue
        labels = _label_like([row.get(column) for row in mine], max_values)
        if labels is not None:
            found.append((0 if column.lower() in TASK_LIKE_NAMES else 1, len(labels), column, labels))
    if not found:
        return None
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return ordered, [(column, labels) for _, _, column, labels in sorted(found)]
