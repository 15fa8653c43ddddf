"""Issue 41: every reader takes every file of a run folder as untrusted input, and none crashes.

The crafted files: each JSON document a run holds (a drift record, each line of ``findings.jsonl``,
``trainer_state.json`` at the top and in a checkpoint) with every value at every level replaced in turn (null, numbers
out of range, inf / NaN written as JSON's ``Infinity``, strings with a lone surrogate and a terminal escape, the wrong
container, nesting too deep to parse and nesting deep enough to reach whatever reads it), every key and string given a
lone surrogate, and the whole file 0 bytes, cut in half, not UTF-8, nested too deeply, whitespace, or another JSON type
at the top; ``index.jsonl`` and ``tokenizer.json`` as whole files (no reader parses their fields); and a rollout dump
with the same values at every level of its metadata, crafted ``columns`` JSON, and the whole file damaged. Each goes
through every reader of that file: the API
(``RolloutStore``, ``load_records``, ``load_findings``, ``find_trainer_state`` / ``log_history_curves``,
``collect`` / ``write_report``) and the commands (``rl-guards rollouts list | show | compare``, ``rl-guards drift``,
``rl-guards report``), whose output is written through strict UTF-8 as a terminal would take it.

A crash: an exception out of a reader (other than the named ones: ``UnreadableDumpError``, ``FileNotFoundError`` for
what is not there), an exit status beyond 2, a traceback or text UTF-8 cannot encode on the output, a temp file left
behind, or a good file of the run no longer read. The test prints ``crafted: N reader calls, 0 crashes``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _rollouts_data import Harness, make_batch

from rl_guards.cli.main import main as cli
from rl_guards.core.metric_keys import task_metric_key
from rl_guards.rollouts.drift_records import find_drift_dir, load_records
from rl_guards.rollouts.findings import find_findings_file, load_findings
from rl_guards.rollouts.reader import RolloutStore, UnreadableDumpError
from rl_guards.rollouts.report import find_trainer_state, log_history_curves
from rl_guards.rollouts.store import INDEX_FILE, METADATA_KEY, TOKENIZER_FILE, step_file_name

DEEP_MARK = "__deep__"  # written as nesting too deep for json.loads (RecursionError)
REACHABLE_MARK = "__reachable__"  # written as nesting json.loads takes: whatever reads it next must cope
DEEP = "[" * 100_000 + "]" * 100_000
REACHABLE = "[" * 400 + "1" + "]" * 400
# New to issue 41 (the dump suite of test_reliability_crafted already gives each dump field the older wrong types).
NEW_VALUES: dict[str, Any] = {
    "beyond_float": 10**400,
    "surrogate": "a\ud800b",
    "escape": "\x1b[2J\u202e",
    "-inf": -math.inf,
    "true": True,
    "deep": DEEP_MARK,
    "reachable": REACHABLE_MARK,
}
VALUES: dict[str, Any] = {
    "null": None,
    "negative": -1,
    "string": "x",
    "inf": math.inf,
    "nan": math.nan,
    "list": [1],
    "dict": {"a": 1},
    **NEW_VALUES,
}
WHOLE_FILE: dict[str, Callable[[bytes], bytes]] = {
    "0 bytes": lambda good: b"",
    "cut": lambda good: good[: len(good) // 2],
    "not utf-8": lambda good: b"\xff\xfe\xfa" + good[3:],
    "deep": lambda good: DEEP.encode(),
    "a list": lambda good: b"[1, 2]",
    "a string": lambda good: b'"x"',
    "null": lambda good: b"null",
    "whitespace": lambda good: b"  \n ",
}


# ----- the good run ------------------------------------------------------------------------------------------
def _good_state(step: int) -> dict[str, Any]:
    history = [
        {"step": s, "loss": 0.1, "reward": 0.5 * s, task_metric_key("arith", "reward_mean"): 0.25 * s,
         task_metric_key("echo", "truncated_rate"): 0.1}
        for s in range(1, step + 1)
    ]  # fmt: skip
    return {"global_step": step, "log_history": history, "stateful_callbacks": {"GuardRunState": {"x": 1}}}


def _drift_record(step: int) -> dict[str, Any]:
    stats = {"completions": 2, "length": 12.0 + step, "terminated": 1.0, "rewards": {"arith_correct": 0.5},
             "reward_total": 0.5, "nonfinite_rewards": 0}  # fmt: skip
    return {
        "step": step,
        "baseline": step == 0,
        "source": "train",
        "stats": {"arith": stats, "echo": {"completions": 2, "length": 3.0}},
        "probes": [{"index": 0, "task": "arith", "prompt": "What is 3+4?", "completion": f"<think>{step}</think>7"}],
        "alarms": [{"task": "arith", "drifts": ["length 12 -> 14"]}] if step else [],
        "train_reward": {"arith": [0.25, 0.5]},
    }


FINDINGS = [
    {"type": "begin", "step": 0, "time": 1.0},
    {"type": "finding", "guard": "think_tags", "kind": "anomalous", "severity": "warning", "first_step": 1,
     "count": 1, "step": 1, "message": "stray </think>", "time": 2.0},
    {"type": "finding", "guard": "think_tags", "kind": "anomalous", "severity": "warning", "first_step": 1,
     "count": 3, "step": 2, "message": "", "time": 3.0},
    {"type": "stop", "guard": "masking", "kind": "prompt_unmasked", "step": 2, "message": "loss on the prompt",
     "time": 4.0},
]  # fmt: skip


def _make_run(root: Path, *, dumps: bool) -> Path:
    run = root / ("with_dumps" if dumps else "json_only")
    folder = run / "rl_guards" / "rollouts"
    if dumps:
        h = Harness(str(run), every_steps=1)
        h.begin(0)
        h.batch(make_batch(0))
        h.batch(make_batch(1))
    (folder / "drift").mkdir(parents=True)
    for step in (0, 2):
        (folder / "drift" / f"step_{step:06d}.json").write_text(json.dumps(_drift_record(step)))
    (folder / "findings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in FINDINGS))
    (run / "trainer_state.json").write_text(json.dumps(_good_state(2)))
    (run / "checkpoint-1").mkdir()
    (run / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(_good_state(1)))
    return run


# ----- crafting ----------------------------------------------------------------------------------------------
def _paths(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document: the root, each key's value, each list element, at every level."""
    yield at
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*at, i))


def _replaced(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    copy = json.loads(json.dumps(doc))
    parent = copy
    for part in at[:-1]:
        parent = parent[part]
    parent[at[-1]] = value
    return copy


def _with_surrogates(doc: Any, *, keys: bool, values: bool) -> Any:
    if isinstance(doc, dict):
        return {(f"{k}\udc80" if keys else k): _with_surrogates(v, keys=keys, values=values) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_with_surrogates(v, keys=keys, values=values) for v in doc]
    return f"\ud800{doc}" if values and isinstance(doc, str) else doc


def _text(doc: Any) -> str:
    """JSON as a writer that allows anything writes it: Infinity / NaN, surrogates escaped, the nesting marks."""
    text = json.dumps(doc)
    return text.replace(json.dumps(DEEP_MARK), DEEP).replace(json.dumps(REACHABLE_MARK), REACHABLE)


def _document_variants(good: Any, values: dict[str, Any] = VALUES) -> Iterator[tuple[str, bytes]]:
    for at in _paths(good):
        for name, value in values.items():
            yield f"{'.'.join(map(str, at)) or '(root)'}={name}", _text(_replaced(good, at, value)).encode()
    yield "surrogate keys", _text(_with_surrogates(good, keys=True, values=False)).encode()
    yield "surrogate strings", _text(_with_surrogates(good, keys=True, values=True)).encode()


def _whole_file_variants(good: bytes) -> Iterator[tuple[str, bytes]]:
    for name, make in WHOLE_FILE.items():
        yield name, make(good)


def _file_variants(good: bytes, values: dict[str, Any] = VALUES) -> Iterator[tuple[str, bytes]]:
    yield from _whole_file_variants(good)
    yield from _document_variants(json.loads(good), values)


def _lines_variants(lines: list[dict[str, Any]]) -> Iterator[tuple[str, bytes]]:
    """A JSON-lines file: the whole file crafted, and each line's document crafted in turn."""
    good = "".join(json.dumps(r) + "\n" for r in lines).encode()
    for name, make in WHOLE_FILE.items():
        yield name, make(good)
    for i, record in enumerate(lines):
        for name, text in _document_variants(record):
            crafted = [json.dumps(r).encode() for r in lines]
            crafted[i] = text
            yield f"line {i}: {name}", b"\n".join(crafted) + b"\n"
    yield "a line of nesting too deep", good + DEEP.encode() + b"\n"


# ----- running the readers -----------------------------------------------------------------------------------
class Tally:
    """Reader calls made, and what went wrong (each a crash)."""

    def __init__(self, tmp: Path) -> None:
        self.calls = 0
        self.crashes: list[str] = []
        self.tmp = tmp

    def api(self, what: str, call: Callable[[], Any], named: tuple[type[BaseException], ...] = ()) -> Any:
        self.calls += 1
        try:
            return call()
        except named:
            return None
        except Exception as exc:
            self.crashes.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
            return None

    def command(self, what: str, argv: list[str]) -> int | None:
        """Run a command with stdout / stderr encoded as strict UTF-8 (a terminal): text it cannot encode crashes."""
        self.calls += 1
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli(argv)
        except Exception as exc:
            self.crashes.append(f"{what} {argv[:2]}: {type(exc).__name__}: {str(exc)[:200]}")
            return None
        stderr = err.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
        if code not in (0, 1, 2) or "Traceback" in stderr:
            self.crashes.append(f"{what} {argv[:2]}: exit {code}: {stderr[-300:]}")
        left = [p.name for p in self.tmp.iterdir() if ".tmp" in p.name]
        if left:
            self.crashes.append(f"{what} {argv[:2]}: left {left}")
        return code

    def expect(self, what: str, ok: bool) -> None:
        if not ok:
            self.crashes.append(f"{what}: a good file was no longer read")


def _report(tally: Tally, what: str, run: Path) -> None:
    tally.command(what, ["report", str(run), "-o", str(tally.tmp / "r.html")])  # collect() and write_report()


def _read_drift(tally: Tally, what: str, run: Path) -> None:
    found = tally.api(f"{what} load_records", lambda: load_records(find_drift_dir(run)), (FileNotFoundError,))
    if found is not None:
        tally.expect(f"{what} load_records", [r["step"] for r in found[0]][:1] == [0])
    tally.command(what, ["drift", str(run)])
    tally.command(what, ["drift", str(run), "--task", "arith"])
    _report(tally, what, run)


def _read_findings(tally: Tally, what: str, run: Path) -> None:
    tally.api(f"{what} load_findings", lambda: load_findings(find_findings_file(run)))
    _report(tally, what, run)


def _read_state(tally: Tally, what: str, run: Path, *, top: bool) -> None:
    found = tally.api(f"{what} find_trainer_state", lambda: find_trainer_state(run, []))
    if found is not None:
        tally.api(f"{what} log_history_curves", lambda: log_history_curves(found, {}), (ValueError,))
    if top:  # the checkpoint's state is good: it is always found
        tally.expect(f"{what} find_trainer_state", found is not None)
    _report(tally, what, run)


def _read_dumps(tally: Tally, what: str, run: Path) -> None:
    store = tally.api(f"{what} RolloutStore", lambda: RolloutStore(run), (FileNotFoundError,))
    if store is not None:
        steps = tally.api(f"{what} steps", store.steps) or []
        tally.api(f"{what} unreadable", store.unreadable)
        tally.expect(f"{what} steps", 1 in steps)
        for step in steps:
            named = (UnreadableDumpError, FileNotFoundError)
            tally.api(f"{what} load({step})", lambda s=step: store.load(s), named)
            tally.api(f"{what} rows({step})", lambda s=step: store.rows(s, task="arith", min_reward=0.0,
                                                                         anomaly="any", limit=3), named)  # fmt: skip
            tally.api(f"{what} decoder_note", lambda: store.decoder_note())
    tally.command(what, ["rollouts", str(run), "list"])
    tally.command(what, ["rollouts", str(run), "show", "--step", "0", "--anomaly", "any"])
    tally.command(what, ["rollouts", str(run), "compare", "--steps", "0", "1"])
    _report(tally, what, run)


@contextlib.contextmanager
def _crafted(path: Path, raw: bytes) -> Iterator[None]:
    """``path`` holds ``raw`` while the readers run, then its good content again."""
    good = path.read_bytes()
    path.write_bytes(raw)
    try:
        yield
    finally:
        path.write_bytes(good)


def _craft_dump_metadata(path: Path, meta_text: str) -> None:
    table = pq.read_table(str(path))
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: meta_text.encode()}), str(path))


def _craft_dump_columns(path: Path, value: str) -> None:
    table = pq.read_table(str(path))
    at = table.column_names.index("columns")
    pq.write_table(table.set_column(at, "columns", pa.array([value] * table.num_rows, pa.string())), str(path))


def _dump_variants(path: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """Crafted dumps: its metadata JSON at every level, its ``columns`` JSON, and the whole file."""
    meta = json.loads(pq.read_table(str(path)).schema.metadata[METADATA_KEY])
    for name, raw in _file_variants(json.dumps(meta).encode(), NEW_VALUES):
        yield f"metadata {name}", lambda raw=raw: _craft_dump_metadata(path, raw.decode("utf-8", "replace"))
    columns = ['{"answer": "a\\ud800", "n": Infinity}', "[" * 400 + "]" * 400, DEEP, '{"a": 1e999}', "not json"]
    for i, value in enumerate(columns):
        yield f"columns {i}", lambda value=value: _craft_dump_columns(path, value)
    for name, make in WHOLE_FILE.items():
        yield f"file {name}", lambda make=make: path.write_bytes(make(path.read_bytes()))


def test_crafted_files_break_no_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally(tmp_path / "out")
    tally.tmp.mkdir()
    light = _make_run(tmp_path, dumps=False)  # the JSON files' readers: no dumps to read each time
    full = _make_run(tmp_path, dumps=True)
    folder = light / "rl_guards" / "rollouts"
    groups: list[tuple[str, Path, Iterator[tuple[str, bytes]], Callable[[Tally, str, Path], None]]] = [
        ("drift record", folder / "drift" / "step_000002.json",
         _file_variants((folder / "drift" / "step_000002.json").read_bytes()), _read_drift),
        ("findings.jsonl", folder / "findings.jsonl", _lines_variants(FINDINGS), _read_findings),
        ("trainer_state.json", light / "trainer_state.json",
         _file_variants((light / "trainer_state.json").read_bytes()), lambda t, w, r: _read_state(t, w, r, top=True)),
        ("checkpoint trainer_state.json", light / "checkpoint-1" / "trainer_state.json",
         _file_variants((light / "checkpoint-1" / "trainer_state.json").read_bytes()),
         lambda t, w, r: _read_state(t, w, r, top=False)),
    ]  # fmt: skip
    dumps = full / "rl_guards" / "rollouts"
    groups += [  # no reader parses index.jsonl (the dumps themselves are read) or the tokenizer's fields
        ("index.jsonl", dumps / INDEX_FILE, _whole_file_variants((dumps / INDEX_FILE).read_bytes()), _read_dumps),
        ("tokenizer.json", dumps / TOKENIZER_FILE, _whole_file_variants((dumps / TOKENIZER_FILE).read_bytes()),
         _read_dumps),
    ]  # fmt: skip
    files = 0
    for label, path, variants, read in groups:
        run = light if light in path.parents else full
        for name, raw in variants:
            files += 1
            with _crafted(path, raw):
                read(tally, f"{label} [{name}]", run)
    dump = dumps / step_file_name(0)
    good = dump.read_bytes()
    for name, craft in _dump_variants(dump):
        files += 1
        craft()
        try:
            _read_dumps(tally, f"dump {step_file_name(0)} [{name}]", full)
        finally:
            dump.write_bytes(good)
    with capsys.disabled():
        print(f"\ncrafted: {files} files, {tally.calls} reader calls, {len(tally.crashes)} crashes")
    assert not tally.crashes, "\n".join(tally.crashes[:40])
    assert files > 1400 and tally.calls > 5000  # the suite cannot shrink unnoticed (1472 files, 5506 calls)


def test_the_crafted_values_are_what_they_say() -> None:
    """The nesting marks: one is beyond json.loads, the other within it; Infinity and surrogates as written."""
    with pytest.raises(RecursionError):
        json.loads(DEEP)
    assert json.loads(REACHABLE)
    text = _text({"a": math.inf, "b": "x\ud800", "c": DEEP_MARK})
    assert '"a": Infinity' in text and '"x\\ud800"' in text and text.endswith(DEEP + "}")
