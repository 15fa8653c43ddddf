"""Issue 40, class 1: a task cut in every row of a short run is reported at once; weak evidence still waits.

The rule (:class:`~rl_guards.guards.truncation.TruncationGuard`): the window's share judged once it has
``truncation.min_rows`` rows, or, from the first batch on, the prompts all of whose completions were cut, too many
for a share of ``truncation.max_rate`` (binomial tail below ``truncation.early_alpha``).
"""

from __future__ import annotations

from typing import Any

import pytest

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.evidence import binomial_tail
from rl_guards.core.truncation import all_cut_evidence, truncation_by_task
from rl_guards.guards.base import GuardSession
from rl_guards.guards.truncation import TruncationGuard


@pytest.mark.parametrize(
    ("hits", "total", "rate", "expected"),
    [
        (0, 5, 0.1, 1.0),
        (1, 1, 0.1, 0.1),
        (4, 4, 0.1, 1e-4),
        (6, 6, 0.1, 1e-6),
        (1, 6, 0.1, 1 - 0.9**6),
        (2, 4, 0.1, 1 - 0.9**4 - 4 * 0.1 * 0.9**3),
        (3, 2, 0.1, 0.0),
        (2, 5, 0.0, 0.0),
        (2, 5, 1.0, 1.0),
    ],
)
def test_binomial_tail(hits: int, total: int, rate: float, expected: float) -> None:
    assert binomial_tail(hits, total, rate) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("cut_groups", "groups", "reported"),
    [
        (6, 6, True),  # 24 of 24 rows in one step (G=4): every prompt cut whole
        (4, 4, True),  # a debug run of 2 prompts per step, at its second step
        (5, 6, True),
        (3, 3, False),  # p = 1e-3: not below it
        (2, 2, False),  # one step of 2 prompts: waits
        (1, 6, False),  # one prompt cut whole among six
        (2, 8, False),
    ],
)
def test_prompts_cut_whole_at_max_rate_0_1(cut_groups: int, groups: int, reported: bool) -> None:
    assert (all_cut_evidence(cut_groups, groups, 0.1) < 0.001) is reported


def _batch(cut: list[bool], g: int = 4, step: int = 1, task: str = "math") -> RolloutBatch:
    n = len(cut)
    return RolloutBatch(
        step=step,
        mode="train",
        num_generations=g,
        reward_names=["r"],
        reward_weights=[1.0],
        rewards=[[float(i % 2)] for i in range(n)],
        advantages=[0.0] * n,
        tasks=[task] * n,
        completions=[f"completion {i} that goes on and on" for i in range(n)],
        completion_ids=[[1] * 16 if c else [1, 2, 99] for c in cut],
        prompt_ids=[[1, 2]] * n,
        truncated=cut,
        thinking=[None] * n,
        max_completion_length=16,
    )


def test_groups_cut_whole_are_counted_per_task() -> None:
    cut = [True] * 4 + [True, False, True, True] + [False] * 4
    batch = _batch(cut)
    batch.tasks = ["math"] * 8 + ["code"] * 4
    stats = truncation_by_task(batch)
    assert (stats["math"].groups, stats["math"].cut_groups, stats["math"].truncated) == (2, 1, 7)
    assert (stats["code"].groups, stats["code"].cut_groups) == (1, 0)


def _first_finding(batches: list[RolloutBatch], **config: float) -> int | None:
    guard = TruncationGuard(GuardsConfig.from_dict({"truncation": {"mode": "warn", **config}}))
    session = GuardSession()
    for batch in batches:
        guard.on_batch(batch, session.reporter(guard.name, guard.config, batch.step))
    steps = [f.step for f in session.findings if f.kind == "truncation_rate"]
    return steps[0] if steps else None


def _spread(cut: int, rows: int = 24, g: int = 4) -> list[bool]:
    """``cut`` of ``rows`` truncated, one per group in turn (no prompt cut whole until every group has g-1)."""
    order = sorted(range(rows), key=lambda i: (i % g, i))[:cut]
    return [i in order for i in range(rows)]


@pytest.mark.parametrize(
    ("name", "batches", "first"),
    [
        ("24 of 24 in one step: at once", [[True] * 24], 1),
        ("2 prompts a step, all cut: the second step", [[True] * 8] * 3, 2),
        ("3 of 24, spread: waits, then not beyond noise", [_spread(3)] * 3, None),
        # the healthy corpus's raw-prompt run: 19 of 24 rows over three steps, one prompt cut whole
        (
            "19 of 24, one prompt whole: waits for the window",
            [[True, True, True, False, True, True, True, False], [True] * 4 + [True, True, True, False],
             [True, True, True, False, False, True, True, True]],
            None,
        ),
        ("the same share kept up: the window's rows decide", [_spread(6, 8)] * 4, 4),
        ("half the rows, spread: the window", [_spread(12)] * 2, 2),
    ],
)  # fmt: skip
def test_overwhelming_evidence_does_not_wait_for_the_window(
    name: str, batches: list[list[bool]], first: int | None
) -> None:
    made = [_batch(cut, step=k + 1) for k, cut in enumerate(batches)]
    assert _first_finding(made) == first, name


def test_message_names_the_prompts_cut_whole() -> None:
    guard = TruncationGuard(GuardsConfig.from_dict({"truncation": {"mode": "warn"}}))
    session = GuardSession()
    guard.on_batch(_batch([True] * 24), session.reporter(guard.name, guard.config, 1))
    session.settle()
    [finding] = session.findings
    assert "24/24 truncated over its last 1 batch(es)" in finding.message
    assert "6 of its 6 prompts had every completion cut" in finding.message


def test_state_round_trip_keeps_the_group_counts_and_reads_an_older_state() -> None:
    config = GuardsConfig.from_dict({"truncation": {"mode": "warn"}})
    guard = TruncationGuard(config)
    session = GuardSession()
    guard.on_batch(_batch([True] * 8), session.reporter(guard.name, guard.config, 1))
    restored = TruncationGuard(config)
    restored.load_state_dict(guard.state_dict())
    assert restored.windows == guard.windows == {"train/math": guard.windows["train/math"]}
    assert list(restored.windows["train/math"]) == [(8, 8, 2, 2)]
    session = GuardSession()
    restored.on_batch(_batch([True] * 8, step=2), session.reporter(guard.name, guard.config, 2))
    assert [f.kind for f in session.findings] == ["truncation_rate"]  # 4 of 4 prompts across the resume
    old = TruncationGuard(config)
    old.load_state_dict({"windows": {"train/math": [[8, 2]]}})
    assert list(old.windows["train/math"]) == [(8, 2, 0, 0)]


@pytest.mark.slow
@pytest.mark.parametrize("cap", [5, 48])
def test_grpo_debug_run_hears_of_a_task_cut_in_every_row(make_grpo_trainer: Any, cap: int) -> None:
    """Two steps of 8 prompts x 2: the arith rows think (6 tokens or more), the echo rows do not; at a cap of 5 every
    arith completion is cut, far fewer rows than truncation.min_rows in the run; at 48 none is."""
    import rl_guards
    from rl_guards.testing import make_dataset
    from rl_guards.trl.thinking_mix import honour_thinking_column

    data = make_dataset(16, thinking=True).map(lambda row: {"enable_thinking": row["task"] == "arith"})
    trainer = make_grpo_trainer(
        train_dataset=data,
        per_device_train_batch_size=16,
        num_generations=2,
        max_completion_length=cap,
        chat_template_kwargs={"enable_thinking": True},
        max_steps=2,
    )
    run = rl_guards.install(trainer, {"truncation": {"mode": "log"}}, guards=[TruncationGuard])
    honour_thinking_column(trainer)
    trainer.train()
    kinds = [f.kind for f in run.findings]
    if cap == 48:
        assert kinds == [], run.summary()
        return
    assert kinds == ["truncation_rate"], run.summary()
    message = run.findings[0].message
    assert "task 'arith'" in message and "prompts had every completion cut" in message
    assert "task 'echo'" not in message
