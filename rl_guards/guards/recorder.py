"""The rollout recorder: dumps people actually read, one Parquet file per dumped step, one row per completion.

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

The format (layout, columns, index, schema versions) is :mod:`rl_guards.rollouts.store`.

Metrics:

=====================================  ==========================================================
``rl_guards/rollouts/dumped_rows``     new rows written by one dump (a checkpoint re-tag adds none)
``rl_guards/rollouts/write_errors``    failed writes so far in the run (disk full, unwritable folder)
``rl_guards/rollouts/repaired_rows``   rows whose text had to be repaired to be written
``rl_guards/rollouts/dropped_dumps``   1 per periodic dump dropped because the writer was behind
=====================================  ==========================================================

A failed write is a ``write_failed`` violation (``mode: warn`` by default): warned once, counted, the run goes on.
A dump that finds its folder gone (removed under the running job) makes it again and writes there; the removal
is a ``folder_removed`` notice, warned once with the steps it took along, and the later dumps are all written.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from rl_guards.chat.markup import markup_from_config, tag_token_ids
from rl_guards.config import GuardsConfig, RolloutsConfig, ThinkTagsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import Guard, Reporter, RunContext
from rl_guards.rollouts.store import (
    INDEX_FILE,
    METADATA_KEY,
    SCHEMA_VERSION,
    SUPERSEDED_DIR,
    TOKENIZER_FILE,
    WANDB_KEY,
    MarkupSpec,
    build_rollout_table,
    complete_checkpoints,
    default_rollouts_dir,
    index_entry,
    retag_dump,
    scan_dumps,
    step_file_name,
    wandb_rows,
    write_atomic,
    write_index,
)
from rl_guards.rollouts.writer import BackgroundWriter, Job

logger = logging.getLogger("rl_guards")

def markup_spec(ctx: RunContext, tags: ThinkTagsConfig) -> MarkupSpec:
    """The markup of the run (:func:`~rl_guards.guards.think_tags.markup_from_config` on the template prompts
    render with) and its tag ids when each tag is one token."""
    markup = markup_from_config(tags, ctx.template_text)
    return MarkupSpec(markup, *tag_token_ids(ctx.tokenizer, markup))


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
        self._folder_made = False  # the dump folder existed once (writer thread): gone later means it was removed
        self.write_errors = 0  # failed writes so far (state: survives a resume)
        # The periodic schedule, kept on every rank alike: the first generation batch at or after each multiple of
        # every_steps is dumped (with steps_per_generation > 1 a batch is generated only every few steps).
        self._next_due = 0  # the next multiple of every_steps a batch must reach to be dumped
        self._due_step: int | None = None  # the step being dumped (its other generation batches join the file)
        self._due = False  # this batch is dumped
        # tracker tables of dumps, (step, columns, rows), held while their step may still get a checkpoint tag
        self._tables: list[tuple[int, list[str], list[list[Any]]]] = []

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
        self._log_tables(report, hold=False)

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
        if self._written is not None:  # the step's table (if held) names the checkpoint, then goes out
            self._tag_tables(self._written[0], self._written[2])
        self._log_tables(report, hold=False)

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
            self._log_tables(report, hold=False)

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
        self._folder_made = True
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
        for checkpoint in complete_checkpoints(self.ctx.output_dir):
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
        table = self.config.wandb_rows_per_task > 0 and report.tracker_active
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
        removed = None
        if self._folder_made and not folder.is_dir():  # removed under the running job: made again, and said
            removed = sorted(s for s in self._entries if s != meta["step"])
        folder.mkdir(parents=True, exist_ok=True)
        self._folder_made = True
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
                "repaired": repaired, "path": str(path), "folder_removed": removed}  # fmt: skip

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
                if value.get("folder_removed") is not None:
                    self._folder_removed(value["step"], value["folder_removed"], report)
                if value["index_error"]:  # the dump is on disk; its index line or the tokenizer is not
                    self._write_failed(value["index_error"], report, dump_written=True)
                if value["repaired"]:
                    report.metric("repaired_rows", float(value["repaired"]))
                if value["new_rows"]:
                    report.metric("dumped_rows", float(value["new_rows"]))
                if value["wandb"] is not None:
                    self._tables.append((int(value["step"]), *value["wandb"]))
        self._log_tables(report)

    # ----- tracker tables -----------------------------------------------------------------------------
    def _log_tables(self, report: Reporter, *, hold: bool = True) -> None:
        """Log the held dump tables, each at its own step (the tracker's row of that step); ``hold``: keep those of
        the current step, whose checkpoint tag (a save at the end of the step) is not known yet."""
        keep = []
        for step, columns, rows in self._tables:
            if hold and step == self._step:
                keep.append((step, columns, rows))
                continue
            report.session.reporter(report.guard, report.config, step).table(WANDB_KEY, columns, rows)
        self._tables = keep

    def _tag_tables(self, step: int, checkpoint: int | None) -> None:
        """The held tables of ``step`` name ``checkpoint`` (a periodic dump re-tagged by the save that followed)."""
        if checkpoint is None:
            return
        for table_step, columns, rows in self._tables:
            if table_step == step and "checkpoint" in columns:
                at = columns.index("checkpoint")
                for row in rows:
                    row[at] = checkpoint

    def _folder_removed(self, step: int, lost: list[int], report: Reporter) -> None:
        """The dump folder was gone when the dump of ``step`` was written: it was made again (warned once)."""
        gone = f"the dumps of steps {lost} went with it" if lost else "no dump of this run was in it yet"
        report.notice(
            "folder_removed",
            f"the rollout dump folder {self.folder} was removed while the run was writing to it ({gone}). Made it "
            f"again: the dump of step {step} and every later one are written there, with a new index and tokenizer. "
            "Fix: leave the folder in place while the run trains (copy dumps elsewhere to keep them), or set "
            "rollouts.output_dir to a folder that stays.",
        )

    def _write_failed(self, message: str, report: Reporter, *, dump_written: bool = False) -> None:
        self.write_errors += 1
        report.metric("write_errors", float(self.write_errors))
        goes_on = "Training goes on" if dump_written else "Training goes on without this dump"
        report.violation(
            "write_failed",
            f"{message}. {goes_on}; free disk space or set rollouts.output_dir to a writable folder.",
        )


__all__ = ["RolloutRecorder", "markup_spec"]
