"""Rollout dumps people actually read: one Parquet file per dumped step, one row per completion.

When it writes (main process only, train batches only)::

    on_train_begin(k)        # dumps of steps > k are from an abandoned trajectory: moved to superseded/
    after_batch(batch)       # the first batch at or after each multiple of every_steps -> step_<step>.parquet
                             # (reason "periodic"); other batches of that step join the file
    before_save(checkpoint-k)  # the latest step seen, if not dumped yet -> reason "checkpoint", tagged k,
                               # on disk before the trainer writes the checkpoint
    on_stop(batch)           # a guard stops the run: the offending batch (reason "stopped"), on disk before the raise

The training thread only hands the batch over: Arrow building, the Parquet write and the index run on a bounded
background writer (:mod:`rl_guards.rollouts.writer`). At most ``MAX_PENDING`` dumps wait; when the writer falls
behind, the oldest waiting periodic dump is dropped (``dropped_dumps``), never a checkpoint's or a stop's. With
several ranks, the rows reach the main process only for the steps it dumps.

``step`` is TRL's step: the global step the batch is trained in (generated at ``global_step = step - 1``), the
number TRL's completions table, W&B and ``log_history`` give the same rows, so the dump of ``checkpoint-k`` is step
``k``. Dumps of schema 1 and 2 stored the generation step (one less): readers add one when reading them
(:func:`trl_step`). Several generation batches of one step (``steps_per_generation <
gradient_accumulation_steps``) go into one file; group ids stay unique per step.

Layout under ``rollouts.output_dir`` (default ``<output_dir>/rl_guards/rollouts``; ``~`` and env vars expanded)::

    step_000120.parquet   # columns below; file metadata key "rl_guards" holds step, reason, checkpoint, tasks
    index.jsonl           # one line per file, sorted by step; rebuilt from the files, rewritten atomically
    tokenizer.json        # the run's tokenizer (fast tokenizers): readers decode the ids with it; written with the
                          # first dump, and again with a later one whenever it is missing (a failed write)
    superseded/resumed_at_000100/step_000110.parquet   # dumps a resume made obsolete, kept for reference

Resume: after resuming at global step ``k`` nothing is lost (every dump of steps ``<= k`` stays) and nothing is
duplicated (the pre-crash dumps of steps ``> k`` belong to a trajectory the run abandoned: they are moved
aside, and those steps are dumped again as the resumed run reaches them). The index is rebuilt from the files,
and a complete checkpoint whose dump lost its tag (a kill between the two) gets it back.

Columns (``SCHEMA_VERSION`` 3; schema 2 had the same columns, with the generation step): ``schema_version, step,
epoch, mode, row, group, task`` (the dataset's own name), ``prompt_ids`` (the rendered prompt), ``completion_text``
(what the reward functions saw), ``completion_ids``
(special tokens included: EOS visible when decoded), ``prompt_tokens, completion_tokens, reward`` (weighted total,
null when every function skipped the row), ``advantage, truncated, think_kind, think_anomalies``
(:func:`rl_guards.core.think_markup.scan` verdict, plus ``tag_in_nonthinking`` for a non-thinking row with tags),
``thinking, columns`` (other dataset columns, JSON), and ``reward/<func>`` per reward function (null where the
function returned None). No decoded text is written: :class:`~rl_guards.rollouts.reader.RolloutStore` decodes
``prompt`` and ``completion`` (special tokens kept) when reading. Schema 1 (0.1) stored them decoded. A row
whose text Arrow cannot hold (a lone surrogate) is repaired (U+FFFD) and counted. Eval batches are not dumped.

W&B: when a run is active, each new dump also logs a small ``wandb.Table`` under ``rl_guards/rollouts``
(``wandb_rows_per_task`` rows per task, distinct groups first; only those rows are decoded; completion text cut
to 1,000 characters for the table only, with ``completion_chars`` and ``completion_cut_for_table`` columns).

Metrics:

=====================================  ==========================================================
``rl_guards/rollouts/dumped_rows``     new rows written by one dump (a checkpoint re-tag adds none)
``rl_guards/rollouts/write_errors``    failed writes so far in the run (disk full, unwritable folder)
``rl_guards/rollouts/repaired_rows``   rows whose text had to be repaired to be written
``rl_guards/rollouts/dropped_dumps``   1 per periodic dump dropped because the writer was behind
=====================================  ==========================================================

A failed write is a ``write_failed`` violation (``mode: warn`` by default): warned once, counted, the run goes on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_guards.config import GuardsConfig, RolloutsConfig, ThinkTagsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.think_markup import THINK, ThinkMarkup, anomalies_for_mode, scan
from rl_guards.guards.base import Guard, Reporter, RunContext
from rl_guards.guards.think_tags import KINDS, codes_of, markup_from_config, tag_token_ids
from rl_guards.rollouts.writer import BackgroundWriter, Job

logger = logging.getLogger("rl_guards")

SCHEMA_VERSION = 3
STEP_SCHEMA = 3  # the first schema whose ``step`` is TRL's (older dumps hold the generation step, one less)
INDEX_FILE = "index.jsonl"
TOKENIZER_FILE = "tokenizer.json"  # the run's tokenizer (rewritten when missing): readers decode ids with it
SUPERSEDED_DIR = "superseded"
METADATA_KEY = b"rl_guards"
REWARD_PREFIX = "reward/"
STEP_FILE_RE = re.compile(r"^step_(\d+)\.parquet$")
_SURROGATE = re.compile("[\ud800-\udfff]")
WANDB_KEY = "rl_guards/rollouts"
WANDB_TEXT_CHARS = 1000  # completion characters kept in the W&B table (the Parquet file keeps all)
WANDB_PROMPT_CHARS = 300  # prompt tail characters kept in the W&B table


def step_file_name(step: int) -> str:
    """``step_000120.parquet``."""
    return f"step_{int(step):06d}.parquet"


def default_rollouts_dir(output_dir: str | os.PathLike[str]) -> Path:
    """Where dumps go when ``rollouts.output_dir`` is unset."""
    return Path(output_dir) / "rl_guards" / "rollouts"


def read_dump_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``rl_guards`` metadata of one dump (reads the Parquet footer only)."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(str(path)).metadata or {}
    raw = meta.get(METADATA_KEY)
    if raw is None:
        raise ValueError(f"{path} is not an rl_guards rollout dump (no {METADATA_KEY.decode()!r} metadata)")
    return json.loads(raw)


def trl_step(stored_step: int, schema_version: int | None) -> int:
    """A dump's step in TRL's numbering: schema 1 and 2 stored the generation step, one less than TRL's."""
    return int(stored_step) + (1 if (schema_version or 1) < STEP_SCHEMA else 0)


def validate_metadata(meta: Any) -> dict[str, Any]:
    """The metadata of a dump, checked field by field; ValueError naming the field for anything crafted or broken
    (a step that is no integer, tasks that are no list of strings, ...)."""
    if not isinstance(meta, dict):
        raise ValueError(f"metadata is a {type(meta).__name__}, not a mapping")

    def integer(name: str, optional: bool = False) -> None:
        value = meta.get(name)
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"metadata field {name!r} must be a non-negative integer, got {value!r}"[:200])

    integer("step")
    integer("rows")
    integer("checkpoint", optional=True)
    integer("schema_version", optional=True)
    version = meta.get("schema_version")
    if version is not None and version > SCHEMA_VERSION:
        raise ValueError(f"rollout schema {version}; this rl_guards reads up to {SCHEMA_VERSION}: upgrade rl_guards")
    tasks = meta.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"metadata field 'tasks' must be a list of strings, got {tasks!r}"[:200])
    if not isinstance(meta.get("reason"), str):
        raise ValueError(f"metadata field 'reason' must be a string, got {meta.get('reason')!r}"[:200])
    names = meta.get("reward_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"metadata field 'reward_names' must be a list of strings, got {names!r}"[:200])
    return meta


# Arrow type of each column a reader uses (``int`` any integer width, ``float`` any float or integer): a dump whose
# column has another type (crafted, or written by something else) is unreadable, named once and skipped.
COLUMN_KINDS: dict[str, str] = {
    "schema_version": "int", "step": "int", "epoch": "float", "mode": "str", "row": "int", "group": "int",
    "task": "str", "prompt_ids": "ids", "completion_text": "str", "completion_ids": "ids", "prompt_tokens": "int",
    "completion_tokens": "int", "reward": "float", "advantage": "float", "truncated": "bool", "think_kind": "str",
    "think_anomalies": "strs", "thinking": "bool", "columns": "str", "prompt": "str", "completion": "str",
}  # fmt: skip


def check_dump_schema(schema: Any) -> None:
    """ValueError naming the first column whose Arrow type is not the one readers expect (:data:`COLUMN_KINDS`)."""
    import pyarrow as pa

    def fits(kind: str, tp: Any) -> bool:
        if kind == "int":
            return pa.types.is_integer(tp)
        if kind == "float":
            return pa.types.is_floating(tp) or pa.types.is_integer(tp)
        if kind == "str":
            return pa.types.is_string(tp) or pa.types.is_large_string(tp)
        if kind == "bool":
            return pa.types.is_boolean(tp)
        if not (pa.types.is_list(tp) or pa.types.is_large_list(tp)):
            return False
        return fits("int" if kind == "ids" else "str", tp.value_type)

    for f in schema:
        kind = "float" if f.name.startswith(REWARD_PREFIX) else COLUMN_KINDS.get(f.name)
        if kind is not None and not fits(kind, f.type):
            raise ValueError(f"column {f.name!r} has type {f.type}, expected {kind}"[:200])


def _arrow_schema(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_schema(str(path))


def index_entry(meta: dict[str, Any], file_name: str) -> dict[str, Any]:
    """One ``index.jsonl`` line from a dump's metadata."""
    return {
        "step": meta["step"],
        "rows": meta["rows"],
        "tasks": meta["tasks"],
        "reason": meta["reason"],
        "checkpoint": meta.get("checkpoint"),
        "file": file_name,
        "schema_version": meta.get("schema_version") or 1,
    }


def scan_dumps(folder: str | os.PathLike[str]) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Index entries of every readable dump in ``folder`` keyed by step (TRL's: older schemas migrated, see
    :func:`trl_step`), and each unreadable file as ``"<name> (<reason>)"`` (truncated, empty, not Parquet, crafted or
    broken metadata)."""
    entries: dict[int, dict[str, Any]] = {}
    bad: list[str] = []
    folder = Path(folder)
    if not folder.is_dir():
        return entries, bad
    for path in sorted(folder.iterdir()):
        match = STEP_FILE_RE.match(path.name)
        if not match:
            continue
        try:
            meta = validate_metadata(read_dump_metadata(path))
            if meta["step"] != int(match.group(1)):
                raise ValueError(f"metadata step {meta['step']} is not the step in the file name"[:200])
            check_dump_schema(_arrow_schema(path))
        except Exception as exc:  # anything on disk can be damaged: name it, never stop on it
            bad.append(f"{path.name} ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        meta = {**meta, "step": trl_step(meta["step"], meta.get("schema_version"))}
        if meta["step"] in entries:  # an old dump and a new one claim the same step: keep the newer format
            if entries[meta["step"]]["schema_version"] >= (meta.get("schema_version") or 1):
                bad.append(f"{path.name} (step {meta['step']} is also in {entries[meta['step']]['file']})")
                continue
            bad.append(f"{entries[meta['step']]['file']} (step {meta['step']} is also in {path.name})")
        entries[int(meta["step"])] = index_entry(meta, path.name)
    return entries, bad


def write_atomic(path: Path, write: Any) -> None:
    """Call ``write(tmp_path)`` then rename over ``path``: readers see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            try:
                tmp.unlink()
            except OSError:
                pass


def retag_dump(path: Path, checkpoint: int) -> dict[str, Any]:
    """Rewrite a dump's metadata as the dump of ``checkpoint-<checkpoint>`` (atomically); returns the metadata."""
    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    meta = json.loads((table.schema.metadata or {})[METADATA_KEY])
    meta.update(checkpoint=int(checkpoint), reason="checkpoint")
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    write_atomic(path, lambda tmp: pq.write_table(table, str(tmp), compression="zstd"))
    return meta


def _complete_checkpoints(output_dir: str | os.PathLike[str]) -> list[int]:
    """Steps of the ``checkpoint-<k>`` folders whose ``trainer_state.json`` was written (the trainer writes it last)."""
    out = []
    for path in Path(output_dir).glob("checkpoint-*"):
        match = re.fullmatch(r"checkpoint-(\d+)", path.name)
        if match and (path / "trainer_state.json").is_file():
            out.append(int(match.group(1)))
    return sorted(out)


def write_index(folder: Path, entries: dict[int, dict[str, Any]]) -> None:
    """Rewrite ``index.jsonl`` (sorted by step) atomically."""
    text = "".join(json.dumps(entries[s], sort_keys=True) + "\n" for s in sorted(entries))
    write_atomic(folder / INDEX_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@dataclass(frozen=True)
class MarkupSpec:
    """How to read think markup in this run: the family, and its tag ids when each tag is one token."""

    markup: ThinkMarkup = THINK
    open_id: int | None = None
    close_id: int | None = None


def markup_spec(ctx: RunContext, tags: ThinkTagsConfig) -> MarkupSpec:
    """The markup of the run (:func:`~rl_guards.guards.think_tags.markup_from_config` on the template prompts
    render with) and its tag ids when each tag is one token."""
    markup = markup_from_config(tags, ctx.template_text)
    return MarkupSpec(markup, *tag_token_ids(ctx.tokenizer, markup))


def think_verdict(
    text: str,
    special_text: str,
    token_ids: list[int],
    thinking: bool | None,
    prompt_opened: bool,
    spec: MarkupSpec,
) -> tuple[str, list[str]]:
    """(kind, anomalies) of one completion by :func:`rl_guards.core.think_markup.scan`, plus
    ``tag_in_nonthinking`` for a non-thinking row with tags. ``<think>`` markup is read on the reward text (not
    special, so kept); channel markups (gemma4, gpt-oss) on the text decoded with special tokens kept."""
    source = text if spec.markup.name in ("think", "custom") else special_text
    verdict = scan(
        source,
        spec.markup,
        prompt_opened=prompt_opened,
        token_ids=token_ids if spec.open_id is not None and spec.close_id is not None else None,
        open_id=spec.open_id,
        close_id=spec.close_id,
    )
    anomalies = set(verdict.anomalies)
    if thinking is False:
        anomalies |= set(anomalies_for_mode(verdict, thinking=False))
    return verdict.kind, sorted(anomalies)


class RolloutRecorder(Guard):
    """Writes rollout dumps every ``every_steps`` steps and at every checkpoint; observes, never stops a run."""

    name = "rollouts"
    config_field = "rollouts"
    MAX_PENDING = 2  # dumps waiting for the background writer; beyond, the oldest periodic one is dropped

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: RolloutsConfig = config.rollouts
        self._begun = False
        self._entries: dict[int, dict[str, Any]] = {}  # step -> index entry of the files on disk (writer thread)
        self._step: int | None = None  # step of the buffered batches
        self._batches: list[RolloutBatch] = []  # only the latest step: bounded memory
        # (step, batches, checkpoint, rows) of the last dump submitted, and its reason
        self._written: tuple[int, int, int | None, int] | None = None
        self._written_reason = ""
        self._markup = MarkupSpec()
        self._writer = BackgroundWriter(self.MAX_PENDING, name="rl_guards-rollouts")
        self._tokenizer_saved = False
        self.write_errors = 0  # failed writes so far (state: survives a resume)
        # The periodic schedule, kept on every rank alike: the first generation batch at or after each multiple of
        # every_steps is dumped (with steps_per_generation > 1 a batch is generated only every few steps).
        self._next_due = 0  # the next multiple of every_steps a batch must reach to be dumped
        self._due_step: int | None = None  # the step being dumped (its other generation batches join the file)
        self._due = False  # this batch is dumped

    def state_dict(self) -> dict[str, Any]:
        return {"write_errors": self.write_errors, "next_due": self._next_due, "due_step": self._due_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.write_errors = int(state.get("write_errors", 0))
        self._next_due = int(state.get("next_due", 0))
        due_step = state.get("due_step")
        self._due_step = None if due_step is None else int(due_step)

    def setup(self, ctx: RunContext) -> None:
        super().setup(ctx)
        self._markup = markup_spec(ctx, self.guards_config.think_tags)

    # ----- where --------------------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The dump folder."""
        if self.config.output_dir:  # "~" and $VARS expanded, as the trainer's own output_dir
            return Path(os.path.expandvars(os.path.expanduser(self.config.output_dir)))
        return default_rollouts_dir(self.ctx.output_dir)

    # ----- hooks --------------------------------------------------------------------------------------
    def on_train_begin(self, report: Reporter) -> None:
        if self.ctx.is_main_process:
            self._begin(int(report.step or 0), report)

    def wants_rows(self, batch: RolloutBatch) -> bool:
        """Whether this batch is dumped (its rows go to the main process); the same answer on every rank."""
        return batch.mode == "train" and self._due

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if batch.mode != "train":
            return
        every = self.config.every_steps
        self._due = batch.step >= self._next_due or batch.step == self._due_step
        if self._due:
            self._due_step = batch.step
            self._next_due = (batch.step // every + 1) * every
        if not self.ctx.is_main_process:
            return
        self._drain(report)
        if not self._begun:  # no on_train_begin: the run resumes at the step before this batch's
            self._begin(max(batch.step - 1, 0), report)
        self._buffer(batch)

    def after_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if self.ctx.is_main_process and self.wants_rows(batch):
            self._dump("periodic", None, report)

    def on_stop(self, batch: RolloutBatch, report: Reporter) -> None:
        """A guard stops the run on this batch: dump it, so the offending rollouts can be read."""
        if not self.ctx.is_main_process:
            return
        self._buffer(batch)
        self._dump("stopped", None, report, wait=True)

    def _buffer(self, batch: RolloutBatch) -> None:
        """Keep ``batch`` with the other batches of its step (a new step starts an empty buffer)."""
        if batch.step != self._step:
            self._step, self._batches = batch.step, []
        if not self._batches or self._batches[-1] is not batch:
            self._batches.append(batch)

    def before_save(self, checkpoint_dir: str, report: Reporter) -> None:
        """Dump the checkpoint's rollouts before the trainer writes it: no complete checkpoint lacks its dump."""
        self.on_save(checkpoint_dir, report)

    def on_save(self, checkpoint_dir: str, report: Reporter) -> None:
        """Tag (or write) the dump of the checkpoint just saved; a no-op when :meth:`before_save` already did."""
        if not self.ctx.is_main_process or not self.config.on_save or not self._batches:
            return
        match = re.search(r"checkpoint-(\d+)$", str(checkpoint_dir).rstrip("/\\"))
        checkpoint = int(match.group(1)) if match else (report.step if report.step is not None else self._step)
        self._dump("checkpoint", checkpoint, report, wait=True)

    def on_step_end(self, final: bool, report: Reporter) -> None:
        """Report finished writes before the trainer logs; at the last step, wait for every pending dump."""
        if self.ctx.is_main_process:
            if final:
                self._writer.flush()
            self._drain(report)

    def on_train_end(self, report: Reporter) -> None:
        if self.ctx.is_main_process:
            self._writer.close()
            self._drain(report)

    def flush(self, report: Reporter) -> None:
        """Wait until every submitted dump is on disk, and report what happened to them."""
        self._writer.flush()
        self._drain(report)

    # ----- resume -------------------------------------------------------------------------------------
    def _begin(self, step: int, report: Reporter) -> None:
        """Move dumps of steps > ``step`` aside (the run resumes at the checkpoint of ``step``, whose batch is trained),
        drop stale temp files, rebuild the index from the files."""
        self._begun = True
        folder = self.folder
        if not folder.is_dir():
            return
        try:
            for path in folder.glob(".*.tmp-*"):
                path.unlink()
            entries, bad = scan_dumps(folder)
            stale = sorted(s for s in entries if s > step)
            if stale:
                target = folder / SUPERSEDED_DIR / f"resumed_at_{step:06d}"
                if target.exists():
                    target = target.with_name(f"{target.name}_{time.strftime('%Y%m%d-%H%M%S')}")
                target.mkdir(parents=True, exist_ok=True)
                for s in stale:
                    name = entries.pop(s)["file"]  # its own name: a dump of an older schema keeps its numbering
                    os.replace(folder / name, target / name)
                report.note(
                    "superseded",
                    f"training starts at step {step}: moved the dumps of steps {stale} (an abandoned trajectory) "
                    f"to {target}",
                )
            if bad:
                report.info("unreadable_dump", f"ignored unreadable files in {folder}: {bad}")
            self._retag_checkpoints(step, entries, report)
            self._entries = entries
            write_index(folder, entries)
        except OSError as exc:
            self._write_failed(f"could not prepare {folder} for dumps: {type(exc).__name__}: {exc}", report)

    def _retag_checkpoints(self, step: int, entries: dict[int, dict[str, Any]], report: Reporter) -> None:
        """Each complete checkpoint up to ``step`` gets its tagged dump (a kill could fall between the two).

        The dump of ``checkpoint-k`` holds the last generation batch before the save: the latest dumped step up to
        ``k``, less than ``steps_per_generation`` steps back. An untagged dump there is tagged; when there is
        none, an info finding says the checkpoint has no dump (its rollouts were never written).
        """
        spg = max(1, int(getattr(self.ctx.args, "steps_per_generation", None) or 1))
        tagged = {e.get("checkpoint") for e in entries.values()}
        for checkpoint in _complete_checkpoints(self.ctx.output_dir):
            if checkpoint > step or checkpoint in tagged:
                continue
            below = [s for s in entries if s <= checkpoint]
            latest = max(below) if below else None
            if latest is None or latest <= checkpoint - spg or entries[latest].get("checkpoint") is not None:
                report.info(
                    "checkpoint_without_dump",
                    f"checkpoint-{checkpoint} has no rollout dump (the run stopped before it was written); the "
                    "dumps of the other steps are intact.",
                )
                continue
            path = self.folder / entries[latest]["file"]
            meta = retag_dump(path, checkpoint)
            entries[latest] = index_entry(meta, path.name)
            report.note("retagged_dump", f"tagged the dump of step {latest} with checkpoint-{checkpoint} on resume")

    # ----- dumping ------------------------------------------------------------------------------------
    def _dump(self, reason: str, checkpoint: int | None, report: Reporter, *, wait: bool = False) -> None:
        """Submit the buffered step to the background writer (``wait``: until it is on disk, e.g. a checkpoint's)."""
        step, count = int(self._step if self._step is not None else 0), len(self._batches)
        if self._written is not None and self._written[:2] == (step, count):
            stop_noted = reason != "stopped" or self._written_reason == "stopped"
            if (checkpoint is None or self._written[2] == checkpoint) and stop_noted:
                return  # already submitted with these rows, this tag and, for a stop, the stop reason
        same_step = self._written is not None and self._written[0] == step
        retag = self._written is not None and self._written[:2] == (step, count)  # same rows, new checkpoint tag
        if checkpoint is None and same_step:
            checkpoint = self._written[2]  # more rows for a step already tagged by a checkpoint: keep the tag
        if self._written_reason == "stopped" and same_step:
            reason = "stopped"  # a stop stays visible when a later save re-tags the same rows
        if checkpoint is not None and reason != "stopped":
            reason = "checkpoint"
        rows_before = self._written[3] if same_step and self._written is not None else 0
        batches = list(self._batches)
        rows = sum(len(b) for b in batches)
        self._written = (step, count, checkpoint, rows)
        self._written_reason = reason
        meta = {
            "schema_version": SCHEMA_VERSION,
            "step": step,
            "rows": rows,
            "reason": reason,
            "checkpoint": checkpoint,
            "reward_names": list(batches[0].reward_names),
        }
        new_rows = 0 if retag else rows - rows_before
        keep = wait or checkpoint is not None or reason == "stopped"
        # Asked here, on the training thread: trackio keeps its run in a context variable, unset in the writer's.
        table = self.config.wandb_rows_per_task > 0 and _wandb_active()
        self._writer.submit(
            Job(f"step {step}", lambda: self._write(batches, meta, new_rows, table), keep=keep, tag=step)
        )
        if wait:
            self._writer.flush()
        self._drain(report)

    def _write(
        self, batches: list[RolloutBatch], meta: dict[str, Any], new_rows: int, tracker_table: bool = False
    ) -> dict[str, Any]:
        """On the writer thread: Arrow table, Parquet file (atomic), index; returns what the training thread logs."""
        import pyarrow.parquet as pq

        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        table, repaired = build_rollout_table(batches, markup=self._markup)
        meta = {**meta, "tasks": sorted(set(table.column("task").to_pylist())), "repaired_rows": repaired}
        meta["written_at"] = time.time()
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
        path = folder / step_file_name(meta["step"])
        write_atomic(path, lambda tmp: pq.write_table(table, str(tmp), compression="zstd"))
        tokenizer_error = self._save_tokenizer(folder)  # after the dump: a failure here never costs the dump
        # The index lists the files on disk: dumps removed meanwhile (the folder deleted mid-run) are dropped.
        self._entries = {s: e for s, e in self._entries.items() if (folder / e["file"]).is_file()}
        self._entries[meta["step"]] = index_entry(meta, path.name)
        index_error = None
        try:
            write_index(folder, self._entries)
        except OSError as exc:  # the dump itself is complete; the index is rebuilt from the files later
            index_error = f"wrote {path} but could not update {folder / INDEX_FILE}: {type(exc).__name__}: {exc}"
        if tokenizer_error:
            index_error = tokenizer_error if index_error is None else f"{index_error}; {tokenizer_error}"
        wandb = None
        if new_rows and tracker_table:
            wandb = wandb_rows(table, self.config.wandb_rows_per_task, self.ctx.decode, meta.get("checkpoint"))
        return {"step": meta["step"], "new_rows": new_rows, "index_error": index_error, "wandb": wandb,
                "repaired": repaired, "path": str(path)}  # fmt: skip

    def _save_tokenizer(self, folder: Path) -> str | None:
        """The tokenizer readers decode the ids with (``tokenizer.json``, fast tokenizers only): written with the
        first dump, and again with the next dump whenever it is not on disk (a failed write, a removed folder);
        returns what went wrong, or None."""
        path = folder / TOKENIZER_FILE
        if self._tokenizer_saved and path.is_file():
            return None
        backend = getattr(self.ctx.tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        try:
            write_atomic(path, lambda tmp: backend.save(str(tmp)))
        except Exception as exc:  # disk full, a removed folder: retried with the next dump
            self._tokenizer_saved = False
            return (
                f"could not write {path} (readers need it to decode the prompts; retried with the next dump): "
                f"{type(exc).__name__}: {exc}"
            )
        self._tokenizer_saved = True
        return None

    def _drain(self, report: Reporter) -> None:
        """Turn the writer's results into metrics, findings and W&B tables (on the training thread)."""
        for result in self._writer.results():
            # Findings about a dump belong to the step it holds, not to the step the writer finished in.
            report = report.session.reporter(report.guard, report.config, result.tag)
            if result.status == "dropped":
                report.metric("dropped_dumps", 1.0)
                report.info("dropped_dump", f"the dump of {result.label} was dropped: the writer was still busy "
                            f"with {self.MAX_PENDING} earlier dumps (checkpoint dumps are never dropped)")  # fmt: skip
            elif result.status == "error":
                exc = result.error
                self._written = None  # a later save writes the step again
                self._write_failed(
                    f"could not write the rollouts of {result.label} to {self.folder}: {type(exc).__name__}: {exc}",
                    report,
                )
            else:
                value = result.value
                if value["index_error"]:  # the dump is on disk; its index line or the tokenizer is not
                    self._write_failed(value["index_error"], report, dump_written=True)
                if value["repaired"]:
                    report.metric("repaired_rows", float(value["repaired"]))
                if value["new_rows"]:
                    report.metric("dumped_rows", float(value["new_rows"]))
                if value["wandb"] is not None:
                    self._log_wandb(*value["wandb"], value["step"])

    def _write_failed(self, message: str, report: Reporter, *, dump_written: bool = False) -> None:
        self.write_errors += 1
        report.metric("write_errors", float(self.write_errors))
        goes_on = "Training goes on" if dump_written else "Training goes on without this dump"
        report.violation(
            "write_failed",
            f"{message}. {goes_on}; free disk space or set rollouts.output_dir to a writable folder.",
        )

    # ----- W&B ----------------------------------------------------------------------------------------
    def _log_wandb(self, columns: list[str], rows: list[list[Any]], step: int) -> None:
        try:
            from rl_guards.trl import wandb_io

            wandb_io.log({WANDB_KEY: wandb_io.table(columns, rows)})
        except Exception as exc:  # W&B must never break a run
            logger.warning("rl_guards: could not log the rollouts of step %s to W&B: %s", step, exc)


def _wandb_active() -> bool:
    try:
        from rl_guards.trl import wandb_io

        return wandb_io.active_run() is not None
    except Exception:
        return False


def build_rollout_table(batches: list[RolloutBatch], markup: MarkupSpec | None = None) -> tuple[Any, int]:
    """The Arrow table of one step's batches (see the module docstring for the columns), and the number of rows
    whose text had to be repaired (a lone surrogate, which Arrow cannot hold, is replaced by U+FFFD)."""
    import pyarrow as pa

    markup = markup or MarkupSpec()
    reward_names: list[str] = []
    for batch in batches:
        for name in batch.reward_names:
            if name not in reward_names:
                reward_names.append(name)
    names = (
        "step", "epoch", "mode", "row", "group", "task", "prompt_ids", "completion_text", "completion_ids",
        "prompt_tokens", "completion_tokens", "reward", "advantage", "truncated", "think_kind", "think_anomalies",
        "thinking", "columns",
    )  # fmt: skip
    cols: dict[str, list[Any]] = {name: [] for name in names}
    per_func: dict[str, list[float | None]] = {name: [] for name in reward_names}
    repaired = 0
    group_offset = 0
    row_offset = 0
    for batch in batches:
        task_names = batch.raw_tasks or batch.tasks  # the dataset's own names, not the capped metric labels
        extra_names = sorted(batch.columns)
        kinds = batch.features.get("think_tags/kind")
        codes = batch.features.get("think_tags/codes")
        opened = batch.prompt_opened or []
        for i in range(len(batch)):
            text = batch.completions[i] if isinstance(batch.completions[i], str) else ""
            clean = _clean_text(text)
            repaired += clean is not text
            cids = list(batch.completion_ids[i])
            if kinds is not None and codes is not None:
                kind, anomalies = KINDS[int(kinds[i])], codes_of(int(codes[i]))
            else:  # a batch built by hand: scan it here
                kind, anomalies = think_verdict(
                    text, text, cids, batch.thinking[i], bool(opened[i]) if i < len(opened) else False, markup
                )
            pids = batch.prompt_ids[i] if i < len(batch.prompt_ids) else []
            cols["step"].append(int(batch.step))
            cols["epoch"].append(float(batch.epoch))
            cols["mode"].append(batch.mode)
            cols["row"].append(row_offset + i)
            cols["group"].append(group_offset + i // batch.num_generations)
            cols["task"].append(_clean_text(str(task_names[i])))
            cols["prompt_ids"].append(pids)
            cols["completion_text"].append(clean)
            cols["completion_ids"].append(cids)
            cols["prompt_tokens"].append(len(pids))
            cols["completion_tokens"].append(batch.completion_lengths[i])
            cols["reward"].append(_finite(batch.total_reward(i)))
            cols["advantage"].append(_finite(batch.advantages[i]))
            cols["truncated"].append(bool(batch.truncated[i]))
            cols["think_kind"].append(kind)
            cols["think_anomalies"].append(list(anomalies))
            cols["thinking"].append(batch.thinking[i])
            cols["columns"].append(_columns_json(batch, extra_names, i))
            values = dict(zip(batch.reward_names, batch.rewards[i], strict=False))
            for name in reward_names:
                per_func[name].append(_finite(values.get(name)))
        group_offset += math.ceil(len(batch) / batch.num_generations)
        row_offset += len(batch)
    n = len(cols["step"])
    fields = [
        ("schema_version", pa.int16(), [SCHEMA_VERSION] * n),
        ("step", pa.int64(), cols["step"]),
        ("epoch", pa.float64(), cols["epoch"]),
        ("mode", pa.string(), cols["mode"]),
        ("row", pa.int32(), cols["row"]),
        ("group", pa.int32(), cols["group"]),
        ("task", pa.string(), cols["task"]),
        ("prompt_ids", pa.list_(pa.int32()), cols["prompt_ids"]),
        ("completion_text", pa.string(), cols["completion_text"]),
        ("completion_ids", pa.list_(pa.int32()), cols["completion_ids"]),
        ("prompt_tokens", pa.int32(), cols["prompt_tokens"]),
        ("completion_tokens", pa.int32(), cols["completion_tokens"]),
        ("reward", pa.float64(), cols["reward"]),
        ("advantage", pa.float64(), cols["advantage"]),
        ("truncated", pa.bool_(), cols["truncated"]),
        ("think_kind", pa.string(), cols["think_kind"]),
        ("think_anomalies", pa.list_(pa.string()), cols["think_anomalies"]),
        ("thinking", pa.bool_(), cols["thinking"]),
        ("columns", pa.string(), cols["columns"]),
    ]
    fields += [(REWARD_PREFIX + name, pa.float64(), per_func[name]) for name in reward_names]
    schema = pa.schema([pa.field(name, tp) for name, tp, _ in fields])
    return pa.Table.from_arrays([pa.array(values, type=tp) for _, tp, values in fields], schema=schema), repaired


def _clean_text(text: str) -> str:
    """``text``, or a copy with lone surrogates replaced by U+FFFD (Arrow holds valid UTF-8 only)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def _columns_json(batch: RolloutBatch, names: list[str], row: int) -> str:
    if not names:
        return "{}"
    values = {k: batch.columns[k][row] if row < len(batch.columns[k]) else None for k in names}
    return _clean_text(json.dumps(values, default=str, ensure_ascii=False))


def wandb_rows(
    table: Any, per_task: int, decode: Any = None, checkpoint: int | None = None
) -> tuple[list[str], list[list[Any]]]:
    """A small sample for a W&B table: ``per_task`` rows per task, from distinct groups first; texts cut.

    Columns, as TRL's own completions table has them and more: step, checkpoint, task, group, the prompt's tail, the
    completion with special tokens visible (decoded from its ids with ``decode``, for the sampled rows only; without
    a decoder the reward functions' text), the total reward, one column per reward function, the advantage,
    truncated, the think verdict and its anomalies.
    """
    funcs = [name for name in table.column_names if name.startswith(REWARD_PREFIX)]
    data = table.select(
        ["step", "task", "group", "reward", *funcs, "advantage", "truncated", "think_kind", "think_anomalies",
         "prompt_ids", "completion_ids", "completion_text"]
    ).to_pylist()  # fmt: skip
    by_task: dict[str, list[int]] = {}
    for i, row in enumerate(data):
        by_task.setdefault(row["task"], []).append(i)
    columns = [
        "step", "checkpoint", "task", "group", "prompt_tail", "completion", "reward", *funcs, "advantage",
        "truncated", "think_kind", "think_anomalies", "completion_chars", "completion_cut_for_table",
    ]  # fmt: skip
    rows: list[list[Any]] = []
    for task in sorted(by_task):
        seen_groups: set[int] = set()
        firsts, rest = [], []
        for i in by_task[task]:
            (rest if data[i]["group"] in seen_groups else firsts).append(i)
            seen_groups.add(data[i]["group"])
        for i in (firsts + rest)[:per_task]:
            row = data[i]
            text = decode(row["completion_ids"]) if decode is not None else row["completion_text"] or ""
            prompt = decode(row["prompt_ids"]) if decode is not None and row["prompt_ids"] else ""
            rows.append(
                [
                    row["step"], checkpoint, row["task"], row["group"], prompt[-WANDB_PROMPT_CHARS:],
                    text[:WANDB_TEXT_CHARS], row["reward"], *(row[f] for f in funcs), row["advantage"],
                    row["truncated"], row["think_kind"], ", ".join(row["think_anomalies"] or []), len(text),
                    len(text) > WANDB_TEXT_CHARS,
                ]
            )  # fmt: skip
    return columns, rows


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if not math.isfinite(value) else value
