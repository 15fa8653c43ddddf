"""A guarded GRPO run killed with SIGKILL between checkpoints, then resumed: nothing lost, nothing twice.

The run (``tests/reliability/grpo_run.py``: every guard, a checkpoint every 2 steps, a rollout dump every step)
is killed once a checkpoint is complete and a later step has been dumped, i.e. with dumps of an abandoned
trajectory on disk. A new process resumes from the last complete checkpoint to the end. Then every step has
exactly one dump with exactly one batch of rows, the pre-kill dumps of the checkpointed steps are untouched, the
abandoned ones sit in ``superseded/``, and ``trainer_state.json``'s log history has one entry per step whose
per-task row counts add up to the batch and match that step's dump.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import INDEX_FILE, SUPERSEDED_DIR, read_dump_metadata, step_file_name

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "grpo_run.py"
MAX_STEPS = 12
BATCH = 8  # tiny_grpo_config: 2 prompts x 4 generations


def _env() -> dict[str, str]:
    # RL_GUARDS_CACHE (set by conftest) points the child at the session's tiny fixture.
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
    }


def _complete_checkpoints(out: Path) -> list[int]:
    """Checkpoints whose trainer_state.json was written (the Trainer writes it last)."""
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file())


def _dumped_steps(folder: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("step_*.parquet"))


def _kill_between_checkpoints(out: Path, rollouts: Path, log: Path) -> tuple[list[int], int]:
    """Run, SIGKILL once a checkpoint is complete and a later step is dumped; return (dumped steps, checkpoint)."""
    with log.open("w") as sink:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), str(out), "--max_steps", str(MAX_STEPS), "--step_sleep", "0.3"],
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 300
        try:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"the run ended before the kill:\n{log.read_text()[-3000:]}")
                checkpoints = _complete_checkpoints(out)
                dumped = _dumped_steps(rollouts)
                if checkpoints and dumped and dumped[-1] > checkpoints[-1]:
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"no checkpoint after 300 s:\n{log.read_text()[-3000:]}")
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return _dumped_steps(rollouts), _complete_checkpoints(out)[-1]


def _task_rows(entry: dict[str, Any]) -> dict[str, float]:
    return {k.split("/")[1]: v for k, v in entry.items() if k.startswith("rl_guards_task/") and k.endswith("/rows")}


def test_sigkill_between_checkpoints_then_resume_loses_and_duplicates_nothing(tiny: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    rollouts = out / "rl_guards" / "rollouts"
    pre_kill, resume_at = _kill_between_checkpoints(out, rollouts, tmp_path / "killed_run.log")
    killed_at = time.time()
    assert resume_at < MAX_STEPS and not (out / "trainer_state.json").exists()
    abandoned = [s for s in pre_kill if s > resume_at]
    assert abandoned, (pre_kill, resume_at)  # the scenario: dumps past the checkpoint exist
    kept = {s: (rollouts / step_file_name(s)).read_bytes() for s in pre_kill if s <= resume_at}

    resumed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(out),
            "--max_steps",
            str(MAX_STEPS),
            "--resume",
            str(out / f"checkpoint-{resume_at}"),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    # Every step dumped exactly once (TRL's steps 1..MAX_STEPS), one batch of distinct rows each; the index agrees
    # with the files.
    steps = list(range(1, MAX_STEPS + 1))
    store = RolloutStore(out)
    assert store.steps() == steps
    index_steps = [json.loads(line)["step"] for line in (rollouts / INDEX_FILE).read_text().splitlines()]
    assert index_steps == steps
    dumps = {s: store.load(s) for s in steps}
    for s, rows in dumps.items():
        assert len(rows) == BATCH and {r["step"] for r in rows} == {s}, s
        assert sorted(r["row"] for r in rows) == list(range(BATCH)), s
    # Steps up to the checkpoint: the pre-kill files, untouched. After it: rewritten after the kill.
    assert {s: (rollouts / step_file_name(s)).read_bytes() for s in kept} == kept
    for s in range(resume_at + 1, MAX_STEPS + 1):
        assert read_dump_metadata(rollouts / step_file_name(s))["written_at"] > killed_at, s
    # The abandoned trajectory's dumps are kept aside, not mixed in; no temp file of the killed write is left.
    moved = sorted(int(p.stem.split("_")[1]) for p in (rollouts / SUPERSEDED_DIR).rglob("step_*.parquet"))
    assert moved == abandoned
    assert not list(rollouts.glob(".*.tmp-*"))

    # Per-task curves: one log entry per step 1..MAX_STEPS; its task rows add up to the batch and match the dump.
    state = json.loads((out / "trainer_state.json").read_text())
    per_step = [e for e in state["log_history"] if _task_rows(e)]
    assert [e["step"] for e in per_step] == list(range(1, MAX_STEPS + 1))
    seen_tasks: set[str] = set()
    for entry in per_step:
        rows = _task_rows(entry)
        assert sum(rows.values()) == BATCH, entry
        dumped = Counter(r["task"] for r in dumps[entry["step"]])  # one numbering: the batch trained in that step
        assert rows == {t: float(n) for t, n in dumped.items()}, entry["step"]
        seen_tasks |= set(rows)
    assert seen_tasks == {"arith", "echo"}
    guard_state = state["stateful_callbacks"]["GuardRunState"]
    guard_state = guard_state[-1] if isinstance(guard_state, list) else guard_state
    assert guard_state["attributes"]["batches_seen"] == MAX_STEPS
