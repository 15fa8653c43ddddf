"""Rollout dumps that cannot be written never stop training: counted, warned once, the run finishes.

Tests run as root, so a read-only folder would not stop a write; the dump folder is put under a regular FILE,
where creating it fails for every user (``NotADirectoryError``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _rollouts_data import Harness, make_batch

import rl_guards
from rl_guards.cli.main import main as cli
from rl_guards.console import capture
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import INDEX_FILE, TOKENIZER_FILE

MAX_STEPS = 3


@pytest.mark.slow
def test_unwritable_dump_folder_keeps_training(make_grpo_trainer: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    folder = blocker / "rollouts"
    trainer = make_grpo_trainer(max_steps=MAX_STEPS)
    run = rl_guards.install(trainer, {"rollouts": {"every_steps": 1, "output_dir": str(folder), "mode": "warn"}})
    with capture() as caught:
        trainer.train()

    assert trainer.state.global_step == MAX_STEPS
    assert run.session.counts[("rollouts", "write_failed")] == MAX_STEPS  # one failed dump per step
    logged = [
        e["rl_guards/rollouts/write_errors"]
        for e in trainer.state.log_history
        if "rl_guards/rollouts/write_errors" in e
    ]
    # Failed writes so far; the writer reports in the background, the last step's by the final log at the latest.
    assert logged == sorted(logged) and logged[-1] == MAX_STEPS
    dump_warnings = [m for m in caught.messages if m.startswith("[rl_guards/rollouts]")]
    assert len(dump_warnings) == 1, dump_warnings  # warned once, then only counted
    message = dump_warnings[0]
    assert str(folder) in message and "Training goes on" in message and "rollouts.output_dir" in message
    assert blocker.read_text() == "not a folder\n" and not folder.exists()
    assert not any(f.kind == "internal_error" for f in run.session.findings)


# ----- issue 22 item 6: one failed write never hides later prompts, the index lists what is on disk -------------
def _prompts(run: Path, step: int) -> list[str]:
    return [row["prompt"] for row in RolloutStore(run).load(step)]


def test_a_failed_tokenizer_write_costs_no_dump_and_is_retried(tmp_path: Path) -> None:
    folder = tmp_path / "rl_guards" / "rollouts"
    (folder / TOKENIZER_FILE).mkdir(parents=True)  # a folder where the file goes: its rename fails (any user)
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    assert h.metric("write_errors") == [1.0]  # said once, counted
    assert RolloutStore(tmp_path).steps() == [0]  # 437f4ff: step 0's dump was lost with the tokenizer
    (folder / TOKENIZER_FILE).rmdir()  # the fault goes away (disk freed)
    h.batch(make_batch(1))
    assert (folder / TOKENIZER_FILE).is_file()  # 437f4ff: written once, never retried
    for step in (0, 1):  # 437f4ff: every later dump showed empty prompts in show / compare / report
        assert all(p.startswith("<|im_start|>user\n") for p in _prompts(tmp_path, step)), step
    assert h.metric("write_errors") == [1.0]


def test_after_the_folder_is_removed_mid_run_the_index_lists_only_the_files_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "rl_guards" / "rollouts"
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    h.batch(make_batch(1))
    shutil.rmtree(folder)  # removed under the running job
    h.batch(make_batch(2))
    lines = [json.loads(line) for line in (folder / INDEX_FILE).read_text().splitlines()]
    assert [e["step"] for e in lines] == [2]  # 437f4ff: still listed the deleted dumps of steps 0 and 1
    assert RolloutStore(tmp_path).steps() == [2]
    assert all(p.startswith("<|im_start|>user\n") for p in _prompts(tmp_path, 2))  # tokenizer.json written again
    assert cli(["rollouts", str(tmp_path), "show", "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "<|im_start|>user" in out
    assert h.metric("write_errors") == []


# ----- issue 41 item 5: a removed dump folder is said, and every later dump written ---------------------------
def test_a_dump_folder_removed_mid_run_is_made_again_and_warned_once(tmp_path: Path) -> None:
    folder = tmp_path / "rl_guards" / "rollouts"
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    h.batch(make_batch(1))
    with capture() as caught:
        shutil.rmtree(folder)  # removed under the running job
        h.batch(make_batch(2))
        shutil.rmtree(folder)  # and again
        h.batch(make_batch(3))
        h.batch(make_batch(4))
    assert RolloutStore(tmp_path).steps() == [3, 4]  # every dump after the removals is on disk
    assert h.session.counts[("rollouts", "folder_removed")] == 2  # e1b9f62: 0, not a word
    said = caught.messages
    assert len(said) == 1, said  # warned once, then counted
    assert f"{folder} was removed while the run was writing to it (the dumps of steps [0, 1] went with it)" in said[0]
    assert "the dump of step 2 and every later one are written there" in said[0] and "rollouts.output_dir" in said[0]
    [first, second] = [f for f in h.session.findings if f.kind == "folder_removed"]
    assert (first.step, second.step) == (2, 3) and "steps [2]" in second.message
    assert h.metric("write_errors") == [] and not [f for f in h.session.findings if f.kind == "internal_error"]


# ----- issue 41 item 5: empty prompts are explained ------------------------------------------------------------
@pytest.mark.parametrize("damage", ["missing", "empty", "cut"])
def test_prompts_shown_empty_say_why_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    folder = tmp_path / "rl_guards" / "rollouts"
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    saved = tmp_path / "checkpoint-1" / TOKENIZER_FILE  # the trainer saves the run's tokenizer with a checkpoint
    saved.parent.mkdir()
    shutil.copy(folder / TOKENIZER_FILE, saved)
    if damage == "missing":
        (folder / TOKENIZER_FILE).unlink()
    else:
        text = (folder / TOKENIZER_FILE).read_bytes()
        (folder / TOKENIZER_FILE).write_bytes(b"" if damage == "empty" else text[: len(text) // 2])
    assert cli(["rollouts", str(tmp_path), "show", "--step", "0"]) == 0
    out = capsys.readouterr()
    assert "prompt (tail):\n  \n" in out.out  # the prompt is empty: its ids cannot be decoded
    # e1b9f62: not a word on stderr
    assert str(folder / TOKENIZER_FILE) in out.err and "prompts are shown empty" in out.err
    assert ("is missing" if damage == "missing" else "cannot be read") in out.err
    assert f"Fix: cp {saved} {folder / TOKENIZER_FILE}" in out.err
    assert cli(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0
    assert "prompts are shown empty" in capsys.readouterr().err
    assert "prompts are shown empty" in (tmp_path / "r.html").read_text()

    shutil.copy(saved, folder / TOKENIZER_FILE)  # the fix it names
    assert cli(["rollouts", str(tmp_path), "show", "--step", "0"]) == 0
    out = capsys.readouterr()
    assert "<|im_start|>user" in out.out and out.err == ""
