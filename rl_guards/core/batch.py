"""The rollout batch every guard sees: per-row numbers for every row, text for the rows this process holds.

Rows are in TRL's global order (rank 0's rows, then rank 1's, ...), so rows ``g*G .. g*G+G-1`` form group
``g`` with ``G = num_generations``, even when a group is split across ranks. The numbers (rewards, advantages,
task labels, lengths, truncation, thinking mode, and the per-row ``features`` guards computed on their own rows)
are the same on every rank, so every rank reaches the same decision. Text and token ids (``completions``,
``completion_ids``, ``prompt_ids``, ``prompts``, ``columns``) are filled only for ``local_rows`` (the rows this
process generated); other rows hold ``None`` / ``[]`` until a message or a dump needs them and the adapter moves
them across ranks. A batch built by hand (tests, replays) holds every row (``local_rows=None``).

The numeric views (:attr:`reward_matrix`, :attr:`task_index`, ...) are numpy arrays computed once per batch, so
that the statistics over the gathered batch stay cheap when it has thousands of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np


@dataclass
class RolloutBatch:
    """One generation batch (all ranks), as scored by the reward functions.

    The per-row numeric fields are sequences: lists when built by hand, and when the engine assembles a batch,
    :class:`NumberColumn` / :class:`RewardRows` (numpy arrays that read, iterate, compare and pickle like those
    lists; ``list(...)`` makes one, :meth:`column_array` takes the numbers without a pass over the rows).
    """

    step: int  # TRL's step: the global step a train batch is trained in (global_step + 1 at generation)
    mode: str  # "train" or "eval"
    num_generations: int  # group size G
    reward_names: list[str]  # one per reward function, TRL's names (the W&B keys)
    reward_weights: list[float]  # one per reward function
    rewards: Sequence[list[float | None]]  # [row][func]; None where the function returned None (not its row)
    advantages: Sequence[float]  # one per row, as the trainer computed them
    tasks: list[str]  # one per row: the task's metric label (its name, or OTHER_TASKS beyond tasks.max_tasks)
    completions: list[Any]  # the completion text the reward functions saw (None for rows held by other ranks)
    completion_ids: list[list[int]]  # generated ids, unpadded, cut after the first EOS (EOS kept); [] if not held
    prompt_ids: list[list[int]]  # rendered prompt ids, unpadded ([] if not held)
    truncated: Sequence[bool]  # completion did not end with EOS (hit max_completion_length)
    thinking: Sequence[bool | None]  # per-row thinking mode, None when unknown
    max_completion_length: int = 0
    prompts: list[Any] = field(default_factory=list)  # raw prompts (messages or strings)
    columns: dict[str, list[Any]] = field(default_factory=dict)  # other dataset columns, one value per row
    # per row: the rendered prompt ends inside an open think block (template prefill); empty = unknown
    prompt_opened: Sequence[bool] = field(default_factory=list)
    # per row: the task name from the dataset (default task when null or absent); empty = same as ``tasks``
    raw_tasks: list[str] = field(default_factory=list)
    # Decoders supplied by the adapter; None in pure unit tests.
    decode: Any = None  # callable(list[int]) -> str with special tokens kept
    epoch: float = 0.0
    # per row: completion tokens (EOS included); empty = the lengths of ``completion_ids``
    completion_lengths: Sequence[int] = field(default_factory=list)
    # per-row numbers guards computed on the rows each process holds (``Guard.scan``), named ``<guard>/<name>``
    features: dict[str, Sequence[float]] = field(default_factory=dict)
    local_rows: range | None = None  # rows whose text this process holds; None = every row
    # guard-rendered views of single rows, for messages: (guard name, row) -> text (e.g. a mask rendering)
    evidence: dict[tuple[str, int], str] = field(default_factory=dict)
    # what TRL passed the reward functions for the held rows, in held-row order: (inputs, prompts, completions,
    # completion_ids, trainer_state) -- to score variants of these rows the way TRL does (None in hand-built batches)
    reward_inputs: Any = None
    # per row: what the trainer trains on for it, where a driver knows (tinker: a core.datum_masks.LossRow with the
    # sequences as sampled and the datums built for them); None where not held or unknown; empty = unknown
    loss_inputs: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.completions)
        if not self.completion_lengths:
            self.completion_lengths = [len(ids) for ids in self.completion_ids]
        for name in ("rewards", "advantages", "tasks", "completion_ids", "truncated", "thinking", "completion_lengths"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"RolloutBatch.{name} has {got} rows, completions has {n}")
        if self.num_generations <= 0:
            raise ValueError(f"num_generations must be > 0, got {self.num_generations}")

    def __len__(self) -> int:
        return len(self.completions)

    # ----- rows -------------------------------------------------------------------------------------------
    @property
    def held_rows(self) -> range:
        """The rows whose text this process holds."""
        return self.local_rows if self.local_rows is not None else range(len(self))

    def holds(self, row: int) -> bool:
        """True when this process holds the row's text and ids."""
        return self.local_rows is None or row in self.local_rows or self.completions[row] is not None

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

    # ----- numeric views (computed once) ------------------------------------------------------------------
    @cached_property
    def task_index(self) -> tuple[list[str], np.ndarray]:
        """Sorted task names, and per row the index of its task in that list."""
        names = self.task_names()
        position = {t: i for i, t in enumerate(names)}
        return names, np.fromiter((position[t] for t in self.tasks), dtype=np.int64, count=len(self))

    @cached_property
    def reward_matrix(self) -> np.ndarray:
        """``[rows, functions]`` float64, NaN where a function returned None."""
        n, f = len(self), len(self.reward_names)
        if not n:
            return np.zeros((0, f))
        return np.array(self.rewards, dtype=np.float64).reshape(n, -1)  # None -> NaN

    @cached_property
    def scored(self) -> np.ndarray:
        """``[rows, functions]`` bool: the function returned a value for the row."""
        return ~np.isnan(self.reward_matrix)

    @cached_property
    def weighted_totals(self) -> np.ndarray:
        """Per row, the weighted sum of the values returned (None counted 0), as TRL sums them (see
        :func:`weighted_sum`: an inf reward keeps its row's total non-finite)."""
        return weighted_sum(self.reward_matrix, self.reward_weights)

    @cached_property
    def lengths(self) -> np.ndarray:
        """Completion tokens per row (int64)."""
        return np.asarray(self.completion_lengths, dtype=np.int64)

    def feature(self, name: str) -> np.ndarray | None:
        """A per-row feature as an array (None when absent)."""
        values = self.features.get(name)
        return None if values is None else self.column_array(values)

    def column_array(self, values: Sequence[float]) -> np.ndarray:
        """``np.asarray(values, dtype=np.float64)`` as a new array (a :class:`NumberColumn`'s numbers without a pass
        over the rows)."""
        if isinstance(values, NumberColumn):
            return values.array.astype(np.float64)
        return np.asarray(values, dtype=np.float64)


class _ArrayList(Sequence[Any]):
    """A numpy array read like the Python list it stands for: the list (``_make_list``) is made once, on the first
    read that needs it; iterate, ``==`` against a list, repr and pickle as that list; ``np.asarray`` is the array."""

    __slots__ = ("_array", "_list")

    def __init__(self, array: np.ndarray) -> None:
        self._array = array.view()
        self._array.flags.writeable = False  # np.asarray hands this out: a reader must not change the batch
        self._list: list[Any] | None = None

    def _make_list(self) -> list[Any]:
        raise NotImplementedError

    def _cell(self, index: Any) -> Any:
        raise NotImplementedError

    def tolist(self) -> list[Any]:
        """The list it stands for (made once)."""
        if self._list is None:
            self._list = self._make_list()
        return self._list

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: Any) -> Any:
        if self._list is not None or isinstance(index, slice):
            return self.tolist()[index]
        return self._cell(index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _ArrayList):
            return self.tolist() == other.tolist()
        return isinstance(other, list | tuple) and self.tolist() == list(other)

    __hash__ = None  # type: ignore[assignment]  # a list is not hashable either

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy:
            return self._array.astype(dtype if dtype is not None else self._array.dtype, copy=True)
        return self._array if dtype is None else self._array.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return repr(self.tolist())

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (self.tolist(),))


class NumberColumn(_ArrayList):
    """A per-row column of numbers held as a numpy array, read like the list it stands for.

    The assembly fills the batch's numeric columns (advantages, lengths, flags, features) with these, so a batch
    of thousands of gathered rows makes no Python number until someone reads a row: ``len``, index (a Python
    ``float``/``int``/``bool``, or for ``kind="mode"`` ``True``/``False``/``None`` from 1/0/-1), slice and iterate
    (a list), ``==`` against a list, pickle as a list; ``np.asarray(column)`` is the array itself.
    """

    __slots__ = ("_kind",)

    def __init__(self, array: np.ndarray, kind: str = "float") -> None:
        if kind not in ("float", "int", "bool", "mode"):
            raise ValueError(f"NumberColumn kind must be float, int, bool or mode, got {kind!r}")
        super().__init__(array)
        self._kind = kind

    @property
    def array(self) -> np.ndarray:
        """The numbers (do not write to it)."""
        return self._array

    def _make_list(self) -> list[Any]:
        a = self._array
        if self._kind == "mode":
            cells = (a > 0).astype(object)
            cells[a < 0] = None
            return cells.tolist()
        if self._kind == "bool":
            return (a != 0).tolist()
        return a.astype(np.int64 if self._kind == "int" else np.float64).tolist()

    def _cell(self, index: Any) -> Any:
        value = self._array[index]
        if self._kind == "mode":
            return None if value < 0 else bool(value > 0)
        if self._kind == "bool":
            return bool(value != 0)
        return int(value) if self._kind == "int" else float(value)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if self._kind == "mode":  # None stays None, as in the list
            return np.asarray(self.tolist(), dtype=dtype if dtype is not None else object)
        return super().__array__(dtype, copy)


class RewardRows(_ArrayList):
    """``RolloutBatch.rewards`` from a ``[rows, functions]`` float64 array: each row read is a list with ``None``
    where the array holds NaN (a function that skipped the row); iterate, compare and pickle as the list of lists."""

    __slots__ = ()

    def _make_list(self) -> list[Any]:
        nan = np.isnan(self._array)
        if not nan.any():
            return self._array.tolist()
        cells = self._array.astype(object)
        cells[nan] = None
        return cells.tolist()

    def _cell(self, index: Any) -> Any:
        return [None if math.isnan(v) else v for v in self._array[index].tolist()]


def weighted_sum(matrix: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Per row of a ``[rows, functions]`` reward matrix, the weighted sum with NaN (a skipped function) counted 0.

    Only NaN is zeroed: an inf reward keeps the total inf (or NaN, with an opposite inf), never the huge finite
    number ``np.nan_to_num`` would make of it; callers keep non-finite totals out of their means and count them.
    """
    w = np.asarray(weights, dtype=np.float64)[: matrix.shape[1]]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isnan(matrix), 0.0, matrix) @ w


def nan_to_none(values: Sequence[float]) -> list[float | None]:
    """Map NaN to None (TRL turns a reward function's None into NaN)."""
    return [None if (v is None or math.isnan(v)) else float(v) for v in values]
