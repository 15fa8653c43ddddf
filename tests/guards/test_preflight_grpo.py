"""Preflight on a real GRPOTrainer (tiny fixture): stop before step 0, W&B panel, and the LR sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

import rl_guards
from rl_guards.errors import PreflightError
from rl_guards.guards.preflight import WANDB_REPORT_KEY, WANDB_TABLE_KEY, PreflightGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.sweeps.lr_sweep import reward_curves, run_lr_sweep
from rl_guards.testing import make_dataset, tiny_grpo_config
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty
from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

THINK_OFF = {"enable_thinking": False}


def _trainer(tiny: Any, args: Any, eval_dataset: Any = None, reward_funcs: list[Any] | None = None) -> Any:
    from trl import GRPOTrainer

    return GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=reward_funcs or [arith_correct, echo_match],
        args=args,
        train_dataset=make_dataset(),
        eval_dataset=eval_dataset,
    )


def _thinking_eval(tiny: Any) -> Dataset:
    """Eval prompts pre-rendered by a harness that left thinking on, while training renders it off."""
    train = make_dataset(n_per_task=2)
    prompts = [
        tiny.tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in train["prompt"]
    ]
    return Dataset.from_dict({"prompt": prompts, "task": train["task"], "answer": train["answer"]})


@pytest.mark.slow
def test_blocking_finding_stops_before_step_0_in_raise_mode(tiny: Any, tmp_path: Path) -> None:
    args = tiny_grpo_config(tmp_path / "out", max_steps=2, chat_template_kwargs=THINK_OFF)
    trainer = _trainer(tiny, args, eval_dataset=_thinking_eval(tiny))
    rl_guards.install(trainer, {"preflight": {"mode": "raise"}}, guards=[PreflightGuard])
    with pytest.raises(PreflightError, match="eval_template_mismatch") as info:
        trainer.train()
    assert info.value.step == 0 and trainer.state.global_step == 0
    # The error shows the rendered difference, rendered through the trainer's own prompt path.
    assert "-<think>↵" in str(info.value)


def _warn_mode_run(tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Path]:
    """One training step in warn mode with an offline W&B run; returns (trainer, guard run, offline run dir)."""
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_PROJECT", "preflight-test")
    (tmp_path / "wandb").mkdir()
    args = tiny_grpo_config(
        tmp_path / "out", max_steps=1, chat_template_kwargs=THINK_OFF, report_to="wandb", run_name="preflight"
    )
    trainer = _trainer(tiny, args, eval_dataset=_thinking_eval(tiny))
    run = rl_guards.install(trainer, {"preflight": {"mode": "warn"}}, guards=[PreflightGuard])
    with shows("eval_template_mismatch"):
        trainer.train()
    import wandb

    wandb.finish()
    [offline] = find_offline_runs(tmp_path / "wandb")
    return trainer, run, offline


@pytest.mark.slow
def test_warn_mode_trains_and_logs_the_wandb_panel(tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer, run, offline = _warn_mode_run(tiny, tmp_path, monkeypatch)
    assert trainer.state.global_step == 1
    back = read_offline_run(offline)
    report = run.guard("preflight").last_report
    assert back.summary["rl_guards/preflight/blocking"] == 1
    assert back.summary["rl_guards/preflight/warnings"] == len(report.warnings)
    # The reader flattens media records: <key>._type, <key>.path, ...
    assert {f"{WANDB_TABLE_KEY}._type", f"{WANDB_REPORT_KEY}._type"} <= back.keys()
    [table_file] = [p for p in back.table_files if "preflight" in str(p)]
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["severity", "topic", "code", "message", "fix"]
    assert table["data"][0][:3] == ["blocking", "template", "eval_template_mismatch"]
    assert len(table["data"]) == len(report.findings)
    html_files = list((offline / "files").rglob("*.html"))
    assert any("eval_template_mismatch" in p.read_text() for p in html_files)


@pytest.mark.slow
def test_finding_counts_reach_log_history(tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer, run, offline = _warn_mode_run(tiny, tmp_path, monkeypatch)
    history = [row for row in trainer.state.log_history if "rl_guards/preflight/blocking" in row]
    assert [row["rl_guards/preflight/blocking"] for row in history] == [1.0]
    report = run.guard("preflight").last_report
    # a zero count stays silent (the default metric set): logged once non-zero
    assert history[0].get("rl_guards/preflight/warnings", 0.0) == float(len(report.warnings))
    # In W&B under its own name (the rl_guards section), not TRL's train/ section.
    assert [v for _, v in read_offline_run(offline).series("rl_guards/preflight/blocking")] == [1.0]


def test_reward_curves_prefer_per_task_keys() -> None:
    history = [
        {"step": 1, "reward": 0.5, "rl_guards_task/arith/reward_mean": 0.0, "rl_guards_task/echo/reward_mean": 1.0},
        {"step": 2, "reward": 0.25, "rl_guards_task/arith/reward_mean": 0.5},
        {"step": 2, "train_runtime": 3.0},
    ]
    assert reward_curves(history) == {"arith": [[1.0, 0.0], [2.0, 0.5]], "echo": [[1.0, 1.0]]}
    assert reward_curves([{"step": 1, "reward": 0.5}, {"step": 2, "reward": float("nan")}]) == {"all": [[1.0, 0.5]]}


@pytest.mark.slow
def test_lr_sweep_on_the_tiny_fixture(tiny: Any, tmp_path: Path) -> None:
    groups_seen: list[str | None] = []
    configs: list[tuple[float, str, str]] = []

    def make_trainer(args: Any) -> Any:
        groups_seen.append(os.environ.get("WANDB_RUN_GROUP"))
        configs.append((args.learning_rate, str(args.lr_scheduler_type), args.run_name))
        trainer = _trainer(tiny, args, reward_funcs=[arith_correct, echo_match, length_penalty])
        rl_guards.install(trainer, {}, guards=[TaskRewardMonitor])  # per-task reward_mean curves
        return trainer

    base = tiny_grpo_config(tmp_path / "unused", max_steps=2)
    result = run_lr_sweep(
        make_trainer, base, [1e-6, 1e-3], schedulers=("constant",), output_dir=tmp_path / "sweep", print_summary=False
    )
    assert configs == [(1e-6, "constant", "sweep-lr1e-06-constant"), (1e-3, "constant", "sweep-lr0.001-constant")]
    assert groups_seen == ["sweep", "sweep"] and "WANDB_RUN_GROUP" not in os.environ
    assert base.learning_rate == 1e-6 and str(base.output_dir).endswith("unused")  # the base args are untouched
    assert [r.steps for r in result.runs] == [2, 2] and all(r.error is None for r in result.runs)
    # Per task (not TRL's pooled reward); one point per logged step for each task present in that step's batch.
    assert set(result.tasks) <= {"arith", "echo"} and result.tasks
    assert all(r.curves and {s for c in r.curves.values() for s, _ in c} <= {1.0, 2.0} for r in result.runs)
    summary = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    assert [r["name"] for r in summary["runs"]] == [c[2] for c in configs]
    table = (tmp_path / "sweep" / "sweep_summary.md").read_text().splitlines()
    assert table[2].startswith("| run | lr | scheduler | steps |") and len(table) == 6
    assert (tmp_path / "sweep" / "sweep-lr0.001-constant").is_dir()


def test_a_failing_sweep_cell_is_recorded(tmp_path: Path) -> None:
    def make_trainer(args: Any) -> Any:
        raise RuntimeError(f"cannot build at lr {args.learning_rate:g}")

    base = tiny_grpo_config(tmp_path / "unused")
    result = run_lr_sweep(
        make_trainer, base, [1e-6], schedulers=("linear",), output_dir=tmp_path / "s", print_summary=False
    )
    [cell] = result.runs
    assert cell.error == "RuntimeError: cannot build at lr 1e-06" and cell.steps == 0
    assert "failed: RuntimeError" in result.markdown()
    with pytest.raises(ValueError, match="learning_rates is empty"):
        run_lr_sweep(make_trainer, base, [], output_dir=tmp_path / "s")


@pytest.mark.slow
def test_plain_text_prompts_without_a_chat_template_train_with_a_note(make_grpo_trainer: Any, tiny: Any) -> None:
    """Issue 41 item 7: TRL's standard plain-text format on a tokenizer with no chat template (a base model)."""
    from rl_guards.guards.template import DoubleThinkGuard

    tokenizer = tiny.load_tokenizer()
    tokenizer.chat_template = None
    rows = make_dataset()
    strings = Dataset.from_dict({"prompt": [p[-1]["content"] for p in rows["prompt"]], "task": rows["task"],
                                 "answer": rows["answer"]})  # fmt: skip
    trainer = make_grpo_trainer(processing_class=tokenizer, train_dataset=strings, max_steps=1)
    run = rl_guards.install(trainer, guards=[PreflightGuard, DoubleThinkGuard])
    trainer.train()
    kinds = {(f.guard, f.kind) for f in run.session.findings}
    assert ("preflight", "internal_error") not in kinds, run.summary()  # e1b9f62: ValueError, no chat template
    assert ("template", "render_failed") not in kinds, run.summary()  # e1b9f62: "probe render failed"
    assert "prompts are plain text" in run.session.notes[("template", "no_chat_template")]
    report = run.guard("preflight").report_path  # the whole report is written next to the findings
    assert report is not None and "[plain_text_prompts] prompts are plain text" in report.read_text()
