"""Property tests: no guard and no reward wrapper crashes on arbitrary rollouts.

Hypothesis builds RolloutBatches from arbitrary text (unicode, binary-ish, huge, think-tag soup, empty), token ids
(empty, ragged, real tag and EOS ids), tasks, None / extreme rewards, odd prompts and columns, and matching TRL
tensors with arbitrary masks. Every registered guard gets the batch through ``run_hook`` (as the TRL hook calls
it) in ``log`` and ``warn`` mode, then ``on_save`` and ``on_train_end``; a crash would be recorded as an
``internal_error`` finding, which must never happen. The reward functions (``StrayThinkPenalty``,
``blind_judge``, ``route``) get arbitrary completions and must return one value per row.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import Guard, GuardSession, RunContext, run_hook
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.rewards.blind_judge import blind_judge
from rl_guards.rewards.routing import route
from rl_guards.rewards.stray_think import StrayThinkPenalty

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    derandomize=True,  # the same examples on every run: a failure here is a bug, never flakiness
)
REWARD_NAMES = ["arith_correct", "echo_match", "judge"]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from rl_guards.testing import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def ids_info(tokenizer: Any) -> dict[str, int]:
    return {
        "vocab": len(tokenizer),
        "think": tokenizer.convert_tokens_to_ids("<think>"),
        "end_think": tokenizer.convert_tokens_to_ids("</think>"),
        "eos": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad": tokenizer.pad_token_id,
    }


# ----- strategies ---------------------------------------------------------------------------------------------
_TAG_PIECES = ["<think>", "</think>", "<thi", "</think", "<THINK>", "< think >", "<thinking>", "\n", " ", "答", "🤔"]
_TAG_PIECES += ["<|im_end|>", "<|channel>", "<channel|>", "\x00", "\ufffd", "a", "<", "/", ">"]


def _huge(piece: str, n: int) -> str:
    return piece * n


texts = st.one_of(
    st.text(max_size=60),  # arbitrary unicode (hypothesis includes control chars, RTL, combining marks)
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),  # binary-ish
    st.lists(st.sampled_from(_TAG_PIECES), max_size=30).map("".join),  # tag soup
    st.builds(_huge, st.sampled_from(["<think", "x", "</think>", "答 ", "<"]), st.integers(1_000, 20_000)),
    st.just(""),
)
tasks = st.one_of(st.sampled_from(["arith", "echo", "", "a/b", "任务", " "]), st.text(max_size=8))
reward_values = st.one_of(
    st.none(),
    st.sampled_from([0.0, 1.0, -1.0]),
    st.floats(allow_nan=False, allow_infinity=True, width=32),
)
prompts = st.one_of(
    st.text(max_size=30),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "tool"])},
            optional={"content": st.one_of(st.none(), st.text(max_size=30), st.just([{"type": "text", "text": "x"}]))},
        ),
        max_size=3,
    ),
)
column_values = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.booleans(), st.floats(allow_nan=True))


@st.composite
def rollout_batches(draw: st.DrawFn, info: dict[str, int]) -> RolloutBatch:
    """An arbitrary, shape-consistent RolloutBatch (what a gathered TRL batch could hold in the worst case)."""
    g = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(0, 12))
    funcs = draw(st.integers(1, 3))
    token = st.one_of(
        st.integers(0, info["vocab"] - 1), st.sampled_from([info["think"], info["end_think"], info["eos"], info["pad"]])
    )
    completion_ids = draw(st.lists(st.lists(token, max_size=40), min_size=n, max_size=n))
    thinking = draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n))
    n_cols = draw(st.integers(0, 2))
    columns = {
        name: draw(st.lists(column_values, min_size=n, max_size=n)) for name in ["answer", "enable_thinking"][:n_cols]
    }
    return RolloutBatch(
        step=draw(st.integers(0, 10_000)),
        mode=draw(st.sampled_from(["train", "train", "eval"])),
        num_generations=g,
        reward_names=REWARD_NAMES[:funcs],
        reward_weights=draw(st.lists(st.sampled_from([1.0, 0.5, 0.0, -1.0]), min_size=funcs, max_size=funcs)),
        rewards=draw(st.lists(st.lists(reward_values, min_size=funcs, max_size=funcs), min_size=n, max_size=n)),
        advantages=draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n)),
        tasks=draw(st.lists(tasks, min_size=n, max_size=n)),
        completions=draw(st.lists(texts, min_size=n, max_size=n)),
        completion_ids=completion_ids,
        prompt_ids=draw(st.lists(st.lists(token, max_size=12), min_size=n, max_size=n)),
        truncated=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        thinking=thinking,
        max_completion_length=draw(st.sampled_from([0, 16, 40])),
        prompts=draw(st.lists(prompts, min_size=n, max_size=n)),
        columns=columns,
        prompt_opened=draw(st.one_of(st.just([]), st.lists(st.booleans(), min_size=n, max_size=n))),
        epoch=draw(st.floats(0, 100)),
    )


def trl_tensors(batch: RolloutBatch, info: dict[str, int], masks: str) -> dict[str, torch.Tensor]:
    """The tensors ``_generate_and_score_completions`` would return for ``batch``: prompts left-padded, completions
    right-padded; ``masks`` = "consistent" (1 on the ids) or "arbitrary" (0, 1 and 2 anywhere)."""
    n, pad = len(batch), info["pad"]
    width = max([len(ids) for ids in batch.completion_ids] + [0])
    pwidth = max([len(ids) for ids in batch.prompt_ids] + [0])
    completion_ids = torch.full((n, width), pad, dtype=torch.long)
    completion_mask = torch.zeros((n, width), dtype=torch.long)
    prompt_ids = torch.full((n, pwidth), pad, dtype=torch.long)
    prompt_mask = torch.zeros((n, pwidth), dtype=torch.long)
    for i, (cids, pids) in enumerate(zip(batch.completion_ids, batch.prompt_ids, strict=True)):
        completion_ids[i, : len(cids)] = torch.tensor(cids, dtype=torch.long)
        completion_mask[i, : len(cids)] = 1
        if pids:
            prompt_ids[i, pwidth - len(pids) :] = torch.tensor(pids, dtype=torch.long)
            prompt_mask[i, pwidth - len(pids) :] = 1
    if masks == "arbitrary":
        gen = torch.Generator().manual_seed(len(batch) * 7919 + width)
        completion_mask = torch.randint(0, 3, (n, width), generator=gen)
        prompt_mask = torch.randint(0, 2, (n, pwidth), generator=gen)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(batch.advantages, dtype=torch.float32),
    }


def make_context(tokenizer: Any, info: dict[str, int], out_dir: str, batch: RolloutBatch) -> RunContext:
    return RunContext(
        output_dir=out_dir,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        chat_template_kwargs={"enable_thinking": True},
        eos_token_ids=[info["eos"], info["pad"]],
        pad_token_id=info["pad"],
        reward_func_names=list(batch.reward_names),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        decode_text=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )


def internal_errors(session: GuardSession) -> list[str]:
    return [f.message for f in session.findings if f.kind == "internal_error"]


# ----- every guard, arbitrary batches -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["log", "warn"])
@SETTINGS
@given(data=st.data())
def test_no_guard_crashes_on_arbitrary_batches(
    tokenizer: Any, ids_info: dict[str, int], mode: str, data: st.DataObject
) -> None:
    batch = data.draw(rollout_batches(ids_info))
    masks = data.draw(st.sampled_from(["consistent", "arbitrary"]))
    with tempfile.TemporaryDirectory() as out:
        config = GuardsConfig.from_dict({"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}})
        for section in config.guard_sections():
            getattr(config, section).mode = mode
        if data.draw(st.booleans()):
            config.routing.routes = {"arith": ["arith_correct"], "echo": [REWARD_NAMES[-1]]}
        ctx = make_context(tokenizer, ids_info, out, batch)
        session = GuardSession()
        guards: list[Guard] = [cls(config) for cls in BATCH_GUARDS]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warn mode warns on violations: expected, not the point here
            for guard in guards:
                guard.setup(ctx)
            for guard in guards:
                if hasattr(guard, "check_tensors"):
                    run_hook(guard, "check_tensors", session, batch.step, trl_tensors(batch, ids_info, masks))
                run_hook(guard, "on_batch", session, batch.step, batch)
            for guard in guards:
                run_hook(guard, "on_save", session, batch.step, f"{out}/checkpoint-{batch.step + 1}")
                run_hook(guard, "on_train_end", session, batch.step)
        assert not internal_errors(session), internal_errors(session)
        for key, values in session.metrics.items():
            assert key.startswith(("rl_guards/", "rl_guards_task/")), key
            assert all(isinstance(v, float) for v in values), key
        for guard in guards:  # state stays JSON and loads back after any batch
            state = json.loads(json.dumps(guard.state_dict()))
            type(guard)(config).load_state_dict(state)


# ----- reward functions, arbitrary completions ----------------------------------------------------------------
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["assistant", "assistant", "tool", "user"])},
        optional={
            "content": st.one_of(st.none(), texts, st.just([{"type": "text", "text": "<think>x</think>y"}])),
            "reasoning_content": st.one_of(st.none(), texts),
        },
    ),
    max_size=3,
)
completions = st.lists(st.one_of(texts, messages, st.none(), st.integers()), max_size=10)


@SETTINGS
@given(batch=completions, data=st.data())
def test_stray_think_penalty_scores_every_row(batch: list[Any], data: st.DataObject) -> None:
    n = len(batch)
    ids = data.draw(st.one_of(st.none(), st.lists(st.lists(st.integers(0, 5), max_size=20), min_size=n, max_size=n)))
    column = data.draw(st.one_of(st.none(), st.lists(column_values, min_size=n, max_size=n), st.just([True])))
    penalty = StrayThinkPenalty(weight=0.5, open_id=1, close_id=2, mode="warn", log_rates=True)
    logged: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rewards = penalty(batch, completion_ids=ids, enable_thinking=column, log_metric=logged.__setitem__)
    assert len(rewards) == n and all(r in (0.0, -0.5) for r in rewards)
    if n:
        assert 0.0 <= logged["rl_guards/stray_think_penalty/penalised_rate"] <= 1.0


@SETTINGS
@given(batch=completions, data=st.data())
def test_blind_judge_passes_every_row_and_strips_tags(batch: list[Any], data: st.DataObject) -> None:
    n = len(batch)
    seen: list[Any] = []

    def judge(completions: list[Any], **kwargs: Any) -> list[float]:
        seen.append((completions, kwargs))
        return [1.0] * len(completions)

    check_only = data.draw(st.booleans())
    wrapped = blind_judge(judge, check_only=check_only)
    column = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rewards = wrapped(batch, completion_ids=[[1]] * n, enable_thinking=column, answer=["x"] * n)
    assert rewards == [1.0] * n
    given_texts, kwargs = seen[0]
    assert len(given_texts) == n and kwargs["answer"] == ["x"] * n
    assert kwargs["completion_ids"] == ([[1]] * n if check_only else None)
    if not check_only:
        for original, text in zip(batch, given_texts, strict=True):
            if isinstance(original, str):
                assert "<think>" not in text and "</think>" not in text


@SETTINGS
@given(batch=completions, data=st.data())
def test_route_wrappers_score_exactly_their_rows(batch: list[Any], data: st.DataObject) -> None:
    n = len(batch)
    task = data.draw(st.lists(st.sampled_from(["arith", "echo", "other", ""]), min_size=n, max_size=n))

    def arith(completions: list[Any], **kwargs: Any) -> list[float]:
        assert all(t == "arith" for t in kwargs["task"])
        kwargs["log_extra"]("arith_seen", ["yes"] * len(completions))
        return [1.0] * len(completions)

    def echo(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [0.5 if isinstance(c, str) else None for c in completions]

    extra: dict[str, list[Any]] = {}
    outputs = [
        fn(prompts=[None] * n, completions=batch, task=task, log_extra=extra.__setitem__)
        for fn in route({"arith": [arith], "echo": [echo]})
    ]
    assert [len(o) for o in outputs] == [n, n]
    for i, t in enumerate(task):
        assert outputs[0][i] == (1.0 if t == "arith" else None)
        assert outputs[1][i] == ((0.5 if isinstance(batch[i], str) else None) if t == "echo" else None)
    if "arith" in task:
        assert extra["arith_seen"] == ["yes" if t == "arith" else None for t in task]
    assert not any(isinstance(v, float) and math.isnan(v) for o in outputs for v in o)
