"""blind_judge: what the judge sees, names, pickling, async judges, leak audit, and a real GRPOTrainer run."""

from __future__ import annotations

import asyncio
import functools
import pickle
import warnings
from typing import Any

import pytest

from rl_guards.console import capture
from rl_guards.core.think_markup import GEMMA4
from rl_guards.errors import ConfigError
from rl_guards.rewards.blind_judge import (
    LEAK_METRIC,
    AsyncBlindJudge,
    BlindJudge,
    blind_judge,
    check_judge_inputs,
    has_markup,
)
from rl_guards.testing.logs import shows

SEEN: list[Any] = []


def recording_judge(completions: list[Any], **kwargs: Any) -> list[float]:
    """Records what it was given; rewards the length of the text it saw."""
    SEEN.append({"completions": completions, **kwargs})
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]


async def async_judge(completions: list[Any], **kwargs: Any) -> list[float]:
    await asyncio.sleep(0)
    return recording_judge(completions, **kwargs)


class JudgeClass:
    __name__ = "class_judge"

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return recording_judge(completions, **kwargs)


def weighted_judge(completions: list[Any], scale: float = 1.0, **kwargs: Any) -> list[float]:
    return [scale * r for r in recording_judge(completions, **kwargs)]


# (id, completion given to the wrapper, row thinking, prompt_opened_thinking, what the judge sees)
CASES = [
    ("plain", "4", True, False, "4"),
    ("well_formed", "<think>secret</think>\n\n4", True, False, "4"),
    ("unclosed_hidden", "<think>secret", True, False, ""),
    ("stray_close", "secret</think>4", True, False, "4"),
    ("prompt_opened_ok", "secret</think>4", True, True, "4"),
    ("prompt_opened_unclosed", "secret secret", True, True, ""),
    ("prompt_opened_ignored_in_nonthinking", "plain answer", False, True, "plain answer"),
    ("two_blocks", "<think>a</think>x<think>b</think>y", True, False, "x\ny"),
    ("conversational", [{"role": "assistant", "content": "<think>secret</think>4"}], True, False, "4"),
    ("reasoning_field", [{"role": "assistant", "content": "4", "reasoning_content": "secret"}], True, False, "4"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_judge_sees_answer_only(case: tuple) -> None:
    _, completion, thinking, opened, expected = case
    SEEN.clear()
    judge = blind_judge(recording_judge)
    judge.set_prompt_opened(opened, False)
    rewards = judge(completions=[completion], prompts=["q"], completion_ids=[[1, 2]], enable_thinking=[thinking])
    seen = SEEN[-1]["completions"][0]
    text = seen if isinstance(seen, str) else seen[-1]["content"]
    assert text == expected
    assert "secret" not in str(seen)
    assert rewards == [float(len(expected))]
    assert SEEN[-1]["prompts"] == ["q"] and SEEN[-1]["completion_ids"] is None
    if not isinstance(seen, str):
        assert "reasoning_content" not in seen[-1] and seen[-1]["role"] == "assistant"


def test_tool_messages_untouched() -> None:
    SEEN.clear()
    completion = [
        {"role": "assistant", "content": "<think>plan</think>", "tool_calls": [{"name": "f"}]},
        {"role": "tool", "content": "<think> is literal here"},
        {"role": "assistant", "content": "<think>more</think>done"},
    ]
    with shows(None) as nothing_said:  # a tag quoted in a tool result is no leak
        blind_judge(recording_judge)(completions=[completion])
    assert not nothing_said.messages
    seen = SEEN[-1]["completions"][0]
    assert [m["content"] for m in seen] == ["", "<think> is literal here", "done"]
    assert seen[0]["tool_calls"] == [{"name": "f"}]


def test_names_kept() -> None:
    assert blind_judge(recording_judge).__name__ == "recording_judge"
    assert blind_judge(JudgeClass()).__name__ == "class_judge"
    assert blind_judge(functools.partial(weighted_judge, scale=2.0)).__name__ == "weighted_judge"
    assert blind_judge(recording_judge, check_only=True).__name__ == "recording_judge"


def test_pickle_round_trip() -> None:
    for fn in (recording_judge, JudgeClass(), functools.partial(weighted_judge, scale=2.0)):
        judge = blind_judge(fn, markup="gemma4")
        clone = pickle.loads(pickle.dumps(judge))
        assert clone.__name__ == judge.__name__ and clone.markup is not None
        assert clone(completions=["<|channel>thought\nx<channel|>42"]) == judge(
            completions=["<|channel>thought\nx<channel|>42"]
        )
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(blind_judge(lambda completions, **kw: [0.0]))  # the wrapped fn is not picklable


def test_async_judge() -> None:
    from rl_guards.rewards.callables import trl_awaits_async_objects

    if not trl_awaits_async_objects():  # TRL 1.13: the wrapper would be called without being awaited
        with pytest.raises(ConfigError, match=r"needs TRL >= 1\.14"):
            blind_judge(async_judge)
        return
    from trl.trainer.utils import is_async_callable

    SEEN.clear()
    judge = blind_judge(async_judge)
    assert isinstance(judge, AsyncBlindJudge) and is_async_callable(judge)
    assert not is_async_callable(blind_judge(recording_judge))
    assert asyncio.run(judge(completions=["<think>s</think>ab"])) == [2.0]
    assert SEEN[-1]["completions"] == ["ab"]


def test_check_only_passes_text_and_warns_once() -> None:
    SEEN.clear()
    logged: dict[str, list[float]] = {}
    judge = blind_judge(recording_judge, check_only=True)
    assert isinstance(judge, BlindJudge)
    completions = ["<think>s</think>4", "4", "<THINK>s</THINK>4", "5"]
    with capture() as caught:
        judge(completions=completions, log_metric=lambda k, v: logged.setdefault(k, []).append(v))
        judge(completions=completions, completion_ids=[[1]] * 4)
    assert SEEN[0]["completions"] == completions  # unchanged
    assert SEEN[1]["completion_ids"] == [[1]] * 4  # check_only passes ids through
    assert logged == {LEAK_METRIC: [0.5]}
    assert judge.leaks_seen == 4
    ours = caught.messages
    assert len(ours) == 1 and "recording_judge" in ours[0] and "2/4" in ours[0]


def test_stripping_mode_reports_residual_leaks() -> None:
    logged: dict[str, float] = {}
    judge = blind_judge(recording_judge)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        judge(completions=["<think>a</think>4", "<THINK>a</THINK>4"], log_metric=logged.__setitem__)
    assert logged == {LEAK_METRIC: 0.5}  # near-miss tags are not stripped, but they are counted


CHECK_CASES = [
    (["4", "five"], 0, ()),
    (["<think>a</think>4", "4"], 1, (0,)),
    (["4", "x </think"], 1, (1,)),
    (["< think>", "<thinking>", "ok"], 2, (0, 1)),
    ([[{"role": "assistant", "content": "4", "reasoning_content": "r"}]], 1, (0,)),
    ([[{"role": "assistant", "content": "<think>r</think>4"}], [{"role": "assistant", "content": "4"}]], 1, (0,)),
    ([[{"role": "tool", "content": "<think>"}, {"role": "assistant", "content": "4"}]], 0, ()),
    ([], 0, ()),
]


@pytest.mark.parametrize(("texts", "count", "rows"), CHECK_CASES)
def test_check_judge_inputs(texts: list[Any], count: int, rows: tuple[int, ...]) -> None:
    report = check_judge_inputs(texts)
    assert (report.with_markup, report.rows, report.total) == (count, rows, len(texts))
    assert report.ok == (count == 0)
    assert report.leak_rate == (count / len(texts) if texts else 0.0)


def test_has_markup_other_families() -> None:
    assert has_markup("<|channel>thought\nx<channel|>4", GEMMA4)
    assert not has_markup("<think>x</think>4", GEMMA4)
    assert check_judge_inputs(["<|channel|>analysis<|message|>x<|end|>"], "gptoss").with_markup == 1


def test_rejects_non_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        blind_judge("not a function")  # type: ignore[arg-type]


# ----- a real GRPOTrainer run -----------------------------------------------------------------------------------
testing = pytest.importorskip("rl_guards.testing")


def answer_length_judge(completions: list[Any], **kwargs: Any) -> list[float]:
    """A stand-in judge that fails loudly if it ever sees thinking markup."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    assert not any("<think>" in t or "</think>" in t for t in texts), texts
    return [float(len(t)) for t in texts]


@pytest.mark.slow
def test_blind_judge_in_real_grpo_run(make_grpo_trainer: Any) -> None:
    judge = blind_judge(answer_length_judge)
    trainer = make_grpo_trainer(
        reward_funcs=[testing.arith_correct, judge], train_dataset=testing.make_dataset(thinking=True), max_steps=2
    )
    assert trainer.reward_func_names == ["arith_correct", "answer_length_judge"]
    trainer.train()
    rows = [row for row in trainer.state.log_history if "rewards/answer_length_judge/mean" in row]
    assert len(rows) == 2
    assert all(LEAK_METRIC in row for row in rows)
