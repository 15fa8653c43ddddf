"""A reward function that raises on some rows, on a real GRPOTrainer: the rows are found and shown; warn keeps the
run with those rows scored None, raise stops it with the rows (and the evidence dump) on every rank."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.errors import RewardFunctionError
from rl_guards.rewards.row_errors import RowErrorLog, catch_row_errors
from rl_guards.rollouts.store import read_dump_metadata
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import arith_correct, completion_text, echo_match


def strict_int(completions: list[Any], task: list[str], **kwargs: Any) -> list[float | None]:
    """Planted: raises on echo rows (not numbers), the malformed rows for it; unshuffled, every batch has two."""
    out: list[float | None] = []
    for c, t in zip(completions, task, strict=True):
        if t == "echo":
            raise ValueError(f"cannot parse {completion_text(c)[:10]!r} as a number")
        out.append(0.0)
    return out


def always_raises(completions: list[Any], **kwargs: Any) -> list[float]:
    raise KeyError("missing column 'solution'")


def _trainer(make_grpo_trainer: Any, funcs: list[Any], **overrides: Any) -> Any:
    return make_grpo_trainer(
        reward_funcs=funcs, train_dataset=make_dataset(), max_steps=2, shuffle_dataset=False, **overrides
    )


@pytest.mark.slow
def test_warn_keeps_the_run_and_scores_the_rows_none(make_grpo_trainer: Any) -> None:
    trainer = _trainer(make_grpo_trainer, [strict_int, arith_correct, echo_match])
    run = rl_guards.install(trainer)
    with shows("strict_int"):
        trainer.train()
    finding = next(f for f in run.findings if f.kind == "raised:strict_int")
    assert "raised on 4 of 8 rows" in finding.message and "cannot parse" in finding.message
    assert "completion" in finding.message and "task 'echo'" in finding.message
    assert "test_reward_errors.py" in finding.message  # where it raised
    assert run.session.counts[("reward_errors", "raised:strict_int")] == 2  # both batches
    logged = [h for h in trainer.state.log_history if "rl_guards/reward_errors/rows" in h]
    assert logged and logged[0]["rl_guards/reward_errors/rows"] == 4
    # TRL saw None for the echo rows: this function's mean covers the arith rows only
    assert all(h.get("rewards/strict_int/mean", 0.0) == 0.0 for h in trainer.state.log_history)


@pytest.mark.slow
def test_raise_stops_with_the_rows_and_saves_the_batch(make_grpo_trainer: Any, tmp_path: Path) -> None:
    trainer = _trainer(make_grpo_trainer, [strict_int, arith_correct, echo_match], output_dir=tmp_path / "out")
    rl_guards.install(trainer, {"reward_errors": {"mode": "raise"}})
    with pytest.raises(RewardFunctionError, match="strict_int") as err:
        trainer.train()
    assert "cannot parse" in str(err.value) and "row " in str(err.value)
    assert trainer.state.global_step == 0
    dumps = sorted((tmp_path / "out" / "rl_guards" / "rollouts").glob("step_*.parquet"))
    assert [read_dump_metadata(p)["reason"] for p in dumps] == ["stopped"]  # the failing batch, saved as evidence


@pytest.mark.slow
def test_a_function_failing_on_every_row_is_named(make_grpo_trainer: Any) -> None:
    trainer = _trainer(make_grpo_trainer, [always_raises, arith_correct, echo_match])
    run = rl_guards.install(trainer, {"reward_errors": {"mode": "log"}})
    trainer.train()
    finding = next(f for f in run.findings if f.kind == "raised:always_raises")
    assert "raised on 8 of 8 rows" in finding.message and "missing column 'solution'" in finding.message
    assert "every row" in finding.message


def test_wrapper_keeps_name_attributes_and_async() -> None:
    log = RowErrorLog()

    async def judge(completions: list[str], **kwargs: Any) -> list[float]:
        if "bad" in completions:
            raise ValueError("bad row")
        return [1.0] * len(completions)

    wrapped = catch_row_errors(judge, 0, log)
    assert wrapped.__name__ == "judge" and asyncio.iscoroutinefunction(type(wrapped).__call__)
    scores = asyncio.run(wrapped(completions=["ok", "bad", "ok"], answer=["1", "2", "3"], log_extra=print))
    assert scores == [1.0, None, 1.0]
    errors, whole = log.take()
    assert [e.row for e in errors[0]] == [1] and not whole

    class Scorer:
        weight = 3

        def __call__(self, completions: list[str], **kwargs: Any) -> list[float]:
            return [float(len(c)) for c in completions]

    plain = catch_row_errors(Scorer(), 1, log)
    assert plain.weight == 3 and plain(completions=["ab"]) == [2.0]


def picky_arith(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Routed to arith; raises on the rows of one prompt (a parser that fails on some rows of its task)."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        if a == "6":  # the first prompt of the unshuffled dataset: step 1's arith group
            raise ValueError(f"cannot read reference {a!r}")
        out.append(float(completion_text(c).strip() == a))
    return out


@pytest.mark.slow
def test_rows_a_routed_function_raised_on_belong_to_reward_errors_not_routing(make_grpo_trainer: Any) -> None:
    """Issue 20 #4: reward_errors scores them None and training goes on; routing (default raise) must not stop the
    run on exactly those rows. One verdict per row."""
    from rl_guards.rewards.routing import route

    trainer = _trainer(make_grpo_trainer, route({"arith": [picky_arith], "echo": [echo_match]}))
    run = rl_guards.install(trainer)  # default config: routing raise, reward_errors warn
    with shows("picky_arith"):
        trainer.train()
    assert trainer.state.global_step == 2
    kinds = {(f.guard, f.kind) for f in run.findings}
    assert any(g == "reward_errors" and k.startswith("raised:") for g, k in kinds), run.summary()
    assert not any(g == "routing" for g, _ in kinds), run.summary()
