"""Rollout dumps people actually read: one Parquet file per dumped step, one row per completion.

When it writes (main process only, train batches only)::

    on_train_begin(k)     # dumps of steps >= k are from an abandoned trajectory: moved to superseded/
    on_batch(batch)       # batch.step % every_steps == 0 -> step_<step>.parquet (reason "periodic")
    on_save(checkpoint-k) # the latest step seen, if not dumped yet -> reason "checkpoint", tagged checkpoint=k

``step`` is the trainer's global step when the batch was generated (the update it feeds ends at ``step + 1``),
so the dump of ``checkpoint-k`` is usually step ``k - 1``. Several generation batches of one step
(``steps_per_generation < gradient_accumulation_steps``) go into one file; group ids stay unique per step.

Layout under ``rollouts.output_dir`` (default ``<output_dir>/rl_guards/rollouts``)::

    step_000120.parquet   # columns below; file metadata key "rl_guards" holds step, reason, checkpoint, tasks
    index.jsonl           # one line per file, sorted by step; rebuilt from the files, rewritten atomically
    superseded/resumed_at_000100/step_000110.parquet   # dumps a resume made obsolete, kept for reference

Resume: after resuming at global step ``k`` nothing is lost (every dump of steps ``< k`` stays) and nothing is
duplicated (the pre-crash dumps of steps ``>= k`` belong to a trajectory the run abandoned: they are moved
aside, and those steps are dumped again as the resumed run reaches them). The index is rebuilt from the files.

Columns (``SCHEMA_VERSION`` 1): ``schema_version, step, epoch, mode, row, group, task, prompt`` (rendered as the
model saw it, special tokens kept), ``completion`` (decoded with special tokens: EOS visible),
``completion_text`` (what the reward functions saw), ``completion_ids, prompt_tokens, completion_tokens,
reward`` (weighted total, null when every function skipped the row), ``advantage, truncated, think_kind,
think_anomalies`` (:func:`rl_guards.core.think_markup.scan` verdict, plus ``tag_in_nonthinking`` for a
non-thinking row with tags), ``thinking, columns`` (other dataset columns, JSON), and ``reward/<func>`` per
reward function (null where the function returned None). Eval batches are not dumped.

W&B: when a run is active, each new dump also logs a small ``wandb.Table`` under ``rl_guards/rollouts``
(``wandb_rows_per_task`` rows per task, distinct groups first; completion text cut to 1,000 characters for the
table only, with ``completion_chars`` and ``completion_cut_for_table`` columns saying so).

Metrics:

=====================================  ==========================================================
``rl_guards/rollouts/dumped_rows``     new rows written by one dump (a checkpoint re-tag adds none)
``rl_guards/rollouts/write_errors``    1 per failed write (disk full, unwritable folder)
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
from rl_guards.guards.think_tags import markup_from_config, tag_token_ids

logger = logging.getLogger("rl_guards")

SCHEMA_VERSION = 1
INDEX_FILE = "index.jsonl"
SUPERSEDED_DIR = "superseded"
METADATA_KEY = b"rl_guards"
REWARD_PREFIX = "reward/"
STEP_FILE_RE = re.compile(r"^step_(\d+)\.parquet$")
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


def index_entry(meta: dict[str, Any], file_name: str) -> dict[str, Any]:
    """One ``index.jsonl`` line from a dump's metadata."""
    return {
        "step": meta["step"],
        "rows": meta["rows"],
        "tasks": meta["tasks"],
        "reason": meta["reason"],
        "checkpoint": meta.get("checkpoint"),
        "file": file_name,
        "schema_version": meta.get("schema_version", SCHEMA_VERSION),
    }


def scan_dumps(folder: str | os.PathLike[str]) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Index entries of every readable dump in ``folder`` keyed by step, and the names of unreadable files."""
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
            meta = read_dump_metadata(path)
        except Exception:
            bad.append(path.name)
            continue
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

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: RolloutsConfig = config.rollouts
        self._begun = False
        self._entries: dict[int, dict[str, Any]] = {}  # step -> index entry of the files on disk
        self._step: int | None = None  # step of the buffered batches
        self._batches: list[RolloutBatch] = []  # only the latest step: bounded memory
        self._table: Any = None  # Arrow table of the buffered batches, once built
        self._table_batches = 0  # how many buffered batches _table holds
        # (step, batches, checkpoint, rows) of the last file this recorder wrote
        self._written: tuple[int, int, int | None, int] | None = None
        self._written_reason = ""  # reason of that file
        self._markup = MarkupSpec()

    def setup(self, ctx: RunContext) -> None:
        super().setup(ctx)
        self._markup = markup_spec(ctx, self.guards_config.think_tags)

    # ----- where --------------------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The dump folder."""
        if self.config.output_dir:
            return Path(self.config.output_dir)
        return default_rollouts_dir(self.ctx.output_dir)

    # ----- hooks --------------------------------------------------------------------------------------
    def on_train_begin(self, report: Reporter) -> None:
        if self.ctx.is_main_process:
            self._begin(int(report.step or 0), report)

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if not self.ctx.is_main_process or batch.mode != "train":
            return
        if not self._begun:
            self._begin(batch.step, report)
        self._buffer(batch)
        if batch.step % self.config.every_steps == 0:
            self._dump("periodic", None, report)

    def on_stop(self, batch: RolloutBatch, report: Reporter) -> None:
        """A guard stops the run on this batch: dump it, so the offending rollouts can be read."""
        if not self.ctx.is_main_process:
            return
        self._buffer(batch)
        self._dump("stopped", None, report)

    def _buffer(self, batch: RolloutBatch) -> None:
        """Keep ``batch`` with the other batches of its step (a new step starts an empty buffer)."""
        if batch.step != self._step:
            self._step, self._batches, self._table, self._table_batches = batch.step, [], None, 0
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
        self._dump("checkpoint", checkpoint, report)

    # ----- resume -------------------------------------------------------------------------------------
    def _begin(self, step: int, report: Reporter) -> None:
        """Move dumps of steps >= ``step`` aside, drop stale temp files, rebuild the index from the files."""
        self._begun = True
        folder = self.folder
        if not folder.is_dir():
            return
        try:
            for path in folder.glob(".*.tmp-*"):
                path.unlink()
            entries, bad = scan_dumps(folder)
            stale = sorted(s for s in entries if s >= step)
            if stale:
                target = folder / SUPERSEDED_DIR / f"resumed_at_{step:06d}"
                if target.exists():
                    target = target.with_name(f"{target.name}_{time.strftime('%Y%m%d-%H%M%S')}")
                target.mkdir(parents=True, exist_ok=True)
                for s in stale:
                    os.replace(folder / entries.pop(s)["file"], target / step_file_name(s))
                report.info(
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

        The dump of ``checkpoint-k`` holds the last generation batch before the save: the latest dumped step
        below ``k``, at most ``steps_per_generation`` steps back. An untagged dump there is tagged; when there is
        none, an info finding says the checkpoint has no dump (its rollouts were never written).
        """
        spg = max(1, int(getattr(self.ctx.args, "steps_per_generation", None) or 1))
        tagged = {e.get("checkpoint") for e in entries.values()}
        for checkpoint in _complete_checkpoints(self.ctx.output_dir):
            if checkpoint > step or checkpoint in tagged:
                continue
            below = [s for s in entries if s < checkpoint]
            latest = max(below) if below else None
            if latest is None or latest < checkpoint - spg or entries[latest].get("checkpoint") is not None:
                report.info(
                    "checkpoint_without_dump",
                    f"checkpoint-{checkpoint} has no rollout dump (the run stopped before it was written); the "
                    "dumps of the other steps are intact.",
                )
                continue
            path = self.folder / entries[latest]["file"]
            meta = retag_dump(path, checkpoint)
            entries[latest] = index_entry(meta, path.name)
            report.info("retagged_dump", f"tagged the dump of step {latest} with checkpoint-{checkpoint} on resume")

    # ----- dumping ------------------------------------------------------------------------------------
    def _dump(self, reason: str, checkpoint: int | None, report: Reporter) -> None:
        step, count = int(self._step if self._step is not None else 0), len(self._batches)
        if self._written is not None and self._written[:2] == (step, count):
            stop_noted = reason != "stopped" or self._written_reason == "stopped"
            if (checkpoint is None or self._written[2] == checkpoint) and stop_noted:
                return  # already on disk with these rows, this tag and, for a stop, the stop reason
        same_step = self._written is not None and self._written[0] == step
        retag = self._written is not None and self._written[:2] == (step, count)  # same rows, new checkpoint tag
        if checkpoint is None and same_step:
            checkpoint = self._written[2]  # more rows for a step already tagged by a checkpoint: keep the tag
        if self._written_reason == "stopped" and same_step:
            reason = "stopped"  # a stop stays visible when a later save re-tags the same rows
        if checkpoint is not None and reason != "stopped":
            reason = "checkpoint"
        table = self._build_table()
        tasks = sorted(set(table.column("task").to_pylist()))
        meta = {
            "schema_version": SCHEMA_VERSION,
            "step": step,
            "rows": table.num_rows,
            "tasks": tasks,
            "reason": reason,
            "checkpoint": checkpoint,
            "reward_names": list(self._batches[0].reward_names),
            "written_at": time.time(),
        }
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
        folder = self.folder
        path = folder / step_file_name(step)
        try:
            import pyarrow.parquet as pq

            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda tmp: pq.write_table(table, str(tmp), compression="zstd"))
        except (OSError, ValueError) as exc:  # pyarrow's I/O errors are OSError subclasses
            self._write_failed(
                f"could not write the rollouts of step {step} to {path}: {type(exc).__name__}: {exc}", report
            )
            return
        self._entries[step] = index_entry(meta, path.name)
        try:
            write_index(folder, self._entries)
        except OSError as exc:  # the dump itself is complete; the index is rebuilt from the files later
            self._write_failed(
                f"wrote {path} but could not update {folder / INDEX_FILE}: {type(exc).__name__}: {exc}", report
            )
        new_rows = table.num_rows - (self._written[3] if same_step else 0)
        self._written = (step, count, checkpoint, table.num_rows)
        self._written_reason = reason
        if not retag:  # a re-tag rewrites the same rows: count and show them once
            report.metric("dumped_rows", float(new_rows))
            self._log_wandb(table, step)

    def _write_failed(self, message: str, report: Reporter) -> None:
        report.metric("write_errors", 1.0)
        report.violation(
            "write_failed",
            f"{message}. Training goes on without this dump; free disk space or set rollouts.output_dir "
            "to a writable folder.",
        )

    def _build_table(self) -> Any:
        if self._table is not None and self._table_batches == len(self._batches):
            return self._table
        self._table = build_rollout_table(self._batches, self.ctx.decode, self._markup)
        self._table_batches = len(self._batches)
        return self._table

    # ----- W&B ----------------------------------------------------------------------------------------
    def _log_wandb(self, table: Any, step: int) -> None:
        per_task = self.config.wandb_rows_per_task
        if per_task <= 0:
            return
        try:
            from rl_guards.trl import wandb_io

            if wandb_io.active_run() is None:
                return
            columns, rows = wandb_rows(table, per_task)
            wb_table = wandb_io.table(columns, rows)
            if wb_table is not None:
                wandb_io.log({WANDB_KEY: wb_table})
        except Exception as exc:  # W&B must never break a run
            logger.warning("rl_guards: could not log the rollouts of step %s to W&B: %s", step, exc)


def build_rollout_table(batches: list[RolloutBatch], decode: Any = None, markup: MarkupSpec | None = None) -> Any:
    """The Arrow table of one step's batches (see the module docstring for the columns)."""
    import pyarrow as pa

    markup = markup or MarkupSpec()
    reward_names: list[str] = []
    for batch in batches:
        for name in batch.reward_names:
            if name not in reward_names:
                reward_names.append(name)
    cols: dict[str, list[Any]] = {
        name: []
        for name in (
            "step",
            "epoch",
            "mode",
            "row",
            "group",
            "task",
            "prompt",
            "completion",
            "completion_text",
            "completion_ids",
            "prompt_tokens",
            "completion_tokens",
            "reward",
            "advantage",
            "truncated",
            "think_kind",
            "think_anomalies",
            "thinking",
            "columns",
        )
    }
    per_func: dict[str, list[float | None]] = {name: [] for name in reward_names}
    group_offset = 0
    row_offset = 0
    for batch in batches:
        dec = decode or batch.decode
        prompt_cache: dict[tuple[int, ...], str] = {}
        opened = getattr(batch, "prompt_opened", None) or []
        task_names = batch.raw_tasks or batch.tasks  # the dataset's own names, not the capped metric labels
        extra_names = sorted(batch.columns)
        for i in range(len(batch)):
            pids = batch.prompt_ids[i] if i < len(batch.prompt_ids) else []
            key = tuple(pids)
            prompt = prompt_cache.get(key)
            if prompt is None:
                if dec is not None and pids:
                    prompt = dec(list(pids))
                else:
                    prompt = _prompt_fallback(batch.prompts[i] if i < len(batch.prompts) else "")
                prompt_cache[key] = prompt
            cids = batch.completion_ids[i]
            completion = dec(list(cids)) if dec is not None else batch.completions[i]
            kind, anomalies = think_verdict(
                batch.completions[i],
                completion,
                cids,
                batch.thinking[i],
                bool(opened[i]) if i < len(opened) else False,
                markup,
            )
            cols["step"].append(int(batch.step))
            cols["epoch"].append(float(batch.epoch))
            cols["mode"].append(batch.mode)
            cols["row"].append(row_offset + i)
            cols["group"].append(group_offset + i // batch.num_generations)
            cols["task"].append(str(task_names[i]))
            cols["prompt"].append(prompt)
            cols["completion"].append(completion)
            cols["completion_text"].append(batch.completions[i])
            cols["completion_ids"].append(cids)
            cols["prompt_tokens"].append(len(pids))
            cols["completion_tokens"].append(len(cids))
            cols["reward"].append(batch.total_reward(i))
            cols["advantage"].append(_finite(batch.advantages[i]))
            cols["truncated"].append(bool(batch.truncated[i]))
            cols["think_kind"].append(kind)
            cols["think_anomalies"].append(anomalies)
            cols["thinking"].append(batch.thinking[i])
            cols["columns"].append(
                json.dumps({k: batch.columns[k][i] for k in extra_names}, default=str) if extra_names else "{}"
            )
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
        ("prompt", pa.string(), cols["prompt"]),
        ("completion", pa.string(), cols["completion"]),
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
    return pa.Table.from_arrays([pa.array(values, type=tp) for _, tp, values in fields], schema=schema)


def wandb_rows(table: Any, per_task: int) -> tuple[list[str], list[list[Any]]]:
    """A small sample for a W&B table: ``per_task`` rows per task, from distinct groups first; texts cut."""
    data = table.select(
        ["step", "task", "group", "reward", "advantage", "truncated", "think_kind", "prompt", "completion"]
    ).to_pylist()
    by_task: dict[str, list[int]] = {}
    for i, row in enumerate(data):
        by_task.setdefault(row["task"], []).append(i)
    columns = [
        "step",
        "task",
        "group",
        "reward",
        "advantage",
        "truncated",
        "think_kind",
        "prompt_tail",
        "completion",
        "completion_chars",
        "completion_cut_for_table",
    ]
    rows: list[list[Any]] = []
    for task in sorted(by_task):
        seen_groups: set[int] = set()
        firsts, rest = [], []
        for i in by_task[task]:
            (rest if data[i]["group"] in seen_groups else firsts).append(i)
            seen_groups.add(data[i]["group"])
        for i in (firsts + rest)[:per_task]:
            row = data[i]
            text = row["completion"] or ""
            prompt = row["prompt"] or ""
            rows.append(
                [
                    row["step"],
                    row["task"],
                    row["group"],
                    row["reward"],
                    row["advantage"],
                    row["truncated"],
                    row["think_kind"],
                    prompt[-WANDB_PROMPT_CHARS:],
                    text[:WANDB_TEXT_CHARS],
                    len(text),
                    len(text) > WANDB_TEXT_CHARS,
                ]
            )
    return columns, rows


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _prompt_fallback(prompt: Any) -> str:
    """Prompt text when no decoder is available (pure unit tests): the raw prompt as given to the trainer."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False, default=str)
