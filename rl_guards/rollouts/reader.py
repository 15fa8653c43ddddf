"""Read rollout dumps back: list the dumped steps, load one, filter rows.

::

    store = RolloutStore("outputs/run1")              # a trainer output_dir, or the rollouts folder itself
    store.steps()                                     # [1, 10, 20, ...]: TRL's steps (older dumps migrated)
    rows = store.rows(20, task="arith", min_reward=0.5, anomaly="unclosed", truncated=False)
    table = store.table(20)                           # pyarrow.Table with every column
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from rl_guards.core.think_markup import MALFORMED, TAG_IN_NONTHINKING
from rl_guards.rollouts.store import (
    INDEX_FILE,
    REWARD_PREFIX,
    SCHEMA_VERSION,
    STEP_SCHEMA,
    TOKENIZER_FILE,
    check_dump_schema,
    default_rollouts_dir,
    read_dump_metadata,
    scan_dumps,
    step_file_name,
    trl_step,
)
from rl_guards.rollouts.untrusted_json import UnreadableJSON, parse_json


class UnreadableDumpError(ValueError):
    """A dump file exists but cannot be read (truncated, corrupt, not Parquet); the message names the file."""


# Texts decoded at read time from the ids a schema-2 dump keeps (text column -> ids column).
DECODED_COLUMNS = {"prompt": "prompt_ids", "completion": "completion_ids"}


def find_rollouts_dir(run_dir: str | os.PathLike[str]) -> Path:
    """The folder holding the dumps: ``run_dir`` itself, ``<run_dir>/rl_guards/rollouts`` or ``<run_dir>/rollouts``."""
    run_dir = Path(run_dir)
    for candidate in (run_dir, default_rollouts_dir(run_dir), run_dir / "rollouts"):
        if (candidate / INDEX_FILE).is_file() or any(candidate.glob("step_*.parquet")):
            return candidate
    raise FileNotFoundError(
        f"no rollout dumps under {run_dir}: looked for {INDEX_FILE} or step_*.parquet in {run_dir}, "
        f"{default_rollouts_dir(run_dir)} and {run_dir / 'rollouts'}. Dumps are written by the rollouts guard "
        "(rollouts.enabled, rollouts.every_steps)."
    )


class RolloutStore:
    """The rollout dumps of one run."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(os.path.expandvars(os.path.expanduser(str(run_dir))))
        self.folder = find_rollouts_dir(self.run_dir)
        self._unreadable: list[str] | None = None
        self._decoder_problem: str | None = None  # why the run's tokenizer cannot decode (see decoder_note)
        self.undecoded = False  # a load() had ids to decode and no tokenizer: prompts were shown empty

    def index(self) -> list[dict[str, Any]]:
        """One entry per dump (step, rows, tasks, reason, checkpoint, file), sorted by step.

        Read from the files themselves, so a stale or missing ``index.jsonl`` cannot mislead. Files that cannot be
        read are left out and listed by :meth:`unreadable`.
        """
        entries, self._unreadable = scan_dumps(self.folder)
        return [entries[s] for s in sorted(entries)]

    def unreadable(self) -> list[str]:
        """The dump files the last :meth:`index` could not read, each with the reason."""
        if self._unreadable is None:
            self.index()
        return list(self._unreadable or [])

    def steps(self) -> list[int]:
        """Dumped steps, ascending."""
        return [e["step"] for e in self.index()]

    def checkpoint_steps(self) -> dict[int, int]:
        """checkpoint number -> dumped step of the rollouts that checkpoint saw."""
        return {e["checkpoint"]: e["step"] for e in self.index() if e.get("checkpoint") is not None}

    def path(self, step: int) -> Path:
        """The file of ``step`` (TRL's numbering; a dump of schema 1 or 2 is named by its generation step)."""
        path = self.folder / step_file_name(step)
        if path.is_file():
            try:
                meta = read_dump_metadata(path)
                if trl_step(meta["step"], meta.get("schema_version")) == step:
                    return path
            except Exception:  # unreadable metadata: the table read names the file and the reason
                return path
        index = self.index()
        for entry in index:
            if entry["step"] == step:
                return self.folder / entry["file"]
        steps = [e["step"] for e in index]
        raise FileNotFoundError(f"no dump for step {step} in {self.folder}; dumped steps: {steps}")

    @cached_property
    def decoder(self) -> Callable[[list[int]], str] | None:
        """Decodes ids with special tokens kept, from the run's ``tokenizer.json`` (None when it is missing or
        unreadable: :meth:`decoder_note` says why and what to do)."""
        path = self.folder / TOKENIZER_FILE
        if not path.is_file():
            self._decoder_problem = f"{path} is missing (a full disk or a kill during its first write kept it off disk)"
            return None
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # an unreadable tokenizer file: texts fall back to what the reward functions saw
            self._decoder_problem = f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
            return None
        return lambda ids: tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def decoder_note(self) -> str | None:
        """Why prompts were shown empty, and how to get them back; None while every load decoded its ids."""
        if not self.undecoded or self._decoder_problem is None:
            return None
        source = next(iter(self._tokenizer_copies()), None)
        copy = f"cp {source} {self.folder / TOKENIZER_FILE}" if source is not None else (
            f"save the run's tokenizer there: AutoTokenizer.from_pretrained(MODEL).backend_tokenizer.save("
            f"'{self.folder / TOKENIZER_FILE}')"
        )  # fmt: skip
        return (
            f"{self._decoder_problem}: prompts are shown empty and completions as the reward functions saw them "
            f"(special tokens dropped). Fix: {copy}"
            + (" (the trainer saves the run's tokenizer with its checkpoints)" if source is not None else "")
        )

    def _tokenizer_copies(self) -> list[Path]:
        """The run's own ``tokenizer.json`` files the trainer saved (output folder, checkpoints), newest first."""
        runs = {self.run_dir, self.folder.parent.parent}  # given the output folder, or its rollouts folder
        found = [p for run in runs for p in (run / TOKENIZER_FILE, *run.glob(f"checkpoint-*/{TOKENIZER_FILE}"))]
        files = []
        for path in found:
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:  # gone meanwhile, or not readable: not a copy to suggest
                continue
        return [p for _, p in sorted(files, reverse=True) if p.is_file()]

    def table(self, step: int, columns: list[str] | None = None) -> Any:
        """The dump of ``step`` as a ``pyarrow.Table`` (only ``columns`` when given).

        Dumps of schema 2 keep ids, not decoded text: asking for ``prompt`` / ``completion`` reads their ids (and
        ``completion_text``); :meth:`load` decodes them.
        """
        import pyarrow.parquet as pq

        path = self.path(step)
        wanted = None if columns is None else list(dict.fromkeys(["schema_version", *columns]))
        if wanted is not None:
            present = set(pq.read_schema(str(path)).names)
            for text, source in DECODED_COLUMNS.items():
                if text in wanted and text not in present:
                    wanted.remove(text)
                    wanted += [c for c in (source, "completion_text") if c in present and c not in wanted]
        try:
            table = pq.read_table(str(path), columns=wanted)
        except Exception as exc:  # a torn or corrupt file: one clear error naming it, not a thrift traceback
            raise UnreadableDumpError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}") from exc
        try:
            check_dump_schema(table.schema)
        except ValueError as exc:  # a crafted or foreign file: the same verdict as index() gives it
            raise UnreadableDumpError(f"cannot read {path}: {exc}") from exc
        try:
            version = int(table.column("schema_version")[0].as_py()) if table.num_rows else SCHEMA_VERSION
        except Exception as exc:
            raise UnreadableDumpError(f"{path} has no readable schema_version: {exc}") from exc
        if version > SCHEMA_VERSION:
            raise UnreadableDumpError(
                f"{path} has schema version {version}; this rl_guards reads up to {SCHEMA_VERSION}. Upgrade rl_guards."
            )
        if version < STEP_SCHEMA and "step" in table.column_names:  # the generation step: TRL's is one more
            import pyarrow.compute as pc

            steps = table.column("step")
            table = table.set_column(table.column_names.index("step"), "step", pc.add(steps, 1).cast(steps.type))
        return table

    def load(self, step: int, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """The dump of ``step`` as one dict per rollout (``rewards`` gathers the ``reward/<func>`` columns).

        ``prompt`` and ``completion`` are the texts as the model saw and wrote them, special tokens kept: stored
        in schema-1 dumps, decoded here from the ids for schema 2 (without the run's tokenizer, the completion is
        the reward functions' text and the prompt is empty).
        """
        table = self.table(step, columns)
        try:
            rows = [_with_rewards(_clean_row(row)) for row in table.to_pylist()]
        except Exception as exc:  # a corrupt data page may only show when the values are read
            raise UnreadableDumpError(f"cannot read {self.path(step)}: {type(exc).__name__}: {exc}") from exc
        want = set(DECODED_COLUMNS) if columns is None else set(columns) & set(DECODED_COLUMNS)
        decode = self.decoder
        prompts: dict[tuple[int, ...], str] = {}
        for row in rows:
            if decode is None and any(c in want and c not in row for c in DECODED_COLUMNS):
                self.undecoded = True  # said by decoder_note(): an empty prompt is no answer
            if "completion" in want and "completion" not in row:
                ids = row.get("completion_ids")
                text = _decode(decode, ids) if decode and ids else None
                row["completion"] = text if text is not None else row.get("completion_text") or ""
            if "prompt" in want and "prompt" not in row:
                key = tuple(row.get("prompt_ids") or ())
                if key not in prompts:
                    prompts[key] = (_decode(decode, list(key)) or "") if decode and key else ""
                row["prompt"] = prompts[key]
        return rows

    def rows(
        self,
        step: int,
        *,
        task: str | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        anomaly: str | None = None,
        truncated: bool | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of one step that pass every given filter (see :func:`filter_rows`)."""
        return filter_rows(
            self.load(step),
            task=task,
            min_reward=min_reward,
            max_reward=max_reward,
            anomaly=anomaly,
            truncated=truncated,
            limit=limit,
        )


def filter_rows(
    rows: list[dict[str, Any]],
    *,
    task: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    anomaly: str | None = None,
    truncated: bool | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Keep rows of ``task``, with total reward in ``[min_reward, max_reward]`` (unscored rows fail a reward
    bound), whose think verdict lists ``anomaly`` (``"any"``: any malformed markup, see :func:`has_anomaly`),
    with this ``truncated`` flag; at most ``limit`` rows."""
    out = []
    for row in rows:
        if task is not None and row.get("task") != task:
            continue
        reward = row.get("reward")
        scored = reward is not None and not math.isnan(reward)
        if min_reward is not None and not (scored and reward >= min_reward):
            continue
        if max_reward is not None and not (scored and reward <= max_reward):
            continue
        if anomaly is not None:
            found = row.get("think_anomalies") or []
            if not (has_anomaly(row) if anomaly == "any" else anomaly in found):
                continue
        if truncated is not None and bool(row.get("truncated")) != truncated:
            continue
        out.append(row)
        if limit is not None and len(out) >= limit:
            break
    return out


def has_anomaly(row: dict[str, Any]) -> bool:
    """The row's think markup is broken, or a non-thinking row has tags (informational codes do not count)."""
    return any(code in MALFORMED or code == TAG_IN_NONTHINKING for code in row.get("think_anomalies") or [])


MAX_TOKEN_ID = 2**31 - 1  # ids are int32 in the dump; beyond, a crafted value


def _decode(decode: Callable[[list[int]], str], ids: Any) -> str | None:
    """``ids`` decoded, skipping values that are no token id (null, negative, huge); None when nothing decodes."""
    if not isinstance(ids, list | tuple):
        return None
    valid = [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID]
    try:
        return decode(valid)
    except Exception:  # a tokenizer that refuses an id it does not know: show the reward functions' text instead
        return None


def _clean_row(row: dict[str, Any]) -> dict[str, Any]:
    """Values of a known column that a reader cannot use become what an honest dump has there: a task that is no
    string is shown as one (null as ""), a non-finite reward or advantage is null (the recorder writes them so),
    anomalies that are no list are none."""
    task = row.get("task")
    if "task" in row and not isinstance(task, str):
        row["task"] = "" if task is None else str(task)
    for key, value in row.items():
        if (key in ("reward", "advantage", "epoch") or key.startswith(REWARD_PREFIX)) and value is not None:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            row[key] = float(value) if ok else None
    if "think_anomalies" in row:
        found = row["think_anomalies"]
        row["think_anomalies"] = [a for a in found if isinstance(a, str)] if isinstance(found, list) else []
    return row


def _with_rewards(row: dict[str, Any]) -> dict[str, Any]:
    row["rewards"] = {k[len(REWARD_PREFIX) :]: v for k, v in row.items() if k.startswith(REWARD_PREFIX)}
    raw = row.get("columns")
    if isinstance(raw, str):
        try:
            row["columns"] = parse_json(raw)
        except UnreadableJSON:  # kept as the text it is
            pass
    return row
