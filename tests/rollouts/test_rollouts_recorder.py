"""RolloutRecorder on hand-built batches: columns, schedule, atomic writes, failures, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _rollouts_data import GROUPS, Harness, make_batch

from rl_guards.errors import GuardError
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import (
    INDEX_FILE,
    SCHEMA_VERSION,
    SUPERSEDED_DIR,
    TOKENIZER_FILE,
    read_dump_metadata,
    step_file_name,
)
from rl_guards.testing.logs import shows


def _folder(tmp_path: Path) -> Path:
    return tmp_path / "rl_guards" / "rollouts"


def _index(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / INDEX_FILE).read_text().splitlines()]


def _files(folder: Path) -> list[str]:
    """The dump files and the index (the run's tokenizer.json, saved once for the readers, left out)."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != TOKENIZER_FILE)


def test_one_row_per_completion_with_every_column(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    table = pq.read_table(_folder(tmp_path) / "step_000000.parquet")
    # Schema 2 stores ids, not decoded text: no "prompt" / "completion" columns on disk; readers decode the ids
    # with the run's tokenizer, saved once next to the dumps.
    assert {"prompt", "completion"}.isdisjoint(table.column_names) and (_folder(tmp_path) / TOKENIZER_FILE).is_file()
    rows = RolloutStore(tmp_path).load(0)
    n = sum(len(c) for _, _, c in GROUPS)
    assert len(rows) == n and h.metric("dumped_rows") == [float(n)]
    assert {r["schema_version"] for r in rows} == {SCHEMA_VERSION}
    assert [r["group"] for r in rows] == [0, 0, 1, 1, 2, 2]
    assert [r["task"] for r in rows] == ["arith", "arith", "echo", "echo", "arith", "arith"]

    first, cut, spaced = rows[0], rows[3], rows[5]
    # The prompt exactly as rendered by the real qwen3 template, special tokens kept.
    assert first["prompt"] == "<|im_start|>user\nWhat is 3+4?<|im_end|>\n<|im_start|>assistant\n"
    assert first["completion"] == "<think>\n3+4=7\n</think>\n\n7<|im_end|>"  # EOS visible
    assert first["completion_text"] == "<think>\n3+4=7\n</think>\n\n7"  # what the reward functions saw
    assert first["reward/arith_correct"] == 1.0 and first["reward/echo_match"] is None
    assert first["reward"] == 1.0 and first["advantage"] == 0.5
    assert first["think_kind"] == "thinking" and first["think_anomalies"] == []
    assert first["prompt_tokens"] == 18 and first["completion_tokens"] == len(first["completion_ids"])
    assert first["columns"] == {"answer": "0"}  # parsed by the reader
    # A truncated completion: no EOS in the text, flagged, its open think block reported.
    assert cut["truncated"] is True and not cut["completion"].endswith("<|im_end|>")
    assert cut["think_kind"] == "anomalous" and cut["think_anomalies"] == ["unclosed_open"]
    assert spaced["completion"] == " 4 \t<|im_end|>"  # whitespace kept byte for byte

    meta = read_dump_metadata(_folder(tmp_path) / "step_000000.parquet")
    assert meta["reason"] == "periodic" and meta["rows"] == n and meta["tasks"] == ["arith", "echo"]
    assert _index(_folder(tmp_path)) == [
        {
            "checkpoint": None,
            "file": "step_000000.parquet",
            "reason": "periodic",
            "rows": n,
            "schema_version": SCHEMA_VERSION,
            "step": 0,
            "tasks": ["arith", "echo"],
        }
    ]


def test_non_thinking_row_with_tags_is_flagged(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    batch = make_batch(0)
    batch.thinking = [False] * len(batch)
    h.batch(batch)
    rows = pq.read_table(_folder(tmp_path) / "step_000000.parquet").to_pylist()
    assert "tag_in_nonthinking" in rows[0]["think_anomalies"]
    assert "tag_in_nonthinking" not in rows[4]["think_anomalies"]  # a plain "4": no tags
    assert rows[0]["thinking"] is False


def test_periodic_and_checkpoint_schedule(tmp_path: Path) -> None:
    # TRL's numbering: the batch of step k is trained in step k, and checkpoint-k holds it.
    h = Harness(str(tmp_path), every_steps=3)
    h.begin(0)
    for step in range(1, 9):
        h.batch(make_batch(step))
    folder = _folder(tmp_path)
    assert _files(folder) == [INDEX_FILE, *(step_file_name(s) for s in (1, 3, 6))]

    h.save(8)  # latest batch is step 8, not dumped yet
    h.save(8)  # a second call for the same checkpoint writes nothing new
    entries = {e["step"]: e for e in _index(folder)}
    assert sorted(entries) == [1, 3, 6, 8]
    assert entries[8]["reason"] == "checkpoint" and entries[8]["checkpoint"] == 8
    assert h.metric("dumped_rows") == [6.0] * 4

    h.batch(make_batch(9))
    h.batch(make_batch(9))  # a second generation batch of the same step (steps_per_generation < grad accum)
    h.save(9)  # step 9 was dumped periodically: now also tagged as the checkpoint's
    assert h.metric("dumped_rows") == [6.0] * 4 + [6.0, 6.0]  # the second batch added 6 rows, the tag none
    table = pq.read_table(folder / "step_000009.parquet")
    assert table.num_rows == 12
    assert sorted(set(table.column("group").to_pylist())) == list(range(6))  # unique per step
    assert table.column("row").to_pylist() == list(range(12))
    entries = {e["step"]: e for e in _index(folder)}
    assert entries[9]["reason"] == "checkpoint" and entries[9]["checkpoint"] == 9 and entries[9]["rows"] == 12


def test_on_save_disabled_and_eval_batches_and_other_ranks_write_nothing(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=5, on_save=False)
    h.recorder.load_state_dict({"next_due": 5})  # step 0 was dumped before (a resumed schedule): step 1 is not due
    h.batch(make_batch(1))
    h.save(2)
    h.batch(make_batch(5, mode="eval"))
    assert not _folder(tmp_path).exists()

    other = Harness(str(tmp_path / "rank1"), main=False, every_steps=1)
    other.begin(0)
    other.batch(make_batch(0))
    other.save(1)
    assert not (tmp_path / "rank1").exists() and not other.recorder._batches  # nothing kept either


def test_periodic_dumps_follow_generation_batches_that_skip_steps(tmp_path: Path) -> None:
    # steps_per_generation=2: a batch is generated at steps 0, 2, 4, ... With every_steps=3 the first batch at or
    # after each multiple of 3 is dumped (0.1 required step % 3 == 0 and dumped only step 0, 6, 12, ...).
    h = Harness(str(tmp_path), every_steps=3)
    h.begin(0)
    for step in range(0, 14, 2):
        h.batch(make_batch(step))
    assert _files(_folder(tmp_path)) == [INDEX_FILE, *(step_file_name(s) for s in (0, 4, 6, 10, 12))]
    # The schedule is state: a resumed recorder continues it instead of starting over.
    resumed = Harness(str(tmp_path), every_steps=3)
    resumed.recorder.load_state_dict(json.loads(json.dumps(h.recorder.state_dict())))
    resumed.begin(14)
    resumed.batch(make_batch(14))
    resumed.batch(make_batch(16))
    assert _files(_folder(tmp_path))[-1] == step_file_name(16)  # due from 15 on; 14 was not


def test_output_dir_override(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    h = Harness(str(tmp_path / "run"), every_steps=1, output_dir=str(target))
    h.batch(make_batch(0))
    assert (target / "step_000000.parquet").is_file()


def test_unwritable_folder_warns_once_counts_and_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the dump folder should be")
    h = Harness(str(tmp_path), every_steps=1, output_dir=str(blocker / "rollouts"))
    with shows("write_failed|could not write") as caught:
        h.begin(0)
        h.batch(make_batch(0))
        h.batch(make_batch(1))
    assert len(caught.messages) == 1  # warned once
    assert h.metric("write_errors") == [1.0, 2.0]  # failed writes so far
    assert h.session.counts[("rollouts", "write_failed")] == 2
    assert "rollouts.output_dir" in h.session.findings[0].message
    assert h.metric("dumped_rows") == []


def test_write_failure_in_raise_mode_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    h = Harness(str(tmp_path), every_steps=1, mode="raise", output_dir=str(blocker / "rollouts"))
    with pytest.raises(GuardError, match="could not write the rollouts of step 0"):
        h.batch(make_batch(0))


def test_failed_replace_keeps_the_old_state_and_leaves_no_temp(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    h.batch(make_batch(0))
    folder = _folder(tmp_path)
    index_before = (folder / INDEX_FILE).read_text()
    (folder / step_file_name(1)).mkdir()  # the rename onto the step file fails after the temp file is complete
    with shows("could not write the rollouts of step 1"):
        h.batch(make_batch(1))
    assert h.metric("write_errors") == [1.0] and h.metric("dumped_rows") == [6.0]
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name]
    assert (folder / INDEX_FILE).read_text() == index_before


def test_index_failure_keeps_the_dump_and_the_next_start_rebuilds_the_index(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    h.batch(make_batch(0))
    folder = _folder(tmp_path)
    (folder / INDEX_FILE).unlink()
    (folder / INDEX_FILE).mkdir()  # the index cannot be replaced
    with shows("could not update"):
        h.batch(make_batch(1))
    assert h.metric("write_errors") == [1.0]
    assert (folder / step_file_name(1)).is_file()  # the dump itself is complete
    (folder / INDEX_FILE).rmdir()
    Harness(str(tmp_path), every_steps=1).begin(2)  # e.g. the resumed run
    assert [e["step"] for e in _index(folder)] == [0, 1]


def test_crash_mid_write_leaves_only_a_hidden_temp_that_is_cleaned(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    h.batch(make_batch(0))
    folder = _folder(tmp_path)
    half = folder / f".{step_file_name(1)}.tmp-{os.getpid()}"
    half.write_bytes(b"PAR1 half a file")  # what a kill during pq.write_table leaves behind
    again = Harness(str(tmp_path), every_steps=1)
    again.begin(1)
    assert not half.exists()
    assert [e["step"] for e in _index(folder)] == [0]


def _contents(folder: Path, step: int) -> set[str]:
    return set(pq.read_table(folder / step_file_name(step)).column("completion_text").to_pylist())


@pytest.mark.parametrize("call_train_begin", [True, False])
def test_resume_round_trip_loses_nothing_and_duplicates_nothing(tmp_path: Path, call_train_begin: bool) -> None:
    folder = _folder(tmp_path)
    # TRL's numbering: the batch of step k is trained in step k; checkpoint-k holds it.
    first = Harness(str(tmp_path), every_steps=3)
    first.begin(0)
    for step in range(1, 11):  # checkpoints at 4 and 8; "crash" after step 10
        first.batch(make_batch(step, marker=" [run1]"))
        if step in (4, 8):
            first.save(step)
    assert [e["step"] for e in _index(folder)] == [1, 3, 4, 6, 8, 9]

    # Resume from checkpoint-4: a new recorder (new process), global step 4, the first batch is step 5's.
    second = Harness(str(tmp_path), every_steps=3)
    if call_train_begin:
        second.begin(4)
    for step in range(5, 11):
        second.batch(make_batch(step, marker=" [run2]"))
        if step == 8:
            second.save(8)

    entries = _index(folder)
    steps = [e["step"] for e in entries]
    assert steps == [1, 3, 4, 5, 6, 8, 9]  # every step once
    assert sorted(f for f in _files(folder) if f != INDEX_FILE) == [e["file"] for e in entries]
    for step in (1, 3, 4):  # up to the checkpoint: the original dumps, kept
        assert all(t.endswith("[run1]") for t in _contents(folder, step))
    for step in (5, 6, 8, 9):  # after it: the resumed trajectory only
        assert all(t.endswith("[run2]") for t in _contents(folder, step))
    assert {e["step"]: e["checkpoint"] for e in entries if e["checkpoint"]} == {4: 4, 8: 8}
    # The abandoned trajectory's dumps are kept aside, not in the store.
    moved = sorted(p.name for p in (folder / SUPERSEDED_DIR).rglob("*.parquet"))
    assert moved == [step_file_name(s) for s in (6, 8, 9)]
    assert ("rollouts", "superseded") in second.session.notes and not second.session.counts


def test_fresh_run_into_old_folder_supersedes_old_dumps(tmp_path: Path) -> None:
    old = Harness(str(tmp_path), every_steps=1)
    for step in range(3):
        old.batch(make_batch(step, marker=" [old]"))
    new = Harness(str(tmp_path), every_steps=2)
    new.begin(0)
    new.batch(make_batch(0, marker=" [new]"))
    folder = _folder(tmp_path)
    assert [e["step"] for e in _index(folder)] == [0]
    assert all(t.endswith("[new]") for t in _contents(folder, 0))


def test_memory_holds_only_the_latest_step(tmp_path: Path) -> None:
    h = Harness(str(tmp_path), every_steps=100)
    for step in range(5):
        h.batch(make_batch(step))
    assert [b.step for b in h.recorder._batches] == [4]
