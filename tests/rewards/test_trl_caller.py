"""The TRL caller (:mod:`rl_guards.reward_calls.trl`): the call a probe makes is the call ``GRPOTrainer`` makes.

The kwargs are recorded from a real ``GRPOTrainer`` step and compared, key by key and shape by shape, with the
caller's for the same row; the completion ids are the text-by-text ids with EOS; a function missing one of TRL's
keywords raises here as it raises there.
"""

from __future__ import annotations

from typing import Any

import pytest

from rl_guards.reward_calls import CallRow
from rl_guards.reward_calls.trl import TrlCaller
from rl_guards.testing.tokenizer import build_tokenizer


def test_variant_ids_are_the_text_by_text_ids_with_eos() -> None:
    tokenizer = build_tokenizer()
    texts = ["<think>\nsum 2+2\n</think>\n\n4", "The answer is 12.", "", "思考 🤔 x < 3"]
    eos = tokenizer.eos_token_id
    want = [[*tokenizer(t, add_special_tokens=False)["input_ids"], eos] for t in texts]
    assert TrlCaller(lambda **kw: [], tokenizer=tokenizer, eos_ids=[eos]).ids(texts) == want


class _PickyTokenizer:
    """Refuses a batch, and one of the texts: each text is then encoded alone and the bad one gets no ids."""

    def __call__(self, text: Any, add_special_tokens: bool = False) -> dict[str, Any]:
        if isinstance(text, list):
            raise TypeError("no batches")
        if text == "bad":
            raise ValueError("cannot encode")
        return {"input_ids": [len(text)]}


def test_a_tokenizer_that_fails_on_the_batch_is_asked_text_by_text() -> None:
    caller = TrlCaller(lambda **kw: [], tokenizer=_PickyTokenizer(), eos_ids=[0])
    assert caller.ids(["abc", "bad", "z"]) == [[3, 0], [], [1, 0]]


def test_a_function_missing_one_of_trls_keywords_raises_as_in_trl() -> None:
    def strict(completions: list[Any], answer: list[str]) -> list[float]:  # no **kwargs: TRL passes more
        return [1.0] * len(completions)

    row = CallRow(prompt=[{"role": "user", "content": "What is 1+1?"}], columns={"answer": "2"})
    with pytest.raises(TypeError, match="unexpected keyword"):
        TrlCaller(strict)([row], ["2"])


@pytest.mark.slow
def test_the_call_is_the_one_grpo_trainer_makes(make_grpo_trainer: Any) -> None:
    """One real GRPOTrainer step records its reward call; the caller, given the same row and text, makes the same
    call: the same keywords, the same shapes, the same completion for the same ids."""
    seen: list[dict[str, Any]] = []

    def recorder(**kwargs: Any) -> list[float]:
        seen.append(kwargs)
        return [0.0] * len(kwargs["completions"])

    trainer = make_grpo_trainer(reward_funcs=[recorder], max_steps=1)
    trainer.train()
    trl_call = seen[0]
    tokenizer = trainer.processing_class
    eos_ids = list(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])  # TRL 1.13 has no list
    caller = TrlCaller(recorder, tokenizer=tokenizer, eos_ids=eos_ids, trainer_state=trainer.state)
    ids = trl_call["completion_ids"][0]
    text = tokenizer.decode(ids, skip_special_tokens=False).removesuffix(tokenizer.eos_token)
    keys = [k for k in trl_call if k not in ("prompts", "completions", "completion_ids", "trainer_state",
                                             "log_extra", "log_metric")]  # fmt: skip
    row = CallRow(prompt=trl_call["prompts"][0], columns={k: trl_call[k][0] for k in keys})
    seen.clear()
    caller([row], [text])
    ours = seen[0]
    assert set(ours) == set(trl_call)
    assert ours["prompts"] == trl_call["prompts"][:1]
    assert ours["completions"] == trl_call["completions"][:1]
    if ids and ids[-1] in eos_ids:
        assert ours["completion_ids"] == [ids]
    assert {k: ours[k] for k in keys} == {k: trl_call[k][:1] for k in keys}
    assert ours["trainer_state"] is trl_call["trainer_state"]
