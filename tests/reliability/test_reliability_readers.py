"""Issue 11: bad data never breaks a reader or a dump. Damaged, truncated, empty and crafted dump files are named
once and skipped by every reader entry point (no traceback); text that would drive a terminal is shown, not
obeyed; a lone surrogate costs one repaired row, not the dump; inf in the training log never breaks the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _rollouts_data import Harness, make_batch

from rl_guards.cli.main import main as cli
from rl_guards.rollouts.reader import RolloutStore, UnreadableDumpError
from rl_guards.rollouts.report import collect, write_report
from rl_guards.rollouts.store import METADATA_KEY, step_file_name


def _good_run(tmp_path: Path, steps: tuple[int, ...] = (0, 1)) -> Path:
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    for step in steps:
        h.batch(make_batch(step))
    return tmp_path / "rl_guards" / "rollouts"


def _corrupt_data_page(path: Path) -> None:
    """Scramble the data pages but keep the footer: the metadata reads, the values do not."""
    raw = bytearray(path.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    for i in range(8, len(raw) - footer - 8, 3):
        raw[i] = (raw[i] * 7 + 13) % 256
    path.write_bytes(bytes(raw))


def _crafted(path: Path, meta: dict[str, Any]) -> None:
    table = pa.table({"schema_version": pa.array([2], pa.int16()), "step": pa.array([0], pa.int64())})
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), str(path))


DAMAGE: dict[str, Any] = {
    "truncated": lambda folder, good: (folder / step_file_name(7)).write_bytes(good.read_bytes()[:100]),
    "empty": lambda folder, good: (folder / step_file_name(7)).write_bytes(b""),
    "not_parquet": lambda folder, good: (folder / step_file_name(7)).write_text("hello"),
    "step_not_int": lambda folder, good: _crafted(
        folder / step_file_name(7), {"step": "abc", "rows": 1, "tasks": ["a"], "reason": "periodic"}
    ),
    "null_tasks": lambda folder, good: _crafted(
        folder / step_file_name(7), {"step": 7, "rows": 1, "tasks": None, "reason": "periodic"}
    ),
    "meta_not_a_mapping": lambda folder, good: _crafted(folder / step_file_name(7), [1, 2, 3]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_file_is_named_once_and_every_reader_goes_on(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _good_run(tmp_path)
    DAMAGE[damage](folder, folder / step_file_name(0))
    store = RolloutStore(tmp_path)
    assert store.steps() == [0, 1]  # 0.1: the bad file vanished without a word (or broke the reader)
    [item] = store.unreadable()
    assert step_file_name(7) in item
    assert len(store.rows(0)) == 6 and store.table(1).num_rows == 6

    assert cli(["rollouts", str(tmp_path), "list"]) == 0
    out = capsys.readouterr()
    assert out.err.count(step_file_name(7)) == 1 and "Traceback" not in out.err
    assert cli(["rollouts", str(tmp_path), "show", "--step", "0"]) == 0
    assert cli(["rollouts", str(tmp_path), "compare", "--steps", "0", "1"]) == 0
    capsys.readouterr()
    assert cli(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert err.count(step_file_name(7)) == 1
    page = (tmp_path / "r.html").read_text()
    assert "skipped unreadable file" in page and step_file_name(7) in page


def test_a_corrupt_data_page_behind_a_valid_footer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _good_run(tmp_path)
    _corrupt_data_page(folder / step_file_name(1))
    store = RolloutStore(tmp_path)
    assert store.steps() == [0, 1]  # the footer still reads
    with pytest.raises(UnreadableDumpError, match=step_file_name(1)):
        store.load(1)
    assert cli(["rollouts", str(tmp_path), "show", "--step", "1"]) == 1  # 0.1: a thrift traceback
    err = capsys.readouterr().err
    assert step_file_name(1) in err and "Traceback" not in err and err.count("\n") == 1
    data = collect(tmp_path)  # 0.1: `rl-guards report` exited with the thrift error
    assert any(step_file_name(1) in item for item in data.unreadable)
    assert data.index and write_report(tmp_path).is_file()


def test_text_that_would_drive_the_terminal_is_shown_not_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "ok\x1b[2J\x1b]0;pwned\x07\u202eevil\x00end"
    groups = [("arith\x00\x1b[31m<b>", "What is 3+4?", [hostile, "7"])]
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0, groups))
    for args in (["list"], ["show", "--step", "0"], ["compare", "--steps", "0", "0"]):
        assert cli(["rollouts", str(tmp_path), *args]) == 0
        out = capsys.readouterr().out
        assert not any(ch in out for ch in "\x1b\x07\x00\u202e"), args  # 0.1: raw ESC / OSC / NUL / bidi
    assert cli(["rollouts", str(tmp_path), "show", "--step", "0"]) == 0
    out = capsys.readouterr().out
    assert "⟨ESC⟩[2J" in out and "⟨BEL⟩" in out and "⟨U+202E⟩evil" in out and "⟨NUL⟩end" in out
    page = write_report(tmp_path).read_text()
    assert "arith&lt;b&gt;" in page.replace("\x00", "").replace("\x1b[31m", "")  # HTML in a task name escaped


def test_a_lone_surrogate_costs_one_repaired_row_not_the_dump(tmp_path: Path) -> None:
    groups = [("arith", "What is 3+4?", ["7", "8"]), ("echo", "Repeat the word: apple", ["apple", "pear"])]
    batch = make_batch(0, groups)
    batch.completions[0] = "7\ud800"  # what a reward function may be handed after a byte-level decode of bad ids
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(batch)
    h.batch(make_batch(1))
    store = RolloutStore(tmp_path)
    assert store.steps() == [0, 1]  # 0.1: pa.array failed outside the try and every dump of the run was lost
    rows = store.load(0)
    assert len(rows) == 4 and rows[0]["completion_text"] == "7\ufffd"
    assert h.metric("repaired_rows") == [1.0] and h.metric("write_errors") == []


def test_inf_in_the_training_log_is_left_out_and_counted(tmp_path: Path) -> None:
    _good_run(tmp_path)
    history = [
        {"step": 1, "reward": 0.5, "rl_guards_task/arith/reward_mean": 0.5},
        {"step": 2, "reward": float("inf"), "rl_guards_task/arith/reward_mean": float("-inf")},
        {"step": 3, "reward": 0.7, "rl_guards_task/arith/reward_mean": 0.6},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": history}))
    data = collect(tmp_path)  # 0.1: ValueError: cannot convert float NaN to integer
    assert data.skipped == {"reward_mean": 2}
    assert [p[1] for p in data.log_curves["reward_mean"]["arith"]] == [0.5, 0.6]
    page = write_report(tmp_path).read_text()
    assert "2 non-finite value(s)" in page


def test_output_dir_with_a_tilde_and_a_variable_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DUMPS", "mine")
    h = Harness(str(tmp_path / "run"), every_steps=1, output_dir="~/x/$DUMPS")
    h.begin(0)
    h.batch(make_batch(0))
    target = tmp_path / "home" / "x" / "mine"
    assert (target / step_file_name(0)).is_file()  # 0.1: a literal ./~/x folder, and every write failed
    assert not Path("~").exists()
    assert RolloutStore("~/x/$DUMPS").steps() == [0]
    shutil.rmtree(tmp_path / "home")


# ----- issue 41 item 4: a lone-surrogate task name and a crafted trainer_state.json never break the report ---
def test_a_lone_surrogate_task_name_is_shown_on_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rl_guards.core.metric_keys import task_metric_key

    _good_run(tmp_path)
    history = [{"step": s, task_metric_key("arith\ud800", "reward_mean"): 0.5 * s} for s in (1, 2)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    (tmp_path / "findings.jsonl").write_text('{"type": "finding", "guard": "g\\udc80", "kind": "k", "count": 1}\n')
    assert cli(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0  # e1b9f62: UnicodeEncodeError
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "arith⟨U+D800⟩" in page and "g⟨U+DC80⟩/k" in page
    assert not list(tmp_path.glob(".*tmp*"))  # e1b9f62: a 0-byte .r.html.tmp-<pid> was left


CRAFTED_STATES = {
    "null step": '{"global_step": null, "log_history": []}',  # e1b9f62: TypeError
    "inf step": '{"global_step": Infinity, "log_history": []}',  # e1b9f62: OverflowError
    "a list": "[1, 2]",  # e1b9f62: AttributeError
    "deep nesting": "[" * 100_000 + "]" * 100_000,  # e1b9f62: RecursionError
    "empty": "",
    "cut": '{"global_step": 3, "log_hist',
}


@pytest.mark.parametrize("crafted", sorted(CRAFTED_STATES))
def test_a_crafted_trainer_state_is_named_and_the_checkpoint_state_is_used(
    tmp_path: Path, crafted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _good_run(tmp_path)
    (tmp_path / "checkpoint-1").mkdir()
    good = {"global_step": 1, "log_history": [{"step": 1, "reward": 0.25}]}
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(good))
    (tmp_path / "trainer_state.json").write_text(CRAFTED_STATES[crafted])
    assert cli(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert err.count("skipped unreadable file") == 1 and str(tmp_path / "trainer_state.json") in err
    data = collect(tmp_path)
    assert data.trainer_state == tmp_path / "checkpoint-1" / "trainer_state.json"
    assert data.log_curves["reward_mean"] == {"(all, TRL)": [(1.0, 0.25)]}
