"""Reward sanity without a cases file, on a real GRPOTrainer: right vs wrong answers from the dataset's reference
column at train start; an inverted or constant reward is caught, clean rewards pass, a dataset without a reference
says once that the check was skipped."""

from __future__ import annotations

from typing import Any

import pytest

import rl_guards
from rl_guards.console import capture
from rl_guards.errors import RewardSanityError
from rl_guards.guards.reward_sanity import RewardSanityGuard
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

pytestmark = pytest.mark.slow  # every test here builds a real GRPOTrainer on the tiny model


def inverted(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    """Planted: 1 - correct (a flipped sign)."""
    scores = arith_correct(completions, answer, task)
    return [None if s is None else 1.0 - s for s in scores]


def constant(completions: list[Any], **kwargs: Any) -> list[float]:
    """Planted: pays every completion the same."""
    return [1.0] * len(completions)


def constant_named(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: takes the answer column and ignores it."""
    return [0.5] * len(completions)


def _start(make_grpo_trainer: Any, funcs: list[Any], data: Any = None, **config: Any) -> Any:
    trainer = make_grpo_trainer(reward_funcs=funcs, train_dataset=data or make_dataset(), max_steps=1)
    run = rl_guards.install(trainer, {"reward_sanity": config} if config else None, guards=[RewardSanityGuard])
    trainer.train()
    return run


def test_an_inverted_reward_stops_before_step_0(make_grpo_trainer: Any) -> None:
    with pytest.raises(RewardSanityError, match="inverted pays a wrong answer more") as err:
        _start(make_grpo_trainer, [inverted, echo_match])
    assert "task 'arith'" in str(err.value) and "column 'answer'" in str(err.value)


def test_a_constant_reward_that_takes_the_answer_column_is_an_error(make_grpo_trainer: Any) -> None:
    with pytest.raises(RewardSanityError, match="never pays the right answer more"):
        _start(make_grpo_trainer, [constant_named])


def test_a_constant_reward_that_ignores_every_column_is_warned(make_grpo_trainer: Any) -> None:
    with shows("never paid the 'answer' answer more"):
        run = _start(make_grpo_trainer, [constant])
    assert {f.kind for f in run.findings} == {"total_blind"}


def test_clean_rewards_pass(make_grpo_trainer: Any) -> None:
    run = _start(make_grpo_trainer, [arith_correct, echo_match, length_penalty], shaping=["length_penalty"])
    assert run.findings == [], run.summary()
    assert "4 row(s)" in run.session.notes[("reward_sanity", "reward_sanity_ok")]  # 2 rows per task


def test_trl_accuracy_reward_passes(make_grpo_trainer: Any) -> None:
    from trl.rewards import accuracy_reward, reasoning_accuracy_reward, think_format_reward

    data = make_dataset(tasks=("arith",)).map(lambda row: {"solution": f"${row['answer']}$"})
    funcs = [accuracy_reward, reasoning_accuracy_reward, think_format_reward]
    run = _start(make_grpo_trainer, funcs, data, shaping=["think_format_reward"])
    assert run.findings == [], run.summary()
    # the column the functions take by name, not 'answer'
    assert "'solution'" in run.session.notes[("reward_sanity", "reward_sanity_ok")]


def test_no_reference_column_says_once_how_to_enable_it(make_grpo_trainer: Any) -> None:
    data = make_dataset().remove_columns(["answer"])
    with capture() as record:
        run = _start(make_grpo_trainer, [constant], data)
    assert not [m for m in record.messages if "skipped" in m]  # a note, not a warning (issue 20 #8)
    assert run.findings == []
    assert "reward_sanity.cases_file" in run.session.notes[("reward_sanity", "skipped")]
