"""Two processes (torchrun, gloo, CPU): each rank scans only its own rows and every rank holds the same gathered
numbers; the verdicts and metrics equal a one-process replay of the same rows; no hang; files written once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _two_ranks import free_port, kill_processes_with

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import GuardSession, RunContext, run_hook
from rl_guards.guards.registry import BATCH_GUARDS

SCRIPT = Path(__file__).parent / "multiproc" / "guarded_run.py"
# Guards that only replay from the batch (the others need the trainer: tensors, templates, reward funcs).
REPLAYABLE = ("tasks", "dead_groups", "truncation", "think_tags")
GUARDS_CONFIG = {
    "rollouts": {"every_steps": 1},
    "template": {"mode": "warn"},
    "masking": {"mode": "raise"},
    "metrics": "full",  # every metric is compared with the one-process replay
}


def _launch(
    out: Path,
    nproc: int,
    per_device_batch: int,
    cache: str,
    extra_env: dict[str, str] | None = None,
    guards_config: dict[str, Any] | None = None,
    timeout: int = 300,
) -> subprocess.CompletedProcess[str]:
    env = {
        **(extra_env or {}),
        **os.environ,
        "RL_GUARDS_CACHE": cache,
        "OMP_NUM_THREADS": "1",
        "MAX_STEPS": "3",
        "PER_DEVICE_BATCH": str(per_device_batch),
        "GUARDS_CONFIG": json.dumps(GUARDS_CONFIG if guards_config is None else guards_config),
        "WANDB_MODE": "offline",
    }
    if nproc == 1:
        cmd = [sys.executable, str(SCRIPT), str(out)]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(SCRIPT),
            str(out),
        ]
    # Output to files, not pipes: a worker left running would hold a pipe open and the wait for it would never end.
    # Its own session, so a run that overstays is killed with torchrun; torchrun's workers (sessions of their own)
    # are found by their output folder on the command line.
    logs = out.parent / f"{out.name}.launch"
    with open(f"{logs}.stdout", "w+") as fout, open(f"{logs}.stderr", "w+") as ferr:
        proc = subprocess.Popen(cmd, env=env, stdout=fout, stderr=ferr, text=True, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            hung = True
        kill_processes_with(f" {out} ")  # (cmdline arguments are joined by spaces, with one after the last)
        fout.seek(0)
        ferr.seek(0)
        stdout, stderr = fout.read(), ferr.read()
    if hung:
        pytest.fail(f"the {nproc}-process run hung: killed after {timeout} s\n{(stdout + stderr)[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _batches(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# Per-row numbers every rank must hold alike; text and ids are only the held rows'.
NUMBERS = ("rewards", "advantages", "tasks", "raw_tasks", "completion_lengths", "truncated", "thinking",
           "prompt_opened", "features", "step", "num_generations", "reward_names")  # fmt: skip
TEXT = ("completions", "completion_ids", "prompt_ids")


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One full batch from each rank's record: the numbers (equal on every rank) and each rank's held rows."""
    merged = {k: v for k, v in parts[0].items() if k not in ("held", "features", "thread")}
    for part in parts:
        start, stop = part["held"]
        for name in TEXT:
            merged[name][start:stop] = part[name][start:stop]
    return merged


def _replay(batches: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Run the replayable guards over the merged batches in one process; per-batch mean of each metric."""
    config = GuardsConfig.from_dict(GUARDS_CONFIG)
    guards = [cls(config) for cls in BATCH_GUARDS if cls.name in REPLAYABLE]
    session = GuardSession()
    for guard in guards:
        guard.setup(RunContext())
    out = []
    for data in batches:
        batch = RolloutBatch(**data)  # every row held: guards scan the rows themselves, as one process would
        for guard in guards:
            run_hook(guard, "on_batch", session, batch.step, batch)
        out.append({k: sum(v) / len(v) for k, v in session.pop_metrics().items()})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("background", [True, False], ids=["background", "inline"])
def test_two_processes_agree_with_one_process_replay(tiny: Any, tmp_path: Path, background: bool) -> None:
    cache = os.environ["RL_GUARDS_CACHE"]
    out = tmp_path / "ddp"
    out.mkdir()
    config = {**GUARDS_CONFIG, "engine": {"background": background}}
    proc = _launch(out, nproc=2, per_device_batch=6, cache=cache, guards_config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    rank0, rank1 = _batches(out / "batches_rank0.jsonl"), _batches(out / "batches_rank1.jsonl")
    assert len(rank0) == len(rank1) == 3
    # where the batches were decided: the engine's thread while the step trained, or the training thread
    assert {b["thread"] for b in rank0 + rank1} == {"rl_guards-batch" if background else "MainThread"}
    for a, b in zip(rank0, rank1, strict=True):
        assert {k: a[k] for k in NUMBERS} == {k: b[k] for k in NUMBERS}, "ranks hold different numbers"
        assert a["held"] == [0, 6] and b["held"] == [6, 12]  # each rank scanned only its own rows
        assert all(c is None for c in a["completions"][6:]) and all(c is None for c in b["completions"][:6])
    merged = [_merge([a, b]) for a, b in zip(rank0, rank1, strict=True)]
    first = merged[0]
    # 2 ranks x 6 rows = 12 rows = 3 groups of 4: group 1 is split across the ranks, and still whole here.
    assert len(first["completions"]) == 12 and first["num_generations"] == 4
    for g in range(3):
        rows = range(4 * g, 4 * g + 4)
        assert len({tuple(first["prompt_ids"][i]) for i in rows}) == 1
        assert len({first["tasks"][i] for i in rows}) == 1

    history = json.loads((out / "log_history.json").read_text())
    logged = [row for row in history if "loss" in row]
    assert len(logged) == 3
    replayed = _replay(merged)
    compared = 0
    for row, expected in zip(logged, replayed, strict=True):
        for key, value in expected.items():
            assert key in row, f"{key} missing from the 2-process log"
            assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
            compared += 1
    assert compared > 20

    # Files written once, by the main process: one dump per step, and index lines not duplicated.
    dumps = sorted(p.name for p in (out / "rl_guards" / "rollouts").glob("step_*.parquet"))
    assert dumps == ["step_000001.parquet", "step_000002.parquet", "step_000003.parquet"]  # TRL's steps
    index = (out / "rl_guards" / "rollouts" / "index.jsonl").read_text().splitlines()
    assert len(index) == len(set(index))


@pytest.mark.slow
def test_a_failure_on_one_rank_skips_the_batch_on_all_ranks_without_a_hang(tiny: Any, tmp_path: Path) -> None:
    out = tmp_path / "fail"
    out.mkdir()
    proc = _launch(out, nproc=2, per_device_batch=6, cache=os.environ["RL_GUARDS_CACHE"], extra_env={"FAIL_RANK": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {r: [b["step"] for b in _batches(out / f"batches_rank{r}.jsonl")] for r in (0, 1)}
    # the batch generated at global step 1 (TRL's step 2) skipped on both ranks, training went on
    assert steps == {0: [1, 3], 1: [1, 3]}, steps
    assert "hook/internal_error" in (out / "summary.txt").read_text()


@pytest.mark.slow
def test_a_stop_on_the_main_process_alone_stops_every_rank(tiny: Any, tmp_path: Path) -> None:
    # Only the main process writes dumps: with rollouts in raise mode and an unwritable folder, rank 0 alone finds
    # write_failed. Rank 1 must stop with it (a GuardError naming the guard), not die on a closed connection or wait.
    out = tmp_path / "stop"
    out.mkdir()
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    config = {**GUARDS_CONFIG, "rollouts": {"every_steps": 1, "mode": "raise", "output_dir": str(blocked)}}
    proc = _launch(out, nproc=2, per_device_batch=6, cache=os.environ["RL_GUARDS_CACHE"], guards_config=config)
    text = proc.stdout + proc.stderr
    (tmp_path / "output.txt").write_text(text)
    assert proc.returncode != 0, text[-3000:]
    # Both ranks raise rank 0's own finding (rank 1 says it stopped with another rank), whichever fails first. The
    # writer reports in the background, so the stop comes at the first agreement after the failed write.
    assert re.search(
        r"\[rank1\]: rl_guards.errors.GuardError: \[rl_guards/rollouts\] could not write the rollouts", text
    )
    assert "stopped on another rank; this rank stops with it" in text, text[-3000:]
    steps = [[b["step"] for b in _batches(out / f"batches_rank{rank}.jsonl")] for rank in (0, 1)]
    assert steps[0] == steps[1] and len(steps[0]) <= 2, steps  # both stopped together, within a step


@pytest.mark.slow
def test_a_probe_generation_failing_on_one_rank_is_skipped_by_every_rank_and_the_checkpoint_is_written(
    tiny: Any, tmp_path: Path
) -> None:
    # Rank 1 runs out of memory generating the drift probe before checkpoint 2; rank 0 is then inside TRL's gathers.
    # A 30 s process-group timeout makes a desync fail (or the 240 s limit stop it) rather than hang.
    out = tmp_path / "probe"
    out.mkdir()
    env = {"FAIL_PROBE_RANK": "1", "DDP_TIMEOUT": "30"}
    config = {**GUARDS_CONFIG, "drift": {"mode": "warn"}}
    proc = _launch(out, nproc=2, per_device_batch=6, cache=os.environ["RL_GUARDS_CACHE"], extra_env=env,
                   guards_config=config, timeout=240)  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    history = json.loads((out / "log_history.json").read_text())
    assert len([row for row in history if "loss" in row]) == 3  # training went on after the checkpoint
    assert "drift/probe_failed" in (out / "summary.txt").read_text()
    assert re.search(r"probe generation failed on rank 1: generation: OutOfMemoryError: injected", text), text[-4000:]
    drift = out / "rl_guards" / "rollouts" / "drift"
    assert (drift / "step_000000.json").is_file() and not (drift / "step_000002.json").exists()
