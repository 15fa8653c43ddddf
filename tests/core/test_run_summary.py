"""The end-of-run per-task table."""

from __future__ import annotations

from rl_guards.core.run_summary import task_curves, task_summary_text


def test_curves_follow_logging_order_and_skip_missing() -> None:
    history = [
        {"loss": 1.0, "rl_guards_task/math/reward_mean": 0.1, "rl_guards_task/code/reward_mean": 0.5},
        {"rl_guards_task/math/reward_mean": float("nan")},
        {"rl_guards_task/math/reward_mean": 0.4, "rl_guards_task/math/think/anomalous_rate": 0.25},
        {"train_runtime": 3.0},
    ]
    curves = task_curves(history)
    assert curves == {
        "math": {"reward_mean": [0.1, 0.4], "think/anomalous_rate": [0.25]},
        "code": {"reward_mean": [0.5]},
    }
    text = task_summary_text(history)
    lines = text.splitlines()
    assert lines[0].startswith("per task")
    code_line = next(line for line in lines if line.strip().startswith("code"))
    math_line = next(line for line in lines if line.strip().startswith("math"))
    assert "0.500 -> 0.500" in code_line
    assert "0.100 -> 0.400" in math_line and "0.250 -> 0.250" in math_line


def test_no_task_metrics_no_table() -> None:
    assert task_summary_text([{"loss": 1.0}]) == ""
