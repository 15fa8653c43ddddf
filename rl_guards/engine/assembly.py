"""This rank's rows -> one gather of numbers -> the :class:`~rl_guards.core.batch.RolloutBatch` every guard sees.

A driver (the TRL adapter, a replay of recorded rollouts, a test) hands the engine a :class:`LocalRows`: the rows
this process generated, column by column, and the rewards of every row (TRL gathers those across ranks). The
assembly then, on every rank::

    batch = shell(local rows)                      # every row's slots; text only for this rank's rows
    values = base numbers + guards' scan(batch)    # per held row, plus the guards' device features
    all_gather(values)                             # numbers only: the batch's one collective and host transfer
    batch.<numbers> = gathered columns             # every rank now decides from the same numbers

Text crosses ranks only in :meth:`Assembly.fill_rows`: for the rows a message shows (to every rank) and for a dump
(to the main process), as flat int32 buffers for the token ids.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import NumberColumn, RewardRows, RolloutBatch
from rl_guards.core.task_labels import TaskLabels, task_hash
from rl_guards.guards.base import Finding, Guard, GuardSession, overrides

logger = logging.getLogger("rl_guards")

# Per-row numbers every rank contributes for its rows, before the guards' features.
BASE_FEATURES = ("ok", "advantage", "task", "length", "truncated", "thinking", "prompt_opened")


@dataclass
class LocalRows:
    """The rows of one generation batch this process holds, column by column, as a driver hands them over.

    ``rewards`` holds every row of the batch (all ranks, TRL's global order; NaN where a function skipped a row);
    the other columns hold this process's rows, which are the global rows ``start .. start + len(tasks) - 1``.
    """

    step: int
    mode: str  # "train" or "eval"
    num_generations: int
    reward_names: list[str]
    reward_weights: list[float]
    rewards: Any  # [global rows, functions] numbers
    advantages: Sequence[float]
    tasks: list[str]  # the dataset's task name per row (default task when absent)
    completions: list[Any]  # the text the reward functions saw
    completion_ids: list[list[int]]  # unpadded, EOS kept
    prompt_ids: list[list[int]]  # unpadded
    prompts: list[Any] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    thinking: list[bool | None] = field(default_factory=list)
    prompt_opened: list[bool] = field(default_factory=list)
    columns: dict[str, list[Any]] = field(default_factory=dict)  # other dataset columns
    start: int | None = None  # first global row held here; None: process_index * rows when rewards hold more
    max_completion_length: int = 0
    epoch: float = 0.0
    decode: Callable[[list[int]], str] | None = None
    reward_inputs: Any = None  # what the reward functions were called with (held rows)
    loss_inputs: list[Any] = field(default_factory=list)  # per held row: what the trainer trains on (if known)
    error: str | None = None  # the driver could not build these rows: the batch is skipped on every rank

    @classmethod
    def failed(cls, step: int, mode: str, rows: int, rewards: Any, error: str) -> LocalRows:
        """Rows a driver could not build: the gather still runs (no rank hangs) and the batch is skipped."""
        empty: list[Any] = [None] * rows
        return cls(step, mode, 1, [], [], rewards, [0.0] * rows, [""] * rows, empty, [[] for _ in range(rows)],
                   [[] for _ in range(rows)], error=error)  # fmt: skip

    def __len__(self) -> int:
        return len(self.tasks)


@dataclass
class Prepared:
    """One rank's part of a batch before the gather (:meth:`Assembly.prepare`): what :meth:`Assembly.finish` takes."""

    local: LocalRows
    batch: RolloutBatch | None  # the shell holding this rank's rows; None when they could not be built
    values: np.ndarray  # [held rows, host features]
    device_columns: list[Any]  # [held rows] tensors on the batch's device (None: zeros)
    error: str | None  # why this rank's rows could not be built


class Assembly:
    """Builds each batch from the local rows with one gather; moves rows' text when asked (collective)."""

    def __init__(
        self,
        config: GuardsConfig,
        guards: Sequence[Guard],
        session: GuardSession,
        ranks: Any,
        task_labels: TaskLabels,
    ) -> None:
        self.config = config
        self.guards = list(guards)
        self.session = session
        self.ranks = ranks
        self.task_labels = task_labels
        self.task_registry: dict[int, str] = {}  # task_hash -> name, the same on every rank
        # batches whose rows the main process already holds; weak references, not id(): a new batch can live where
        # a freed one did, and each rank must decide alike whether a batch still needs its gather
        self._filled_on_main: list[weakref.ref[RolloutBatch]] = []
        self.declare_features()

    def declare_features(self) -> None:
        """Fix the gathered columns from the guards' declared features (after their setup, which may set them)."""
        self._scanning = [g for g in self.guards if g.FEATURES]
        self._device_guards = [g for g in self.guards if g.TENSOR_FEATURES and overrides(g, "tensor_features")]
        self.host_names = list(BASE_FEATURES) + [f"{g.name}/{f}" for g in self._scanning for f in g.FEATURES]
        self.device_names = [f"{g.name}/{f}" for g in self._device_guards for f in g.TENSOR_FEATURES]

    @property
    def feature_names(self) -> list[str]:
        """Columns of the gathered per-row numbers, the same on every rank: base, guards' scans, device features."""
        return self.host_names + self.device_names

    # ----- one batch ---------------------------------------------------------------------------------------
    def assemble(self, local: LocalRows, device: Any = None) -> RolloutBatch | None:
        """The batch every guard sees, or None on every rank alike when some rank could not build its rows."""
        return self.finish(self.prepare(local, device), device)

    def prepare(self, local: LocalRows, device: Any = None) -> Prepared:
        """This rank's part, before any collective: the shell, the guards' scans of the held rows (reward probes
        call the run's reward functions here) and the device columns. Runs on the training thread."""
        rewards = np.asarray(local.rewards, dtype=np.float64)
        if rewards.ndim != 2:
            rewards = rewards.reshape(len(rewards), -1)
        n_local = len(local)
        n_global = int(rewards.shape[0])
        start = local.start
        if start is None:
            start = self.ranks.process_index * n_local if n_global != n_local else 0
        held = range(start, start + n_local)
        batch = None
        error = local.error
        values = np.zeros((n_local, len(self.host_names)), dtype=np.float64)
        if error is None:
            try:
                batch = self._shell(local, rewards, held)
                values = self._host_values(batch, local)
            except Exception as exc:  # the engine's own bug or a bad row: never fatal, never a hang
                error = f"{type(exc).__name__}: {exc}"
                values = np.zeros((n_local, len(self.host_names)), dtype=np.float64)
        return Prepared(local, batch, values, self._device_columns(n_local, device), error)

    def finish(self, prepared: Prepared, device: Any = None) -> RolloutBatch | None:
        """The gather of every rank's numbers and the batch built from them (collective; any thread)."""
        local, batch, error = prepared.local, prepared.batch, prepared.error
        gathered = self.ranks.gather_rows(prepared.values, prepared.device_columns, device)
        ok = gathered[:, 0] == 1
        if error is not None or batch is None or not bool(ok.all()):
            self.session.record(
                Finding(
                    "hook",
                    "internal_error",
                    "warning",
                    f"batch guards skipped at step {local.step}: {error or 'another rank could not build its rows'}",
                    local.step,
                ),
                warn=True,
            )
            return None
        columns = dict(zip(self.feature_names, gathered.T, strict=True))
        # Names and labels per distinct task, then per row (a batch has a handful of tasks and thousands of rows).
        unique_names, inverse = self._task_names_of(columns["task"].astype(np.int64), local.tasks)
        unique_labels = self._task_labels(unique_names, local.step)
        batch.raw_tasks = _pick(unique_names, inverse)
        batch.tasks = _pick(unique_labels, inverse)
        # The gathered numbers stay arrays, read like lists (no Python number per row unless a reader asks)
        batch.advantages = NumberColumn(columns["advantage"])
        lengths = columns["length"].astype(np.int64)
        batch.completion_lengths = NumberColumn(lengths, "int")
        batch.truncated = NumberColumn(columns["truncated"], "bool")
        batch.thinking = NumberColumn(columns["thinking"], "mode")  # 1/0, -1 where unknown (None)
        batch.prompt_opened = NumberColumn(columns["prompt_opened"], "bool")
        batch.features = {n: NumberColumn(columns[n]) for n in self.feature_names[len(BASE_FEATURES) :]}
        batch.__post_init__()
        # The batch's numeric views, from the arrays at hand (the values its cached properties would compute)
        labels = sorted(set(unique_labels))
        position = {t: i for i, t in enumerate(labels)}
        label_index = np.asarray([position[t] for t in unique_labels], dtype=np.int64)
        batch.__dict__["task_index"] = (labels, label_index[inverse])
        batch.__dict__["lengths"] = lengths
        return batch

    def _shell(self, local: LocalRows, rewards: np.ndarray, held: range) -> RolloutBatch:
        """The batch shaped for every row, holding this rank's rows only (numbers of other rows come later)."""
        n = int(rewards.shape[0])
        lo, hi = held.start, held.stop

        def spread(values: Sequence[Any], fill: Any) -> list[Any]:
            out = [fill] * n
            out[lo:hi] = values
            return out

        if len(local.completions) != len(held) or len(local.completion_ids) != len(held):
            raise ValueError(f"{len(held)} rows held but {len(local.completion_ids)} completions")
        columns: dict[str, list[Any]] = {}
        for name, values in local.columns.items():
            columns[name] = spread(values, None)
        advantages = [0.0] * n
        advantages[lo:hi] = [float(a) for a in local.advantages][: len(held)]
        matrix = np.array(rewards, dtype=np.float64)  # a copy: the driver's tensor may share its memory
        matrix.flags.writeable = False  # shared by rewards and reward_matrix: no reader may change it
        lengths = [0] * n
        lengths[lo:hi] = [len(ids) for ids in local.completion_ids]
        batch = RolloutBatch(
            step=local.step,
            mode=local.mode,
            num_generations=int(local.num_generations or 1),
            reward_names=list(local.reward_names),
            reward_weights=[float(w) for w in local.reward_weights],
            rewards=RewardRows(matrix),  # None where a function skipped the row (NaN)
            advantages=advantages,
            tasks=spread(local.tasks, ""),
            raw_tasks=spread(local.tasks, ""),
            completions=spread(local.completions, None),
            completion_ids=spread(local.completion_ids, []),
            prompt_ids=spread(local.prompt_ids or [[] for _ in held], []),
            truncated=spread(local.truncated or [False] * len(held), False),
            thinking=spread(local.thinking or [None] * len(held), None),
            max_completion_length=int(local.max_completion_length or 0),
            prompts=spread(local.prompts or [None] * len(held), None),
            columns=columns,
            decode=local.decode,
            epoch=float(local.epoch or 0.0),
            prompt_opened=spread(local.prompt_opened or [False] * len(held), False),
            local_rows=held if n != len(held) else None,
            reward_inputs=local.reward_inputs,
            loss_inputs=spread(local.loss_inputs, None) if local.loss_inputs else [],
            completion_lengths=lengths,
        )
        # what RolloutBatch.reward_matrix computes from the rows (None -> NaN), from the array at hand
        if n and rewards.shape[1]:
            batch.__dict__["reward_matrix"] = matrix
        return batch

    def _host_values(self, batch: RolloutBatch, local: LocalRows) -> np.ndarray:
        """``[held rows, host features]``: the base numbers, then every guard's ``scan`` (zeros for a failing one)."""
        n = len(local)
        lo = batch.held_rows.start
        values = np.zeros((n, len(self.host_names)), dtype=np.float64)
        values[:, 0] = 1.0
        values[:, 1] = batch.advantages[lo : lo + n]
        hashes = {name: task_hash(name) for name in set(local.tasks)}
        values[:, 2] = [hashes[t] for t in local.tasks]
        values[:, 3] = [len(ids) for ids in local.completion_ids]
        values[:, 4] = batch.truncated[lo : lo + n]
        values[:, 5] = [-1.0 if t is None else float(t) for t in batch.thinking[lo : lo + n]]
        values[:, 6] = batch.prompt_opened[lo : lo + n]
        column = len(BASE_FEATURES)
        for guard in self._scanning:
            feats: dict[str, list[float]] = {}
            try:
                feats = guard.scan(batch)
            except Exception as exc:  # a guard's own bug: counted, its features read as zeros
                self.session.record(
                    Finding(
                        guard.name, "internal_error", "warning", f"scan failed: {type(exc).__name__}: {exc}", batch.step
                    ),
                    warn=True,
                )
            for name in guard.FEATURES:
                got = feats.get(name)
                if got is not None and len(got) == n:
                    values[:, column] = got
                column += 1
        return values

    def _device_columns(self, rows: int, device: Any) -> list[Any]:
        """The guards' device features (the mask check's bits): one ``[rows]`` tensor per name, or zeros."""
        columns: list[Any] = []
        for guard in self._device_guards:
            try:
                feats = guard.tensor_features(rows, device)
                columns += [feats[n] for n in guard.TENSOR_FEATURES]
            except Exception as exc:  # zeros: the guard sees an unchecked batch
                logger.warning("rl_guards: %s features failed: %s", guard.name, exc)
                columns += [None for _ in guard.TENSOR_FEATURES]
        return columns

    def _task_names_of(self, hashes: np.ndarray, local_names: list[str]) -> tuple[list[str], np.ndarray]:
        """The task name of each distinct gathered id, and per row the index of its id in that list; names new to
        the run are exchanged once, in sorted order."""
        known = self.task_registry
        unique, inverse = _unique_runs(hashes)
        unknown = [int(h) for h in unique if int(h) not in known]
        if unknown:
            wanted = set(unknown)
            mine = {task_hash(name): name for name in set(local_names)}
            for part in self.ranks.all_gather_objects({h: t for h, t in mine.items() if h in wanted}):
                known.update(part)
        return [known.get(int(h), "") for h in unique.tolist()], inverse.reshape(-1)

    def _task_labels(self, names: list[str], step: int) -> list[str]:
        """Metric labels of the batch's tasks under ``tasks.max_tasks``; says once when the cap applies."""
        capped_before = len(self.task_labels.capped)
        labels = self.task_labels.labels(names)
        if self.task_labels.capped and not capped_before:
            kept, capped = list(self.task_labels.kept), sorted(self.task_labels.capped)
            self.session.record(
                Finding(
                    "tasks",
                    "task_cap",
                    "warning",
                    f"more than tasks.max_tasks={self.config.tasks.max_tasks} distinct tasks: per-task metrics are "
                    f"logged for {len(kept)} tasks ({', '.join(map(repr, kept[:5]))}{', ...' if len(kept) > 5 else ''})"
                    f" and the others ({', '.join(map(repr, capped[:5]))}{', ...' if len(capped) > 5 else ''}) share "
                    "the rl_guards_task/~other/... curves. Dumps keep every row's own task name. Raise "
                    "tasks.max_tasks (0 = no cap) to give every task its own curves.",
                    step,
                ),
                warn=True,
            )
        return labels

    # ----- text across ranks -------------------------------------------------------------------------------
    def fill_rows(self, batches: list[RolloutBatch], *, everywhere: bool, rows: set[int] | None = None) -> None:
        """Bring rows' text to the main process (dumps) or to every rank (messages); only with several ranks.

        Collective: every rank calls it with the same batches. ``rows`` limits it to the rows a message shows;
        for messages, guards' :meth:`~rl_guards.guards.base.Guard.row_evidence` of the rows travels too. Token ids
        travel as one flat int32 buffer per batch and field; text and columns as objects.
        """
        if not self.ranks.several:
            return
        filled = [ref() for ref in self._filled_on_main]
        todo = [b for b in batches if everywhere or not any(b is f for f in filled)]
        if not todo:
            return
        payload: list[dict[str, Any]] = []
        for batch in todo:
            held = [r for r in (batch.local_rows or ()) if rows is None or r in rows]
            part: dict[str, Any] = {
                "rows": held,
                "completion_ids": pack_ids([batch.completion_ids[r] for r in held]),
                "prompt_ids": pack_ids([batch.prompt_ids[r] for r in held]),
                "completions": [batch.completions[r] for r in held],
                "prompts": [batch.prompts[r] if r < len(batch.prompts) else None for r in held],
                "columns": {k: [v[r] for r in held] for k, v in batch.columns.items()},
            }
            if everywhere:
                part["evidence"] = {
                    (g.name, r): text
                    for r in held
                    for g in self.guards
                    if overrides(g, "row_evidence") and (text := _safe_evidence(g, batch, r)) is not None
                }
            payload.append(part)
        parts = self.ranks.all_gather_objects(payload) if everywhere else self.ranks.gather_objects_to_main(payload)
        if not everywhere:
            self._filled_on_main = [ref for ref in self._filled_on_main if ref() is not None]
            self._filled_on_main += [weakref.ref(b) for b in todo]
        for rank_parts in parts or []:
            for batch, part in zip(todo, rank_parts, strict=True):
                self._unpack(batch, part, lazy=not everywhere)  # a dump's rows: ids as int32 views

    @staticmethod
    def _unpack(batch: RolloutBatch, part: dict[str, Any], *, lazy: bool = False) -> None:
        rows = part["rows"]
        if not rows or (batch.local_rows is not None and rows[0] in batch.local_rows):
            return  # this rank's own rows
        completion_ids = unpack_ids(part["completion_ids"], lazy=lazy)
        prompt_ids = unpack_ids(part["prompt_ids"], lazy=lazy)
        lo, hi = rows[0], rows[0] + len(rows)
        n = len(batch)
        if (
            hi <= n
            and len(batch.completion_ids) == n
            and len(batch.prompt_ids) == n
            and hi <= len(batch.prompts)
            and rows == list(range(lo, hi))
            and len(part["completions"]) == len(part["prompts"]) == len(completion_ids) == len(prompt_ids) == len(rows)
        ):  # a rank's rows are one block: slice assignments (the same cells as the loop below)
            batch.completions[lo:hi] = part["completions"]
            batch.completion_ids[lo:hi] = completion_ids
            batch.prompt_ids[lo:hi] = prompt_ids
            batch.prompts[lo:hi] = part["prompts"]
        else:
            for k, row in enumerate(rows):
                batch.completions[row] = part["completions"][k]
                batch.completion_ids[row] = completion_ids[k]
                batch.prompt_ids[row] = prompt_ids[k]
                if row < len(batch.prompts):
                    batch.prompts[row] = part["prompts"][k]
        for name, values in part["columns"].items():
            column = batch.columns.setdefault(name, [None] * len(batch))
            if hi <= len(column) and len(values) == len(rows) and rows == list(range(lo, hi)):
                column[lo:hi] = values
            else:
                for row, value in zip(rows, values, strict=True):
                    column[row] = value
        batch.evidence.update(part.get("evidence", {}))


def pack_ids(rows: Sequence[Sequence[int]]) -> tuple[bytes, bytes]:
    """Token-id rows as two flat buffers: int32 ids end to end, and int64 row ends (cheap to pickle and send)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    return flat.tobytes(), np.cumsum(lengths).tobytes()


def unpack_ids(packed: tuple[bytes, bytes], *, lazy: bool = False) -> list[Any]:
    """The rows :func:`pack_ids` packed: lists of ints, or with ``lazy`` :class:`TokenRow` views of the buffer (no
    Python int made until a reader iterates them, as the dump writer does on its own thread)."""
    flat = np.frombuffer(packed[0], dtype=np.int32)
    ends = np.frombuffer(packed[1], dtype=np.int64).tolist()
    out: list[Any] = []
    start = 0
    for end in ends:  # each row's ints straight from the buffer (no list of the whole batch to slice)
        out.append(TokenRow(flat[start:end]) if lazy else flat[start:end].tolist())
        start = end
    return out


class TokenRow(Sequence[int]):
    """A row of token ids held as an int32 view: reads like a list of ints (``len``, index, slice, iterate, compare,
    pickle as a list). Rows that reach the main process for a dump stay in this form: making ~5 M Python ints for 64
    ranks' rows would cost the training thread ~0.1 s a dump step; the writer thread makes them instead."""

    __slots__ = ("_ids",)

    def __init__(self, ids: np.ndarray) -> None:
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._ids[index].tolist()
        return int(self._ids[index])

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenRow):
            return bool(np.array_equal(self._ids, other._ids))
        return isinstance(other, list | tuple) and self._ids.tolist() == list(other)

    __hash__ = None  # type: ignore[assignment]  # a list is not hashable either

    def __repr__(self) -> str:
        return repr(self._ids.tolist())

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (self._ids.tolist(),))


def _unique_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, sorting only the runs of equal neighbours (a group's rows share
    their task, so a batch has a few hundred runs however many thousand rows)."""
    if not len(values):
        return np.unique(values, return_inverse=True)
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    unique, run_index = np.unique(values[starts], return_inverse=True)
    return unique, np.repeat(run_index.reshape(-1), np.diff(np.append(starts, len(values))))


def _pick(values: list[str], index: np.ndarray) -> list[str]:
    """``[values[i] for i in index]``, in one numpy pass."""
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return table[index].tolist()


def _safe_evidence(guard: Guard, batch: RolloutBatch, row: int) -> str | None:
    try:
        return guard.row_evidence(batch, row)
    except Exception as exc:  # evidence is best effort: the message says the row could not be rendered
        logger.warning("rl_guards: %s could not render row %s: %s", guard.name, row, exc)
        return None


__all__ = ["BASE_FEATURES", "Assembly", "LocalRows", "pack_ids", "unpack_ids"]
