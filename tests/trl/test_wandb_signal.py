"""What a user sees in W&B, read back from real offline runs: a small default metric set in sections of its own, no
copies of TRL's metrics, the guards' config in the run config, a rollout table with TRL's columns and more; and when a
guard stops the run, an alert, the finding in the summary, and the failing batch's metrics."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import rl_guards
from rl_guards.config import GuardsConfig
from rl_guards.errors import MaskingError
from rl_guards.testing.wandb_offline import OfflineRun, find_offline_runs, read_offline_run

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpo_tiny.py"
MAX_KEYS = 20  # rl_guards keys in one logged step, at the default metrics level
SECTIONS = ("rl_guards", "rl_guards_task")


def _ours(key: str) -> bool:
    return key.split("/", 1)[0] in SECTIONS


def _offline(root: Path) -> OfflineRun:
    runs = find_offline_runs(root)
    assert runs, f"no offline W&B run under {root}"
    return read_offline_run(runs[-1])


STEPS = 12  # the example's own length


@pytest.fixture(scope="module")
def example_run(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[OfflineRun, str]:
    """The main job (examples/grpo_tiny.py) with an offline W&B run; and what it printed (stdout, then what the
    rl_guards logger said: on a console its handler prints it on stderr, under pytest the capture takes it)."""
    import contextlib
    import io
    import logging
    import os

    from rl_guards.console import capture

    root = tmp_path_factory.mktemp("example_wandb")
    spec = importlib.util.spec_from_file_location("grpo_tiny_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(example)
    saved = {k: os.environ.get(k) for k in ("WANDB_DIR", "WANDB_MODE")}
    os.environ.update(WANDB_DIR=str(root), WANDB_MODE="offline")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), capture(logging.INFO) as said:
            assert example.main(["--output_dir", str(root / "out"), "--max_steps", str(STEPS)]) == 0
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return _offline(root), printed.getvalue() + "\n" + said.text()


def test_a_small_default_metric_set_per_step(example_run: tuple[OfflineRun, str]) -> None:
    run, _ = example_run
    steps = [row for row in run.history if any(_ours(k) for k in row)]
    assert len(steps) >= STEPS
    counts = [len({k for k in row if _ours(k) and not k.startswith("rl_guards/rollouts") and "." not in k})
              for row in steps]  # fmt: skip
    assert max(counts) <= MAX_KEYS, counts  # 0.1: 59-83 keys per step
    per_task = {k.split("/")[1] for row in steps for k in row if k.startswith("rl_guards_task/")}
    assert per_task == {"arith", "echo"}


def test_no_rl_guards_series_repeats_a_trl_series(example_run: tuple[OfflineRun, str]) -> None:
    run, _ = example_run
    keys = run.keys()
    ours = sorted(k for k in keys if _ours(k) and "." not in k)
    trl = sorted(k for k in keys if k.startswith("train/") and "." not in k)
    assert ours and trl

    def series(key: str) -> list[tuple[int, float]]:
        return [(s, float(v)) for s, v in run.series(key) if isinstance(v, int | float) and math.isfinite(v)]

    trl_series = {k: series(k) for k in trl}
    for key in ours:
        mine = series(key)
        if len(mine) < 2:
            continue
        for other, values in trl_series.items():
            same = len(values) == len(mine) and all(
                a[0] == b[0] and math.isclose(a[1], b[1], abs_tol=1e-9) for a, b in zip(mine, values, strict=True)
            )
            assert not same, f"{key} repeats TRL's {other}"


def test_sections_of_their_own_and_the_config_in_the_run(example_run: tuple[OfflineRun, str]) -> None:
    run, _ = example_run
    keys = run.keys()
    assert not any(k.startswith("train/rl_guards") for k in keys)  # 0.1: every key inside TRL's train section
    assert any(k.startswith("rl_guards/") for k in keys) and any(k.startswith("rl_guards_task/") for k in keys)
    config = run.config["rl_guards"]
    assert config == GuardsConfig.from_dict(config).to_dict()  # the effective config, whole
    assert config["rollouts"]["every_steps"] == 3 and config["metrics"] == {"level": "default"}


def test_rollout_table_has_trls_columns_and_more(example_run: tuple[OfflineRun, str]) -> None:
    run, _ = example_run
    tables = [json.loads(p.read_text()) for p in run.table_files if "rollouts" in p.name]
    assert tables
    columns = tables[0]["columns"]
    wanted = {"prompt_tail", "completion", "task", "reward", "advantage", "truncated", "think_kind",
              "think_anomalies", "checkpoint", "step"}  # fmt: skip
    assert wanted <= set(columns), columns
    funcs = [c for c in columns if c.startswith("reward/")]
    assert {"reward/arith_correct", "reward/echo_match", "reward/length_penalty"} <= set(funcs)
    completions = [row[columns.index("completion")] for t in tables for row in t["data"]]
    assert any("<|im_end|>" in c for c in completions)  # special tokens visible


def test_the_console_stays_readable(example_run: tuple[OfflineRun, str]) -> None:
    _, printed = example_run
    logged = [line for line in printed.splitlines() if line.startswith("{'loss'")]  # the per-step lines
    assert len(logged) == STEPS and not any("rl_guards" in line for line in logged)  # TRL's line, without ours
    status = [line for line in printed.splitlines() if line.startswith("[rl_guards] step ")]
    # issue 38 #2: the first, then on a change or every console.status_every (10) steps; e1b9f62: one per step
    assert status == ["[rl_guards] step 1: ok", "[rl_guards] step 10: ok"], status


def test_a_healthy_12_step_run_prints_at_most_20_lines_of_rl_guards(example_run: tuple[OfflineRun, str]) -> None:
    """Issue 38 #2: e1b9f62 printed ~100 lines besides TRL's log dicts (9 preflight info rows, the group-size table,
    rendered prompts, a status line per step). What remains: one preflight line, the status lines, the end-of-run
    table and the example's own closing lines."""
    _, printed = example_run
    ours = [line for line in printed.splitlines() if line.strip() and not line.startswith("{'")]
    assert len(ours) <= 20, "\n".join(ours)
    [preflight] = [line for line in ours if "preflight" in line]
    assert preflight.startswith("[rl_guards] preflight: 0 blocking, 0 warning, 9 info; full report: ")
    assert preflight.split("full report: ")[1].endswith("preflight.txt")


def test_a_stop_leaves_an_alert_the_finding_and_the_failing_batch_in_wandb(
    make_grpo_trainer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    trainer = make_grpo_trainer(max_steps=4, report_to="wandb", run_name="stopped")
    original = trainer._generate_and_score_completions

    def unmask_after_eos_at_step_2(inputs: Any) -> Any:
        output = original(inputs)
        if trainer.state.global_step == 2:
            output["completion_mask"] = torch.ones_like(output["completion_mask"])
        return output

    trainer._generate_and_score_completions = unmask_after_eos_at_step_2
    rl_guards.install(trainer, {"masking": {"mode": "raise"}})
    with pytest.raises(MaskingError):
        trainer.train()
    import wandb

    wandb.finish()
    run = _offline(tmp_path)
    [alert] = [a for a in run.alerts if a["title"] == "rl_guards: masking/post_eos"]
    assert alert["level"] == "ERROR" and "post_eos" in alert["text"] and "⟨!" in alert["text"]  # decoded rows
    # generated at global step 2: TRL's step 3, the step it was to be trained in
    assert run.summary["rl_guards/findings/masking/post_eos"] == {"severity": "blocking", "count": 1, "first_step": 3}
    assert run.summary["rl_guards/stopped_by"] == "masking/post_eos at step 3"
    violating = [v for _, v in run.series("rl_guards/masking/violating_rows")]
    assert violating and violating[-1] > 0  # the failing batch's metrics, logged before the raise


def test_drift_probe_completions_reach_a_wandb_table(example_run: tuple[OfflineRun, str]) -> None:
    run, _ = example_run
    tables = [
        json.loads(p.read_text()) for p in run.table_files if p.name.startswith("probes_")
    ]  # rl_guards/drift/probes
    assert tables, [p.name for p in run.table_files]  # the baseline at train start, then each checkpoint
    assert tables[0]["columns"] == ["step", "task", "prompt", "completion"]
    assert {row[1] for t in tables for row in t["data"]} == {"arith", "echo"}
    assert sorted(t["data"][0][0] for t in tables) == [0, 6, 12]  # the baseline, then each checkpoint


def test_the_drift_probe_logs_no_rows_of_its_own(example_run: tuple[OfflineRun, str]) -> None:
    """TRL times each generation and reward call into W&B rows of their own: one per training step, none for the
    probes (at train start and at both checkpoints; on e1b9f62 they added 3 to the 8 steps' generations)."""
    run, _ = example_run
    generate = run.series("profiling/Time taken: GRPOTrainer.transformers.generate")
    assert len(generate) == len(run.series("profiling/Time taken: GRPOTrainer.compute_loss")) == STEPS


def test_a_dumps_table_sits_at_its_step_with_its_checkpoint(example_run: tuple[OfflineRun, str]) -> None:
    """Issue 38 #6: e1b9f62 logged each dump's table into the row W&B committed next, a TRL profiling row of the
    previous step (train/global_step K-1), and a checkpoint's dump (written at step K, tagged at the save right
    after) with an empty checkpoint column."""
    run, _ = example_run
    tables = {
        p.relative_to(run.run_dir / "files").as_posix(): json.loads(p.read_text())
        for p in run.table_files
        if p.name.startswith("rollouts_")
    }
    placed = {}
    for row in run.history:
        path = row.get("rl_guards/rollouts.path")
        if path is not None:
            table = tables[path]
            columns = table["columns"]
            [step] = {r[columns.index("step")] for r in table["data"]}
            checkpoints = {r[columns.index("checkpoint")] for r in table["data"]}
            placed[step] = (row["train/global_step"], checkpoints)
    assert sorted(placed) == [1, 3, 6, 9, 12]  # every_steps 3 (the first batch too), saves at 6 and 12
    assert all(at == step for step, (at, _) in placed.items()), placed  # each table at its own step
    assert placed[6][1] == {6} and placed[12][1] == {12} and placed[3][1] == {None}, placed


def test_the_example_is_silent(example_run: tuple[OfflineRun, str]) -> None:
    """Issue 20: the main job is a healthy run: no W&B alert, no finding in the summary, every status line ok."""
    run, printed = example_run
    assert run.alerts == [], run.alerts
    assert not any(k.startswith("rl_guards/findings/") for k in run.summary)
    status = [line for line in printed.splitlines() if line.startswith("[rl_guards] step ")]
    assert status and all(line.endswith(": ok") for line in status), status
    assert "rl_guards: no findings." in printed
    assert "[rl_guards] preflight: 0 blocking, 0 warning," in printed  # the preflight line
    assert "\nprobes: " in printed  # the run summary says what the probes covered
