"""What used to be only a metric or an info row now warns (issue 15): a thinking mix off its target, most groups of
a task dead over a window, a missing task column with task-like columns, preflight warnings."""

from __future__ import annotations

from typing import Any

import pytest
from test_tasks_guards import kinds, make_batch, run
from test_think_tags_guard import OK, PLAIN
from test_think_tags_guard import make_batch as think_batch

import rl_guards
from rl_guards.config import GuardsConfig
from rl_guards.core.task_labels import task_column_candidates
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.preflight import PreflightGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows


def _mix(thinking_share: float, rows: int, task: str = "a") -> list[tuple[str, bool, bool, str]]:
    k = round(thinking_share * rows)
    return [(OK, True, False, task)] * k + [(PLAIN, False, False, task)] * (rows - k)


def _mix_session(batches: list[Any], target: float | None) -> GuardSession:
    config = GuardsConfig.from_dict({"think_tags": {"mode": "log", "target_thinking_share": target}})
    guard = ThinkTagsGuard(config)
    guard.setup(RunContext())
    session = GuardSession()
    for batch in batches:
        guard.on_batch(batch, session.reporter(guard.name, guard.config, batch.step))
    restored = ThinkTagsGuard(config)
    restored.load_state_dict(guard.state_dict())
    assert restored.mix == guard.mix
    return session


@pytest.mark.parametrize(
    ("rows", "target", "warned"),
    [
        (_mix(0.9, 16) * 4, 0.5, True),  # 90/10 against a 50/50 target
        (_mix(0.5, 16) * 4, 0.5, False),
        (_mix(0.9, 16) * 4, None, False),  # no target: only the metric
        (_mix(0.9, 4), 0.5, False),  # 4 rows: within sampling noise
        (_mix(1.0, 16, "a") * 2 + _mix(0.0, 16, "b") * 2, 0.5, True),  # 50/50 overall, 100/0 per task
    ],
    ids=["90-10", "on-target", "no-target", "too-few-rows", "per-task-100-0"],
)
def test_thinking_mix_target(rows: list[Any], target: float | None, warned: bool) -> None:
    session = _mix_session([think_batch(rows)], target)
    found = [f for f in session.findings if f.kind == "thinking_mix"]
    assert bool(found) == warned
    if found and len({r[3] for r in rows}) > 1:
        assert "task 'a': 100% thinking" in found[0].message and "task 'b': 0% thinking" in found[0].message


def _dead_batch(step: int, dead_groups: int, groups: int = 5) -> Any:
    rewards: list[list[float | None]] = []
    for g in range(groups):
        rewards += [[1.0], [1.0]] if g < dead_groups else [[1.0], [0.0]]
    return make_batch(["t"] * (2 * groups), rewards, step=step, names=["r"])


def test_dead_share_over_a_window_warns_once_with_advice() -> None:
    config = {"dead_groups": {"warn_after_steps": 3, "max_dead_share": 0.8}}
    batches = [_dead_batch(i, 5 if i % 2 else 4) for i in range(6)]  # 90 % dead, never a fully dead batch streak
    guard, session = run(DeadGroupGuard, batches, config)
    found = [f for f in session.findings if f.kind == "dead_share"]
    assert len(found) == 1 and found[0].step == 2  # first full window
    assert "task 't'" in found[0].message and "G=2" in found[0].message and "num_generations" in found[0].message
    assert "dead_task" not in kinds(session)
    healthy = [_dead_batch(i, 1) for i in range(6)]
    assert "dead_share" not in kinds(run(DeadGroupGuard, healthy, config)[1])
    restored = DeadGroupGuard(guard.guards_config)
    restored.load_state_dict(guard.state_dict())
    assert restored.dead_windows == guard.dead_windows and restored.crowded == guard.crowded


def test_task_column_candidates() -> None:
    rows = [{"category": c, "prompt": f"p{i}", "id": f"id{i}", "flag": "x"} for i, c in enumerate("abcab" * 4)]
    assert task_column_candidates(rows, ["prompt", "id", "flag", "category"]) == [("category", ["a", "b", "c"])]


@pytest.mark.slow
def test_missing_task_column_names_the_task_like_column(make_grpo_trainer: Any) -> None:
    data = make_dataset().rename_column("task", "category")
    trainer = make_grpo_trainer(train_dataset=data, max_steps=1, reward_funcs=[_always_zero])
    run_ = rl_guards.install(trainer, guards=[TaskRewardMonitor])
    with shows("tasks.task_column: category"):
        trainer.train()
    assert [f.kind for f in run_.findings] == ["task_column_missing"]
    assert "'arith', 'echo'" in run_.findings[0].message


def _always_zero(completions: list[Any], **kwargs: Any) -> list[float]:
    return [0.0] * len(completions)


@pytest.mark.slow
def test_preflight_warnings_are_warned(make_grpo_trainer: Any) -> None:
    # a warm-up that transformers' constant schedule ignores: a misconfiguration the preflight warns about
    trainer = make_grpo_trainer(max_steps=1, lr_scheduler_type="constant", warmup_steps=2)
    run_ = rl_guards.install(trainer, guards=[PreflightGuard])
    with shows("preflight"):
        trainer.train()
    warned = [f for f in run_.findings if f.severity == "warning"]
    assert warned and all(f.guard == "preflight" for f in warned)
