"""EmptyThinkMasker(check_only=True): non-thinking SFT rows that still train on the template's empty think block."""

from __future__ import annotations

from typing import Any

import pytest
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from rl_guards.collators.empty_think import EMPTY_THINK_TRAINED, IGNORE_INDEX, EmptyThinkMasker
from rl_guards.errors import ConfigError, MaskingError
from rl_guards.testing import build_tokenizer
from rl_guards.testing.logs import shows

QA = [("What is 3+4?", "7"), ("Repeat the word: apple", "apple")]


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer(chat_template="qwen3")


def features(tok: Any, flags: list[bool]) -> list[dict[str, Any]]:
    """SFT rows as SFTTrainer prepares them without masking: labels == input_ids on the whole conversation."""
    out = []
    for (q, a), flag in zip(QA, flags, strict=True):
        messages = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        rendered = tok.apply_chat_template(messages, tokenize=True, return_dict=True, enable_thinking=flag)
        out.append({"input_ids": [int(t) for t in rendered["input_ids"]], "enable_thinking": flag})
    return out


def collator(tok: Any) -> DataCollatorForLanguageModeling:
    return DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id)


def test_audit_reports_trained_blocks_and_leaves_labels_alone(tok: Any) -> None:
    audit = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True)
    rows = features(tok, [False, False])
    with shows("empty think block"):
        batch = audit(rows)
    assert audit.trained_blocks == 2 and audit.masked == 0
    assert [(f.kind, f.severity) for f in audit.session.findings] == [(EMPTY_THINK_TRAINED, "warning")]
    labels = batch["labels"].tolist()
    for row, labels_row in zip(rows, labels, strict=True):
        assert labels_row[: len(row["input_ids"])] == row["input_ids"]  # nothing masked by the audit


def test_audit_is_silent_behind_the_masker_and_on_thinking_rows(tok: Any) -> None:
    masker = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False})
    audit = EmptyThinkMasker(masker, tok, {"enable_thinking": False}, check_only=True)
    batch = audit(features(tok, [False, False]))
    assert masker.masked == 2 and audit.trained_blocks == 0 and audit.session.findings == []
    assert (batch["labels"] == IGNORE_INDEX).any()
    thinking = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True)
    thinking(features(tok, [True, True]))  # per-row flags: thinking rows have no empty block to check
    assert thinking.session.findings == []


def test_audit_modes(tok: Any) -> None:
    strict = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True, mode="raise")
    with pytest.raises(MaskingError, match=r"EmptyThinkMasker\(collator, tokenizer"):
        strict(features(tok, [False, True]))
    assert strict.trained_blocks == 1
    quiet = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True, mode="log")
    quiet(features(tok, [False, False]))
    assert quiet.session.counts[("masking", EMPTY_THINK_TRAINED)] == 1
    with pytest.raises(ConfigError, match="mode"):
        EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True, mode="loud")


def test_check_only_does_not_change_masking_behaviour(tok: Any) -> None:
    masker = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False})
    rows = features(tok, [False, True])
    batch = masker(rows)
    assert masker.masked == 1 and masker.session.findings == []
    assert int((batch["labels"][0] == IGNORE_INDEX).sum()) > 0
    thinking_row = rows[1]["input_ids"]
    assert batch["labels"][1].tolist()[: len(thinking_row)] == thinking_row  # the thinking row is left alone


def test_audit_metrics_do_not_pile_up(tok: Any) -> None:
    """Issue 23 #5: per-batch metrics go to the calling trainer's log (none here: a plain loop), else to running
    values per key; the session keeps no list that grows with every batch (437f4ff: 200 entries)."""
    quiet = EmptyThinkMasker(collator(tok), tok, {"enable_thinking": False}, check_only=True, mode="log")
    rows = features(tok, [False, False])
    for _ in range(200):
        quiet(rows)
    assert quiet.session.metrics == {}
    assert quiet.metrics.sums == {"rl_guards/masking/violations": 200.0}
    assert quiet.session.counts[("masking", EMPTY_THINK_TRAINED)] == 200 and len(quiet.session.findings) <= 5
