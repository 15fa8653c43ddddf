"""Each framework caller makes the call its framework makes, checked against the installed framework's own code:
OpenRLHF 0.11's ``SingleTurnAgentExecutor`` (the reward file loaded as OpenRLHF loads it, its own ``execute``), and
verifiers' classic ``Rubric.score_rollout`` (the rubric's own parser). TRL's: ``test_trl_caller.py``; verl's: the
verl stack's ``tests/verl``."""

from __future__ import annotations

import asyncio
import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rl_guards.reward_calls import CallRow, RewardTypeError, caller
from rl_guards.testing.tokenizer import build_tokenizer

REWARD_FILE = '''
import torch

SEEN = []


def reward_func(queries, prompts, labels, **kwargs):
    SEEN.append((list(queries), list(prompts), list(labels)))
    rewards = torch.tensor([float(q.rstrip().removesuffix("<|im_end|>").strip().endswith(str(l)))
                            for q, l in zip(queries, labels)])
    return {"rewards": rewards, "scores": rewards}
'''
TENSOR_FILE = REWARD_FILE.replace('return {"rewards": rewards, "scores": rewards}', "return rewards")


class _Engine:
    """The one part of OpenRLHF's rollout that cannot run here (vLLM): it returns the given response's ids."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    async def generate(self, prompt_token_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        output = SimpleNamespace(token_ids=list(self.ids), finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def _openrlhf(tmp_path: Path, source: str, response: str, label: str) -> tuple[Any, Any, Any]:
    """(what OpenRLHF trains on, what our caller returns or raises, the module OpenRLHF loaded)."""
    agent = pytest.importorskip("openrlhf.utils.agent")
    path = tmp_path / "reward.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    tokenizer = build_tokenizer()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 3+4?"}], tokenize=False,
                                           add_generation_prompt=True)  # fmt: skip
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    executor = agent.SingleTurnAgentExecutor(str(path))  # OpenRLHF loads --remote_rm_url reward.py itself
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    out = asyncio.run(executor.execute(prompt, label, params, 1024, tokenizer, _Engine(ids)))
    spec = importlib.util.spec_from_file_location("ours", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    ours = caller(module.reward_func, "openrlhf", eos_text=tokenizer.eos_token)
    row = CallRow(prompt=[{"role": "user", "content": "What is 3+4?"}], rendered_prompt=prompt, reference=label)
    try:
        value: Any = ours([row], [response])
    except RewardTypeError as exc:
        value = exc
    return out, value, (executor.reward_func.__globals__["SEEN"], module.SEEN)


def test_openrlhf_executor_and_caller_make_the_same_call(tmp_path: Path) -> None:
    out, ours, (theirs_seen, ours_seen) = _openrlhf(tmp_path, REWARD_FILE, "<think>\nadding\n</think>\n\n7", "7")
    assert theirs_seen == ours_seen  # the same queries (prompt + response + EOS text), prompts and labels
    assert float(out["reward"][0]) == ours[0] == 1.0


def test_a_bare_tensor_trains_with_reward_none_in_openrlhf_and_is_a_wrong_type_here(tmp_path: Path) -> None:
    out, ours, _ = _openrlhf(tmp_path, TENSOR_FILE, "7", "7")
    assert out["reward"] is None  # OpenRLHF logged the .get error and went on
    assert isinstance(ours, RewardTypeError) and "not a dict" in str(ours)


def test_verifiers_rubric_scores_as_our_caller_does() -> None:
    """A classic rubric (its own parser strips the thinking): our caller's score is the rubric's own."""
    vf = pytest.importorskip("verifiers.legacy")

    def correct(parser: Any, completion: Any, answer: str, **kwargs: Any) -> float:
        return float((parser.parse_answer(completion) or "").strip() == answer)

    rubric = vf.Rubric(funcs=[correct], parser=vf.ThinkParser())
    texts = ["<think>\n7 first\n</think>\nThe answer: 8", "<think>\nhmm\n</think>\n7"]
    row = CallRow(prompt="What is 3+4?", columns={"question": "What is 3+4?", "answer": "7"}, reference="7")
    ours = caller(correct, "verifiers", rubric=rubric)([row, row], texts)
    theirs = []
    for text in texts:
        state = vf.State(input={"prompt": [{"role": "user", "content": "What is 3+4?"}], "answer": "7", "info": {},
                                "example_id": 0})  # fmt: skip
        state["completion"] = [{"role": "assistant", "content": text}]
        asyncio.run(rubric.score_rollout(state))
        theirs.append(state["metrics"]["correct"])
    assert ours == theirs == [0.0, 1.0]
