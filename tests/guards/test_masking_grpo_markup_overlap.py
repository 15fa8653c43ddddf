"""prompt_leak vs a model re-emitting the template's think markup: ``</think>\\n\\n`` at the start of a
non-thinking completion is the model's output, not a slice bug, on one row or on every row (a collapsing policy).
A stop needs tokens the model cannot have written (an EOS inside the overlap); the same non-markup prompt tokens at
the start of every row are a warning (prompt_overlap), never a stop."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rl_guards.config import GuardsConfig
from rl_guards.core import masks as M
from rl_guards.errors import MaskingError
from rl_guards.guards.base import GuardSession, RunContext, run_hook
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.tensors.grpo_masks import check_grpo_batch
from rl_guards.testing import build_tokenizer

PAD, EOS = 0, 2
OPEN, CLOSE, NL2 = 70, 71, 72  # <think>, </think>, "\n\n" of a synthetic template
PROMPT = [10, 11, 12, OPEN, NL2, CLOSE, NL2]  # ends with the empty think block


def rollout(completions: list[list[int]]) -> dict[str, Any]:
    width = max(len(c) for c in completions)
    return {
        "prompt_ids": torch.tensor([PROMPT] * len(completions)),
        "prompt_mask": torch.ones(len(completions), len(PROMPT), dtype=torch.long),
        "completion_ids": torch.tensor([c + [PAD] * (width - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions]),
        "advantages": torch.zeros(len(completions)),
    }


NORMAL = [[40, 41, EOS], [42, EOS], [43, 44, EOS], [45, EOS]]
STRAY_CLOSE = [CLOSE, NL2, 46, EOS]
MARKUP = (OPEN, CLOSE, NL2)

OVERLAP_CASES = [
    # name, completions, markup ids given, prompt_leak expected, prompt_overlap expected
    ("stray_close_one_row_no_markup_ids", [STRAY_CLOSE, *NORMAL[1:]], (), False, False),  # one row: by chance
    ("stray_close_one_row", [STRAY_CLOSE, *NORMAL[1:]], MARKUP, False, False),
    ("empty_block_again_one_row", [[OPEN, NL2, CLOSE, NL2, 46, EOS], *NORMAL[1:]], MARKUP, False, False),
    ("stray_close_every_row", [STRAY_CLOSE] * 4, MARKUP, False, False),  # a collapsing policy's own markup
    ("stray_close_every_row_no_markup_ids", [STRAY_CLOSE] * 4, (), False, True),  # markup unknown: a warning
    ("non_markup_overlap_one_row", [[11, 12, OPEN, 46, EOS], *NORMAL[1:]], MARKUP, False, False),  # no tail match
    ("content_overlap_one_row", [[12, OPEN, NL2, CLOSE, NL2, EOS], *NORMAL[1:]], MARKUP, False, False),
    ("content_overlap_every_row", [[12, OPEN, NL2, CLOSE, NL2, EOS]] * 4, MARKUP, False, True),
]


@pytest.mark.parametrize(
    ("name", "completions", "markup", "leak", "overlap"), OVERLAP_CASES, ids=[c[0] for c in OVERLAP_CASES]
)
def test_markup_only_overlaps(
    name: str, completions: list[list[int]], markup: tuple[int, ...], leak: bool, overlap: bool
) -> None:
    report = check_grpo_batch(rollout(completions), eos_token_ids=[EOS], pad_token_id=PAD, mask_truncated=False,
                              markup_ids=markup)  # fmt: skip
    assert (M.PROMPT_LEAK in report.kinds) == leak, report
    assert (M.PROMPT_OVERLAP in report.kinds) == overlap, report


def _real_rollout(tok: Any, first_completions: list[str]) -> dict[str, Any]:
    """A non-thinking batch rendered with the real Qwen3 template: prompt ends with <think>\\n\\n</think>\\n\\n."""
    messages = [{"role": "user", "content": "Repeat the word: river"}]
    rendered = tok.apply_chat_template(
        messages, add_generation_prompt=True, enable_thinking=False, tokenize=True, return_dict=True
    )
    prompt = [int(t) for t in rendered["input_ids"]]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    rows = [tok(text, add_special_tokens=False)["input_ids"] + [eos] for text in first_completions]
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id
    return {
        "prompt_ids": torch.tensor([prompt] * len(rows)),
        "prompt_mask": torch.ones(len(rows), len(prompt), dtype=torch.long),
        "completion_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows]),
        "completion_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "advantages": torch.zeros(len(rows)),
    }


def test_guard_reads_markup_from_the_tokenizer() -> None:
    tok = build_tokenizer(chat_template="qwen3")
    guard = GRPOMaskGuard(GuardsConfig())
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    guard.setup(RunContext(tokenizer=tok, eos_token_ids=eos, pad_token_id=tok.pad_token_id))
    session = GuardSession()
    stray = _real_rollout(tok, ["</think>\n\nriver", "river", "river", "The river"])
    assert tok.decode(stray["completion_ids"][0, :2].tolist()) == "</think>\n\n"  # two tokens, as in the prompt
    run_hook(guard, "check_tensors", session, 0, stray)  # raise mode: no error
    assert session.findings == []
    every_row = _real_rollout(tok, ["</think>\n\nriver"] * 4)  # a collapsing policy's own markup
    run_hook(guard, "check_tensors", session, 1, every_row)  # raise mode: still no error, no finding
    assert session.findings == []
    # The prompt's end-of-turn and the next header inside the completion: generation stops at <|im_end|>, so the
    # model cannot have written this; a slice bug did. Certain: a stop.
    leaked = _real_rollout(tok, ["<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nriver"] * 4)
    leaked["completion_mask"][:, 1:] = 0  # TRL's mask ends at the first EOS of completion_ids: the leaked one
    with pytest.raises(MaskingError, match="prompt_leak"):
        run_hook(guard, "check_tensors", session, 2, leaked)
