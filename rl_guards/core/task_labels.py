"""Task labels for per-task metrics: a row's task name, or :data:`OTHER_TASKS` once the per-task cap is full.

A dataset with hundreds of task values would otherwise log hundreds of curves per metric. The first
``max_tasks`` names keep their own curves: the most frequent in the train dataset (ties by name) when the
dataset can be counted up front, then names in order of first appearance (sorted within a batch, so every rank
that sees the same batch decides the same). Later names share one bucket. The kept names are state: a resumed
run keeps the same curves.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rl_guards.core.evidence import binomial_tail
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
# Rows from which a constant task column is judged by the look-alike column's values alone; below, the prompts must
# also tell its labels apart (:func:`labels_follow_prompts`): a toy dataset's columns say little by themselves.
MIN_ROWS = 64
MIN_ROWS_NEARLY = 200  # the same for a nearly constant one (one value on >= DOMINANT of the rows)
PROMPT_ALPHA = 1e-3  # below MIN_ROWS: the prompts' agreement with the labels must be this unlikely by chance
DOMINANT = 0.95  # a task column whose top value holds this share of the rows says one task
FAIR_SHARE = 0.02  # each of at least two values of a look-alike column holds this share of the rows (and 5 rows)


def not_task_column(column: str) -> bool:
    """A content or reference column by its name, or by its last part (``problem_id``, ``final_answer``)."""
    lowered = column.lower()
    return lowered in NOT_TASK_NAMES or lowered.replace("-", "_").rsplit("_", 1)[-1] in NOT_TASK_NAMES


def _label_like(values: list[Any], max_values: int, rows_per_value: int = 10) -> dict[str, int] | None:
    """The value counts of a column that looks like task labels over ``values``, else None: short non-numeric
    strings (not single characters), 2..``max_values`` distinct, each ``rows_per_value`` rows on average, none
    holding ``DOMINANT`` of the rows, and at least two of them on a fair share of the rows (and 5 rows)."""
    n = len(values)
    if not n or not all(isinstance(v, str) and 0 < len(v.strip()) <= 64 for v in values):
        return None
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    if not 2 <= len(counts) <= min(max_values, n // rows_per_value):
        return None
    if all(len(v.strip()) == 1 or v.strip().lstrip("-").replace(".", "", 1).isdigit() for v in counts):
        return None  # choices ("A".."D") or numbers: answers, not task names
    if max(counts.values()) >= DOMINANT * n:
        return None
    fair = max(5, FAIR_SHARE * n)
    if sum(1 for c in counts.values() if c >= fair) < 2:
        return None
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def prompt_words(prompt: Any) -> frozenset[str]:
    """The words (letters only, lower-cased: numbers and names of one instance aside) of a prompt: a string, or
    chat messages whose text contents are joined."""
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list):
        parts: list[str] = []
        for message in prompt:
            content = message.get("content") if isinstance(message, dict) else message
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # multimodal parts: their text
                parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
        text = "\n".join(parts)
    else:
        return frozenset()
    return frozenset(re.findall(r"[^\W\d_]+", text.lower()))


def labels_follow_prompts(prompts: Sequence[Any], labels: Sequence[str]) -> tuple[float, float, float]:
    """Whether the prompts tell ``labels`` apart: (agreement, agreement expected by chance, p-value).

    Each row's nearest other prompts (the most words in common over words in either, Jaccard) vote: the row agrees by
    the share of them carrying its label (ties share the vote). Labels that name tasks follow the prompts (a task's
    prompts look alike); metadata drawn independently of them (a license, a shard) agrees only by chance, on
    average ``sum n_i (n_i - 1) / (n (n - 1))`` of the rows. The p-value is the binomial tail of the agreement at
    that chance rate (the votes are not quite independent: read it as a score, with a strict threshold).
    """
    n = len(labels)
    if n < 2 or len(prompts) != n:
        return 0.0, 0.0, 1.0
    words = [prompt_words(p) for p in prompts]
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    chance = sum(c * (c - 1) for c in counts.values()) / (n * (n - 1))
    agreement = 0.0
    for i in range(n):
        best, nearest = -1.0, []
        for j in range(n):
            if j == i:
                continue
            union = len(words[i] | words[j])
            sim = len(words[i] & words[j]) / union if union else 0.0
            if sim > best + 1e-12:
                best, nearest = sim, [j]
            elif abs(sim - best) <= 1e-12:
                nearest.append(j)
        agreement += sum(labels[j] == labels[i] for j in nearest) / len(nearest)
    return agreement, chance * n, binomial_tail(int(agreement + 1e-9), n, chance)


def constant_task_column(
    rows: list[dict[str, Any]],
    task_column: str,
    columns: list[str],
    *,
    default: str = "",
    max_values: int = 32,
    prompt_column: str = "prompt",
) -> tuple[dict[str, int], list[tuple[str, dict[str, int]]]] | None:
    """A task column that says one task while another column looks like the real task labels.

    Returns (the task column's value counts, [(look-alike column, its value counts over the rows of the dominant
    task)], usual task-label names first, then fewest values), or None: the task column varies, or no column looks
    like task labels (a genuinely single-task dataset). The evidence needed grows as the rows get fewer:

    - from ``MIN_ROWS`` rows (``MIN_ROWS_NEARLY`` when the column is only nearly constant), a look-alike's values
      suffice: 2..``max_values`` short non-numeric strings, ~10 rows each, two on a fair share of the rows;
    - with fewer (a debug run's tens of rows), ~5 rows per value suffice when the prompts also tell the values apart:
      :func:`labels_follow_prompts` gives a p-value below ``PROMPT_ALPHA`` (24 rows of two tasks, each row's nearest
      prompts of its own task: 24 agreements where 11.5 are expected, p ~ 2e-8), so a column of values unrelated to
      the prompts on a toy dataset stays silent.
    """
    n = len(rows)
    if not n:
        return None
    names = [task_name(row.get(task_column), default) for row in rows]
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    top, top_count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    if top_count < DOMINANT * n:
        return None
    few = n < (MIN_ROWS if len(counts) == 1 else MIN_ROWS_NEARLY)
    mine = [row for row, name in zip(rows, names, strict=True) if name == top]
    found: list[tuple[int, int, str, dict[str, int]]] = []
    for column in columns:
        if column == task_column or not_task_column(column) or column.lower() in ORDINAL_NAMES:
            continue
        values = [row.get(column) for row in mine]
        labels = _label_like(values, max_values, rows_per_value=5 if few else 10)
        if labels is None:
            continue
        if few and labels_follow_prompts([row.get(prompt_column) for row in mine], values)[2] >= PROMPT_ALPHA:
            continue
        found.append((0 if column.lower() in TASK_LIKE_NAMES else 1, len(labels), column, labels))
    if not found:
        return None
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return ordered, [(column, labels) for _, _, column, labels in sorted(found)]
