"""The GRPO mask guard on a real GRPOTrainer (tiny fixture): clean runs stay silent, planted mask bugs stop the run
with a MaskingError naming the rule; tool-result markers agree with TRL's own tool suffix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import rl_guards
from rl_guards.chat.tool_markers import tool_result_markers
from rl_guards.core import masks as M
from rl_guards.errors import MaskingError
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.tensors.grpo_masks import check_grpo_batch
from rl_guards.testing.logs import shows

RAISE = {"masking": {"mode": "raise"}}


def _eos_ids(trainer: Any) -> list[int]:
    """The end-of-sequence ids the trainer stops on: TRL >= 1.14 exposes them; TRL 1.13 uses the tokenizer's."""
    ids = getattr(trainer, "eos_token_ids", None)
    return list(ids) if ids else [trainer.processing_class.eos_token_id]


def capture(trainer: Any, plant: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Wrap the trainer's rollout method (before install, so the guard sees the result); optionally corrupt it."""
    seen: list[dict[str, Any]] = []
    original = trainer._generate_and_score_completions

    def wrapped(inputs: Any) -> dict[str, Any]:
        output = original(inputs)
        if plant is not None:
            plant(output)
        seen.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in output.items()})
        return output

    trainer._generate_and_score_completions = wrapped
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("mask_truncated", [False, True])
def test_clean_run_is_silent(make_grpo_trainer: Any, mask_truncated: bool) -> None:
    # A short completion budget truncates some rows, so both mask_truncated branches are exercised.
    trainer = make_grpo_trainer(max_steps=2, max_completion_length=8, mask_truncated_completions=mask_truncated)
    seen = capture(trainer)
    run = rl_guards.install(trainer, RAISE, guards=[GRPOMaskGuard])
    trainer.train()
    assert not run.findings, run.summary()
    guard = run.guard("masking")
    assert guard.checked == len(seen) >= 2
    history = [row for row in trainer.state.log_history if "rl_guards/masking/checked_batches" in row]
    # Quiet when healthy: a count that stayed 0 is not logged at the default metrics level.
    assert history and not any("rl_guards/masking/violating_rows" in row for row in trainer.state.log_history)

    # The same batches, checked without a trainer, through the pure-tensor entry point and the row reference.
    eos, pad = _eos_ids(trainer), trainer.processing_class.pad_token_id
    has_eos = truncated = 0
    for output in seen:
        assert check_grpo_batch(output, eos_token_ids=eos, pad_token_id=pad, mask_truncated=mask_truncated).ok
        for ids, cm in zip(output["completion_ids"].tolist(), output["completion_mask"].tolist(), strict=True):
            row = M.check_completion_row(ids, cm, eos_token_ids=eos, pad_token_id=pad, mask_truncated=mask_truncated)
            assert not row.kinds
            has_eos += row.has_eos
            truncated += not row.has_eos
    assert has_eos and truncated  # the batches hold both kinds of rows, so the rules were not vacuous


def _unmask_after_eos(output: dict[str, Any]) -> None:
    output["completion_mask"][:] = 1  # the classic: loss on everything after the first EOS


def _drop_eos_from_loss(output: dict[str, Any]) -> None:
    eos = torch.isin(output["completion_ids"], torch.tensor([2050, 2048]))  # <|im_end|>, <|endoftext|>
    output["completion_mask"][eos] = 0  # the model is never trained to stop


def _attend_left_padding(output: dict[str, Any]) -> None:
    output["prompt_mask"][:] = 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("plant", "kind"),
    [(_unmask_after_eos, M.POST_EOS), (_drop_eos_from_loss, M.MISSING_LOSS), (_attend_left_padding, M.PROMPT_MASK)],
    ids=["post_eos", "missing_loss", "prompt_mask"],
)
def test_planted_mask_bug_stops_the_run(make_grpo_trainer: Any, tiny: Any, plant: Any, kind: str) -> None:
    assert tiny.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]) == [2050, 2048]
    trainer = make_grpo_trainer(max_steps=2, max_completion_length=12)
    capture(trainer, plant)
    rl_guards.install(trainer, RAISE, guards=[GRPOMaskGuard])
    with pytest.raises(MaskingError) as err:
        trainer.train()
    text = str(err.value)
    assert text.startswith(f"[rl_guards/masking] {kind}: ") and "Fix:" in text
    assert "⟨!" in text and "<|im_start|>assistant" in text  # decoded rows with the offending tokens marked
    assert err.value.step in (1, 2)  # a batch whose prompts share one length has no left padding to get wrong


@pytest.mark.slow
def test_warn_mode_counts_and_keeps_training(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=2, max_completion_length=12)
    capture(trainer, _unmask_after_eos)
    run = rl_guards.install(trainer, {"masking": {"mode": "warn", "check_every": 2}}, guards=[GRPOMaskGuard])
    with shows("post_eos"):
        trainer.train()
    assert trainer.state.global_step == 2
    guard = run.guard("masking")
    assert guard.calls >= 2 and guard.checked == (guard.calls + 1) // 2
    assert run.session.counts[("masking", M.POST_EOS)] == guard.checked


@pytest.mark.slow
def test_tool_markers_match_trls_tool_suffix(tiny: Any, tmp_path: Any) -> None:
    """The head/tail the guard expects around a tool result are what GRPOTrainer inserts, for varied results."""
    from trl import GRPOTrainer

    from rl_guards.testing import make_dataset, tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct

    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: first number
            b: second number
        """
        return a + b

    tok = tiny.load_tokenizer()
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tok,
        reward_funcs=[arith_correct],
        args=tiny_grpo_config(tmp_path / "unused"),
        train_dataset=make_dataset(),
        tools=[add],
    )
    markers = tool_result_markers(tok, trainer.chat_template, trainer.chat_template_kwargs)
    assert markers is not None
    head, tail = markers
    assert tok.decode(head) == "\n<|im_start|>user\n<tool_response>"
    assert tok.decode(tail) == "</tool_response><|im_end|>\n<|im_start|>assistant\n"

    eos, pad = _eos_ids(trainer), tok.pad_token_id
    model_turn = [*tok("<tool_call>\n{}\n</tool_call>", add_special_tokens=False)["input_ids"], 2050]
    answer = [*tok("It is 5.", add_special_tokens=False)["input_ids"], 2050]
    rows, tool_masks = [], []
    for content in ["5", "\n  spaced  \n", '{"r": [1, 2]}']:
        suffix = trainer._get_tool_suffix_ids([{"role": "tool", "name": "add", "content": content}])
        assert suffix[: len(head)] == head and suffix[-len(tail) :] == tail
        rows.append(model_turn + suffix + answer)
        tool_masks.append([1] * len(model_turn) + [0] * len(suffix) + [1] * len(answer))
    width = max(len(r) for r in rows)
    output = {
        "prompt_ids": torch.tensor([[7, 8]] * len(rows)),
        "prompt_mask": torch.ones(len(rows), 2, dtype=torch.long),
        "completion_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows]),
        "completion_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "tool_mask": torch.tensor([m + [1] * (width - len(m)) for m in tool_masks]),
    }
    kw = {"eos_token_ids": eos, "pad_token_id": pad, "mask_truncated": False, "tool_head_ids": head}
    assert check_grpo_batch(output, tool_tail_ids=tail, **kw).ok
    # The tool span cut two tokens short: the next turn's header ("assistant", newline) would train.
    stop = len(rows[0]) - len(answer)
    output["tool_mask"][0, stop - 2 : stop] = 1
    assert check_grpo_batch(output, tool_tail_ids=tail, **kw).kinds == [M.TOOL_MASK]
    # The tool mask lost altogether: everything after the model's first EOS trains.
    output["tool_mask"][:] = 1
    assert check_grpo_batch(output, tool_tail_ids=tail, **kw).kinds == [M.POST_EOS]
