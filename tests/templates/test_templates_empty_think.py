"""EmptyThinkMasker / mask_empty_think: the template's empty think block leaves the loss of non-thinking SFT."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from rl_guards.collators.empty_think import (
    IGNORE_INDEX,
    EmptyThinkMasker,
    derive_empty_think,
    mask_empty_think,
)
from rl_guards.errors import MaskingError
from rl_guards.testing import build_tokenizer

QA = [("What is 3+4?", "7"), ("Repeat the word: apple", "apple"), ("What is 2+5?", "7"), ("Say hi", "hi")]


def _messages(q: str, a: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def _ids(tok: Any, messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
    return [int(t) for t in tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"]]


def _block_positions(tok: Any, ids: list[int]) -> list[int]:
    """Independent locator: from the <think> id through </think> and the newline token after it."""
    open_id, close_id = tok.convert_tokens_to_ids("<think>"), tok.convert_tokens_to_ids("</think>")
    out = []
    for i, t in enumerate(ids):
        if t == open_id:
            j = ids.index(close_id, i)
            out += list(range(i, j + 1))
            if j + 1 < len(ids) and tok.decode([ids[j + 1]]).strip() == "":
                out.append(j + 1)
    return out


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("qwen3", "<think>\n\n</think>\n\n"),
        ("qwen3_training", "<think>\n\n</think>\n\n"),
        ("glm4moe", "<think></think>"),
    ],
)
def test_block_is_derived_by_rendering(template: str, text: str) -> None:
    tok = build_tokenizer(chat_template=template)
    block = derive_empty_think(tok)
    assert block.text == text
    assert tok.decode(list(block.ids)) == text
    assert block.every_turn is (template != "qwen3")  # qwen3 drops reasoning of earlier turns


def test_templates_without_the_block_are_refused() -> None:
    with pytest.raises(ValueError, match="no empty think block"):
        derive_empty_think(build_tokenizer(chat_template="qwen2_5"))


def test_dataset_variant_masks_only_non_thinking_rows() -> None:
    tok = build_tokenizer(chat_template="qwen3")
    ids = _ids(tok, _messages("What is 3+4?", "7"), enable_thinking=False)
    blocked = _block_positions(tok, ids)
    assert len(blocked) == 4
    for flags, masked in [({"enable_thinking": False}, True), ({"enable_thinking": True}, False)]:
        out = mask_empty_think({"input_ids": ids, "labels": ids, "chat_template_kwargs": flags}, tok)["labels"]
        assert all((out[i] == IGNORE_INDEX) is masked for i in blocked)
        assert [out[i] for i in range(len(ids)) if i not in blocked] == [
            ids[i] for i in range(len(ids)) if i not in blocked
        ]


def test_non_thinking_row_without_the_block_raises_with_the_row() -> None:
    tok = build_tokenizer(chat_template="qwen3")
    masker = EmptyThinkMasker(None, tok, {"enable_thinking": False})
    # Rendered by a template without the block (Qwen2.5): not what qwen3 trains non-thinking turns on.
    text = "<|im_start|>user\nWhat is 3+4?<|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    with pytest.raises(MaskingError, match="lacks the empty think block") as info:
        masker.mask_example({"input_ids": ids})
    assert "What is 3+4?" in str(info.value) and "'<think>\\n\\n</think>\\n\\n'" in str(info.value)
    # A turn cut by truncation right after the header is exempt.
    cut = ids[: ids.index(tok.convert_tokens_to_ids("<|im_start|>"), 1) + 3]
    assert masker.mask_example({"input_ids": cut})["labels"] == cut


def test_multi_turn_qwen3_masks_the_last_turn_and_asserts_only_there() -> None:
    tok = build_tokenizer(chat_template="qwen3")
    ids = _ids(tok, _messages("a?", "1") + _messages("b?", "2"), enable_thinking=False)
    out = EmptyThinkMasker(None, tok, {"enable_thinking": False}).mask_example({"input_ids": ids})["labels"]
    assert [i for i, x in enumerate(out) if x == IGNORE_INDEX] == _block_positions(tok, ids)


@pytest.mark.slow
def test_real_sft_run_masks_the_block_and_trains_the_answer(tiny: Any, tmp_path: Path) -> None:
    from trl import SFTConfig, SFTTrainer

    tok = tiny.load_tokenizer()
    ds = Dataset.from_dict(
        {
            "messages": [_messages(q, a) for q, a in QA],
            "chat_template_kwargs": [{"enable_thinking": False}] * len(QA),  # SFTTrainer honours it per row
        }
    )
    settings: dict[str, Any] = {
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "report_to": "none",
        "per_device_train_batch_size": 2,
        "max_steps": 2,
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "max_length": 64,
    }
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(SFTConfig)}:
        settings["activation_checkpointing"] = False
    trainer = SFTTrainer(
        model=tiny.model_dir, processing_class=tok, args=SFTConfig(str(tmp_path / "sft"), **settings), train_dataset=ds
    )
    seen: list[dict[str, Any]] = []
    masker = EmptyThinkMasker(trainer.data_collator, tok, {"enable_thinking": False})

    def recording(features: list[Any]) -> Any:
        batch = masker(features)
        seen.append({k: v.clone() for k, v in batch.items() if hasattr(v, "clone")})
        return batch

    trainer.data_collator = recording
    # Without the masker, SFTTrainer trains on the block: the labels it prepared equal input_ids there.
    prepared = trainer.train_dataset[0]
    assert all(prepared["labels"][i] == prepared["input_ids"][i] for i in _block_positions(tok, prepared["input_ids"]))
    trainer.train()
    assert trainer.state.global_step == 2 and len(seen) == 2 and masker.masked == 4
    for batch in seen:
        for ids, labels, mask in zip(
            batch["input_ids"].tolist(), batch["labels"].tolist(), batch["attention_mask"].tolist(), strict=True
        ):
            real = [t for t, m in zip(ids, mask, strict=True) if m]
            blocked = _block_positions(tok, real)
            assert len(blocked) == 4 and all(labels[i] == IGNORE_INDEX for i in blocked)
            answer_start = blocked[-1] + 1
            answer_end = real.index(tok.convert_tokens_to_ids("<|im_end|>"), answer_start)
            assert answer_end > answer_start
            assert labels[answer_start : answer_end + 1] == real[answer_start : answer_end + 1]  # answer + eos trained


def test_collator_uses_per_row_flags_and_padding() -> None:
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    tok = build_tokenizer(chat_template="qwen3")
    rows = [_ids(tok, _messages(q, a), enable_thinking=False) for q, a in QA[:2]]
    features = [{"input_ids": ids, "enable_thinking": flag} for ids, flag in zip(rows, [False, True], strict=True)]
    masker = EmptyThinkMasker(DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id), tok)
    batch = masker(features)
    labels = batch["labels"].tolist()
    assert [i for i, x in enumerate(labels[0]) if x == IGNORE_INDEX and i < len(rows[0])] == _block_positions(
        tok, rows[0]
    )
    assert labels[1][: len(rows[1])] == rows[1]  # the thinking row is left alone
    assert masker.masked == 1
