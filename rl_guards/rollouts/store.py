"""The rollout dump format: one Parquet file per dumped step, the index, the tokenizer file, and their checks.

Written by :class:`rl_guards.guards.recorder.RolloutRecorder`, read by :mod:`rl_guards.rollouts.reader`.

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
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.think_codes import KINDS, codes_of
from rl_guards.core.think_markup import THINK, ThinkMarkup, anomalies_for_mode, scan
from rl_guards.rollouts.untrusted_json import parse_json

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
    return parse_json(raw)


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


def complete_checkpoints(output_dir: str | os.PathLike[str]) -> list[int]:
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
            pids = list(batch.prompt_ids[i]) if i < len(batch.prompt_ids) else []
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
