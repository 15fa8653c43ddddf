"""The reward probes' variant completion ids: one batch encode, the same ids as text by text, EOS appended."""

from __future__ import annotations

from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.guards.base import RunContext
from rl_guards.guards.probes import RewardProbeGuard
from rl_guards.testing.tokenizer import build_tokenizer


def _guard(tokenizer: Any) -> RewardProbeGuard:
    guard = RewardProbeGuard(GuardsConfig())
    guard.ctx = RunContext(tokenizer=tokenizer, eos_token_ids=[tokenizer.eos_token_id])
    return guard


def test_variant_ids_are_the_text_by_text_ids_with_eos() -> None:
    tokenizer = build_tokenizer()
    texts = ["<think>\nsum 2+2\n</think>\n\n4", "The answer is 12.", "", "思考 🤔 x < 3"]
    eos = tokenizer.eos_token_id
    want = [[*tokenizer(t, add_special_tokens=False)["input_ids"], eos] for t in texts]
    assert _guard(tokenizer)._ids_of(texts) == want


class _PickyTokenizer:
    """Refuses a batch, and one of the texts: each text is then encoded alone and the bad one gets no ids."""

    def __call__(self, text: Any, add_special_tokens: bool = False) -> dict[str, Any]:
        if isinstance(text, list):
            raise TypeError("no batches")
        if text == "bad":
            raise ValueError("cannot encode")
        return {"input_ids": [len(text)]}


def test_a_tokenizer_that_fails_on_the_batch_is_asked_text_by_text() -> None:
    guard = RewardProbeGuard(GuardsConfig())
    guard.ctx = RunContext(tokenizer=_PickyTokenizer(), eos_token_ids=[0])
    assert guard._ids_of(["abc", "bad", "z"]) == [[3, 0], [], [1, 0]]
    guard.ctx = RunContext(tokenizer=None)
    assert guard._ids_of(["abc"]) == [[]]
