"""``rl_guards.reward_calls.tinker.TinkerCaller`` on the cookbook's own env and renderer, no loop: a text scores what
the env's ``step`` pays the tokens that write it; the cookbook's logtree and timing window never see a probe's step;
an async step, a stateful row, a hanging grader."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

from tinker_cookbook import renderers
from tinker_cookbook.rl.problem_env import ProblemEnv
from tinker_cookbook.tokenizer_utils import get_tokenizer
from tinker_cookbook.utils import logtree, trace

from rl_guards.reward_calls import CallStalled, Tracked, bounded
from rl_guards.reward_calls.tinker import StatefulEnv, TinkerCaller
from rl_guards.testing.data import Example
from rl_guards.testing.tinker_envs import TinyTaskEnv
from rl_guards.tinker.graders import GraderCall

EXAMPLE = Example("arith", "What is 3+4? Answer with the number.", "7", "3+4=7")


@pytest.fixture
def renderer(tiny: Any) -> Any:
    return renderers.get_renderer("qwen3", get_tokenizer(tiny.model_dir))


def _row(env: Any, **fields: Any) -> Any:
    return GraderCall(row=0, env=env, **fields).call_row()


def test_a_text_scores_what_the_envs_step_pays_its_tokens(renderer: Any) -> None:
    env = TinyTaskEnv(EXAMPLE, renderer, grader="last_number")
    row = _row(env, text="7", prompt_ids=[1, 2])
    assert (row.prompt, row.reference, row.columns, row.original, row.prompt_ids) == (
        EXAMPLE.question, "7", {"answer": "7"}, "7", [1, 2],
    )  # fmt: skip
    texts = ["7", "The answer is 7.", "8", "<think>\n7\n</think>\n\n8", "<think>\n8\n</think>\n\n7", ""]
    # format_coef * (format - 1) + correct: every text ends with the renderer's stop token (format 1); the thinking
    # is parsed out by the renderer, as the env's own step does
    assert TinkerCaller()([row] * len(texts), texts) == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    tokens = TinkerCaller().action(env, "<think>\n7\n</think>\n\n8")
    message, termination = renderer.parse_response(tokens)
    assert termination.is_stop_sequence and renderers.get_text_content(message) == "8"


def test_a_step_that_grades_the_decoded_tokens_reads_the_thinking(renderer: Any) -> None:
    env = TinyTaskEnv(EXAMPLE, renderer, grader="first_number", raw_text=True)
    stock = TinyTaskEnv(EXAMPLE, renderer, grader="first_number")
    text = "<think>\n7\n</think>\n\n8"
    assert TinkerCaller()([_row(env)], [text]) == [1.0]  # the thinking's 7
    assert TinkerCaller()([_row(stock)], [text]) == [0.0]  # the answer's 8


def test_the_probes_steps_write_nothing_into_the_cookbooks_trace_or_timing(renderer: Any, tmp_path: Any) -> None:
    env = TinyTaskEnv(EXAMPLE, renderer, grader="last_number")

    async def loop() -> None:  # as in the training loop: a trace and a timing window are active
        with trace.trace_iteration(step=0) as window, logtree.init_trace("RL Iteration 0", path=None) as tree:
            before = tree.to_dict()
            assert TinkerCaller()([_row(env)] * 2, ["7", "Thinking about the question. 7"]) == [1.0, 1.0]
            assert tree.to_dict() == before
            assert window.spans == []
            await env.step(TinkerCaller().action(env, "7"))  # the loop's own step does log (the check is live)
            assert tree.to_dict() != before

    asyncio.run(loop())


class AsyncJudgeEnv(TinyTaskEnv):
    """A step that awaits (an async judge's round trip)."""

    async def step(self, action: list[int], *, extra: Any = None) -> Any:
        await asyncio.sleep(0.01)
        return await super().step(action, extra=extra)


def test_an_async_step_runs_on_a_loop_of_its_own_inside_the_training_loop(renderer: Any) -> None:
    env = AsyncJudgeEnv(EXAMPLE, renderer, grader="last_number")

    async def loop() -> list[Any]:
        return TinkerCaller()([_row(env)] * 3, ["7", "8", "The answer is 7"])

    assert asyncio.run(loop()) == [1.0, 0.0, 1.0]
    assert TinkerCaller()([_row(env)], ["7"]) == [1.0]  # outside a loop too


class NotAProblemEnv:
    renderer = None


def test_a_row_that_is_not_a_pure_answer_check_raises_before_anything_is_scored(renderer: Any) -> None:
    ok = _row(TinyTaskEnv(EXAMPLE, renderer, grader="last_number"))
    for row, why in [
        (_row(NotAProblemEnv()), "not a ProblemEnv"),
        (_row(TinyTaskEnv(EXAMPLE, renderer), turns=2), "2 turns"),
        (_row(TinyTaskEnv(EXAMPLE, renderer), group_reward=True), "group reward"),
    ]:
        with pytest.raises(StatefulEnv, match=why):
            TinkerCaller()([ok, row], ["7", "7"])
    assert issubclass(StatefulEnv, TypeError) and isinstance(TinyTaskEnv(EXAMPLE, renderer), ProblemEnv)


def test_a_grader_that_hangs_is_interrupted_at_the_deadline_naming_the_text(renderer: Any) -> None:
    env = TinyTaskEnv(EXAMPLE, renderer, grader="stall")
    long = "Thinking about the question.\n" * 30 + "7"
    tracked = Tracked()

    async def loop() -> None:
        with pytest.raises(CallStalled, match="the last text it read: 'Thinking about"):
            bounded(lambda: TinkerCaller()([_row(env)] * 2, ["7", long], tracked=tracked), 0.5, inputs=tracked)

    start = time.perf_counter()
    asyncio.run(loop())
    assert time.perf_counter() - start < 10
