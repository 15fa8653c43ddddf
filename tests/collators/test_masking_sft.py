"""SFT labels: the pure label rules, assistant markers derived from real chat templates, TRL's training templates
clean, and real SFTTrainer runs where the wrapped collator catches the silent masking failures."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from rl_guards.collators.sft_masks import MaskCheckingCollator, assistant_markers
from rl_guards.core import masks as M
from rl_guards.errors import ConfigError, MaskingError
from rl_guards.testing.logs import shows
from rl_guards.testing.model import build_model
from rl_guards.testing.tokenizer import build_tokenizer, chat_template_text

IGN = M.IGNORE_INDEX

# ----- pure rules on synthetic ids ------------------------------------------------------------------------------
MARKERS = M.AssistantMarkers(header=(1, 2), end=(3,), trailer=(4,))
# system/user turn (10 11 3 4), assistant (1 2 | 20 21 3 | 4), user (12 3 4), assistant (1 2 | 22 3 | 4)
CONV = [10, 11, 3, 4, 1, 2, 20, 21, 3, 4, 12, 3, 4, 1, 2, 22, 3, 4]
ASSISTANT = {6, 7, 8, 15, 16}
LAST = {15, 16}


def labels_for(trained: set[int], ids: list[int] = CONV) -> list[int]:
    return [t if j in trained else IGN for j, t in enumerate(ids)]


LABEL_CASES = [
    # name, trained positions, expect, kinds found
    ("assistant_only_clean", ASSISTANT, "assistant_only", set()),
    ("assistant_only_header_and_trailer_either_way", ASSISTANT | {4, 5, 9, 17}, "assistant_only", set()),
    ("everything_trained", set(range(len(CONV))), "assistant_only", {M.PROMPT_TRAINED}),
    ("end_of_turn_untrained", ASSISTANT - {16}, "assistant_only", {M.ASSISTANT_UNTRAINED}),
    ("earlier_turn_untrained", LAST, "assistant_only", {M.ASSISTANT_UNTRAINED}),
    ("auto_last_turn_only_is_fine", LAST, "auto", set()),
    ("auto_everything_trained", set(range(len(CONV))), "auto", {M.PROMPT_TRAINED}),
    ("auto_last_turn_untrained", ASSISTANT - LAST, "auto", {M.ASSISTANT_UNTRAINED}),
    ("completion_only_clean", LAST, "completion_only", set()),
    ("completion_only_everything", set(range(len(CONV))), "completion_only", {M.PROMPT_TRAINED}),
    ("completion_only_starts_in_user_turn", {11, *LAST}, "completion_only", {M.PROMPT_TRAINED}),
    ("completion_only_hole", {15}, "completion_only", {M.ASSISTANT_UNTRAINED}),
    ("nothing_in_row", set(), "assistant_only", {M.ASSISTANT_UNTRAINED}),
]


@pytest.mark.parametrize(("name", "trained", "expect", "kinds"), LABEL_CASES, ids=[c[0] for c in LABEL_CASES])
def test_label_rules(name: str, trained: set[int], expect: str, kinds: set[str]) -> None:
    spans = M.find_assistant_spans(CONV, MARKERS)
    assert [(s.start, s.stop) for s in spans] == [(6, 9), (15, 17)]
    found = M.check_label_row(labels_for(trained), spans, len(CONV), expect=expect)
    assert set(found) == kinds, found


@pytest.mark.parametrize(
    ("ids", "trained", "kinds"),
    [
        ([5, 6, 7, 8], {2, 3}, set()),  # plain prompt-completion: masked prompt, trained completion
        ([5, 6, 7, 8], {0, 1, 2, 3}, {M.PROMPT_TRAINED}),
        ([5, 6, 7, 8], {2}, {M.ASSISTANT_UNTRAINED}),  # a hole before the end
        ([5, 6, 7, 8], set(), set()),  # truncation ate the completion: the batch rule decides
    ],
)
def test_rows_without_turns_follow_completion_rules(ids: list[int], trained: set[int], kinds: set[str]) -> None:
    assert set(M.check_label_row(labels_for(trained, ids), [], len(ids), expect="auto")) == kinds


def test_truncated_turn_runs_to_the_end() -> None:
    spans = M.find_assistant_spans([10, 1, 2, 20, 21], MARKERS)
    assert [(s.start, s.stop, s.trailer_stop) for s in spans] == [(3, 5, 5)]


def test_render_marks_spans_and_whitespace() -> None:
    text = M.render_spans(["<u>", "hi\n", " ok", "<e>"], [0, 0, 1, 1], [False, True, True, False])
    assert text == "⟦<u>⟨!hi↵!⟩⟧«⟨!·ok!⟩<e>»"
    long = M.render_spans([str(i % 10) for i in range(300)], [1] * 300, [i == 200 for i in range(300)], max_tokens=20)
    assert long.startswith("…«") and "⟨!0!⟩" in long and long.endswith("…(+86 tokens)")


def test_token_pieces_keep_split_characters_whole() -> None:
    tok = build_tokenizer(2048, "qwen3")
    ids = tok("naïve 猫 café", add_special_tokens=False)["input_ids"]
    pieces = M.token_pieces(lambda x: tok.decode(x), ids)
    assert "".join(pieces) == "naïve 猫 café" and len(pieces) == len(ids)


# ----- markers from real chat templates -------------------------------------------------------------------------
# Non-Qwen templates need their markers as single tokens, as their real tokenizers have them.
SPECIAL = {
    "gemma3_training": ["<bos>", "<start_of_turn>", "<end_of_turn>"],
    "phi3_training": ["<|user|>", "<|assistant|>", "<|end|>", "<|system|>"],
    "llama3_training": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "deepseek_r1_distill_training": [
        "<｜begin▁of▁sentence｜>",
        "<｜User｜>",
        "<｜Assistant｜>",
        "<｜end▁of▁sentence｜>",
    ],
}
MARKER_CASES = [
    ("qwen3", "<|im_start|>assistant\n", "<|im_end|>", "\n"),
    ("qwen3_training", "<|im_start|>assistant\n", "<|im_end|>", "\n"),
    ("qwen2_5_training", "<|im_start|>assistant\n", "<|im_end|>", "\n"),
    ("qwen3_5_think", "<|im_start|>assistant\n", "<|im_end|>", "\n"),  # generation prompt prefills <think>
    ("qwen3_5_think_training", "<|im_start|>assistant\n<think>", "<|im_end|>", "\n"),
    ("gemma3_training", "<start_of_turn>model\n", "<end_of_turn>", "\n"),
    ("phi3_training", "<|assistant|>\n", "<|end|>", "\n"),
    ("llama3_training", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", ""),
    ("deepseek_r1_distill_training", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", ""),
]


def template_tokenizer(name: str) -> Any:
    tok = build_tokenizer(2048, name)
    if name in SPECIAL:
        tok.add_special_tokens({"additional_special_tokens": SPECIAL[name]})
        if name == "llama3_training":
            tok.bos_token = "<|begin_of_text|>"
        if name == "gemma3_training":
            tok.bos_token = "<bos>"
        if name == "deepseek_r1_distill_training":
            tok.bos_token = "<｜begin▁of▁sentence｜>"
    return tok


@pytest.mark.parametrize(("name", "header", "end", "trailer"), MARKER_CASES, ids=[c[0] for c in MARKER_CASES])
def test_assistant_markers_from_template(name: str, header: str, end: str, trailer: str) -> None:
    tok = template_tokenizer(name)
    markers = assistant_markers(tok)
    got = (tok.decode(list(markers.header)), tok.decode(list(markers.end)), tok.decode(list(markers.trailer)))
    assert got == (header, end, trailer)


CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": "It is 5."},
    {"role": "user", "content": "And 4+4?"},
    {"role": "assistant", "content": "8."},
]


def collate_rows(tok: Any, rows: list[tuple[list[int], list[int]]]) -> MaskCheckingCollator:
    return MaskCheckingCollator(DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id), tok, mode="log")


@pytest.mark.parametrize("name", [c[0] for c in MARKER_CASES if c[0].endswith("_training")])
def test_trl_training_templates_give_clean_assistant_labels(name: str) -> None:
    """Labels from the template's own {% generation %} mask pass; the same rows fully trained do not."""
    tok = template_tokenizer(name)
    messages = CONVERSATION[1:] if name == "gemma3_training" else CONVERSATION  # gemma folds system into user
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    assert 0 < sum(mask) < len(ids)
    collator = collate_rows(tok, [])
    good = {"input_ids": ids, "labels": [t if m else IGN for t, m in zip(ids, mask, strict=True)]}
    short = {"input_ids": ids[:-3], "labels": good["labels"][:-3]}
    report, _ = collator.check(collator.collator([good, short]))
    assert report.ok, report
    report, _ = collator.check(collator.collator([{"input_ids": ids, "labels": ids}]))
    assert report.kinds == [M.PROMPT_TRAINED]


# ----- the collator on hand-made batches ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen_tok() -> Any:
    return build_tokenizer(2048, "qwen3")


def conversation_row(tok: Any, *, trained: str) -> dict[str, list[int]]:
    training = build_tokenizer(2048, "qwen3_training")
    out = training.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids = list(out["input_ids"])
    if trained == "all":
        return {"input_ids": ids, "labels": ids}
    if trained == "none":
        return {"input_ids": ids, "labels": [IGN] * len(ids)}
    labels = [t if m else IGN for t, m in zip(ids, out["assistant_masks"], strict=True)]
    if trained == "shifted":
        labels = [*labels[1:], IGN]
    return {"input_ids": ids, "labels": labels}


def test_collator_modes_and_sampling(qwen_tok: Any) -> None:
    inner = DataCollatorForLanguageModeling(pad_token_id=qwen_tok.pad_token_id)
    rows = [conversation_row(qwen_tok, trained="assistant"), conversation_row(qwen_tok, trained="all")]
    raising = MaskCheckingCollator(inner, qwen_tok, expect="assistant_only")
    with pytest.raises(MaskingError, match="prompt_trained: 1 of 2 sequences") as err:
        raising(rows)
    assert "row 1: «⟨!<|im_start|>system↵Answer·briefly.<|im_end|>↵" in str(err.value)
    assert "assistant_only_loss=True" in str(err.value)

    warn = MaskCheckingCollator(inner, qwen_tok, mode="warn", check_every=2)
    with shows("prompt_trained"):
        for _ in range(4):
            batch = warn(rows)
    assert warn.checked == 2 and warn.session.counts[("masking", M.PROMPT_TRAINED)] == 2
    assert set(batch) >= {"input_ids", "labels"} and warn.pad_token_id == qwen_tok.pad_token_id


def test_collator_pickles_for_dataloader_workers(qwen_tok: Any) -> None:
    import pickle

    collator = MaskCheckingCollator(DataCollatorForLanguageModeling(pad_token_id=qwen_tok.pad_token_id), qwen_tok)
    copy = pickle.loads(pickle.dumps(collator))
    assert copy.markers == collator.markers and copy.pad_token_id == qwen_tok.pad_token_id
    with pytest.raises(MaskingError, match=M.PROMPT_TRAINED):
        copy([conversation_row(qwen_tok, trained="all")])


@pytest.mark.parametrize(
    ("trained", "kind"),
    [("none", M.NOTHING_TRAINED), ("shifted", M.LABEL_MISMATCH), ("assistant", None)],
)
def test_collator_batch_rules(qwen_tok: Any, trained: str, kind: str | None) -> None:
    collator = MaskCheckingCollator(DataCollatorForLanguageModeling(pad_token_id=qwen_tok.pad_token_id), qwen_tok)
    rows = [conversation_row(qwen_tok, trained=trained)] * 2
    if kind is None:
        collator(rows)
        return
    with pytest.raises(MaskingError, match=kind):
        collator(rows)


def test_left_padded_batches(qwen_tok: Any) -> None:
    rows = [conversation_row(qwen_tok, trained="assistant"), conversation_row(qwen_tok, trained="assistant")]
    rows[1] = {k: v[:-6] for k, v in rows[1].items()}
    width = max(len(r["input_ids"]) for r in rows)
    batch = {
        "input_ids": torch.tensor([[0] * (width - len(r["input_ids"])) + r["input_ids"] for r in rows]),
        "labels": torch.tensor([[IGN] * (width - len(r["labels"])) + r["labels"] for r in rows]),
        "attention_mask": torch.tensor([[0] * (width - len(r["input_ids"])) + [1] * len(r["input_ids"]) for r in rows]),
    }
    collator = MaskCheckingCollator(lambda x: x, qwen_tok, expect="assistant_only")
    assert collator.check(batch)[0].ok
    j = width - len(rows[1]["input_ids"]) + 3  # a token of row 1's system turn, after its left padding
    batch["labels"][1, j] = batch["input_ids"][1, j]
    assert collator.check(batch)[0].kinds == [M.PROMPT_TRAINED]


def test_assistant_only_needs_a_template_it_can_read(qwen_tok: Any) -> None:
    tok = build_tokenizer(2048, "qwen3")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ConfigError, match="cannot locate assistant turns"):
        MaskCheckingCollator(lambda x: x, tok, expect="assistant_only")
    assert MaskCheckingCollator(lambda x: x, tok).markers is None  # auto: prompt/completion rules only


# ----- real SFTTrainer runs --------------------------------------------------------------------------------------
MESSAGES = [
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"What is {i}+1?"},
        {"role": "assistant", "content": f"It is {i + 1}."},
        {"role": "user", "content": "And +2?"},
        {"role": "assistant", "content": f"{i + 2}."},
    ]
    for i in range(8)
]


def no_eot_template() -> str:
    """qwen3_training with the end-of-turn token moved out of {% generation %}: TRL only logs a warning."""
    text = chat_template_text("qwen3_training").replace("{%- generation %}", "").replace("{%- endgeneration %}", "")
    body = "{{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    assert body in text
    return text.replace(body, "{%- generation %}" + body + "{%- endgeneration %}")


def sft_run(tmp_path: Path, dataset: Dataset, template: str = "qwen3", **config: Any) -> MaskCheckingCollator:
    tok = build_tokenizer(2048, template)
    warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)
    args = SFTConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        max_steps=2,
        per_device_train_batch_size=2,
        save_strategy="no",
        disable_tqdm=True,
        **config,
    )
    trainer = SFTTrainer(model=build_model(tok), processing_class=tok, args=args, train_dataset=dataset)
    trainer.data_collator = MaskCheckingCollator(trainer.data_collator, tok)
    trainer.train()
    return trainer.data_collator


ASSISTANT_ONLY = {"assistant_only_loss": True}
NOT_COMPLETION_ONLY = {"completion_only_loss": False}
SFT_CASES = [
    # name, dataset, template, SFTConfig overrides, expected kind (None: trains clean)
    ("assistant_only_loss", "messages", "qwen3", ASSISTANT_ONLY, None),
    ("assistant_only_loss_packed", "messages", "qwen3", {"assistant_only_loss": True, "packing": True}, None),
    ("prompt_completion_default", "prompt_completion", "qwen3", {}, None),
    ("messages_without_assistant_only_loss", "messages", "qwen3", {}, M.PROMPT_TRAINED),
    ("prompt_completion_completion_only_false", "prompt_completion", "qwen3", NOT_COMPLETION_ONLY, M.PROMPT_TRAINED),
    ("text_prompt_completion_completion_only_false", "text", "qwen3", NOT_COMPLETION_ONLY, M.PROMPT_TRAINED),
    ("generation_markers_without_end_of_turn", "messages", "no_eot", ASSISTANT_ONLY, M.ASSISTANT_UNTRAINED),
]  # fmt: skip


def dataset_of(kind: str) -> Dataset:
    if kind == "messages":
        return Dataset.from_dict({"messages": MESSAGES})
    if kind == "prompt_completion":
        return Dataset.from_dict({"prompt": [m[:4] for m in MESSAGES], "completion": [m[4:] for m in MESSAGES]})
    return Dataset.from_dict(
        {"prompt": [f"Q: {i}+1=" for i in range(8)], "completion": [f" {i + 1}" for i in range(8)]}
    )


@pytest.mark.slow
@pytest.mark.parametrize(("name", "data", "template", "config", "kind"), SFT_CASES, ids=[c[0] for c in SFT_CASES])
def test_sft_trainer_runs(
    tmp_path: Path, name: str, data: str, template: str, config: dict[str, Any], kind: str | None
) -> None:
    template_text = no_eot_template() if template == "no_eot" else template
    if kind is None:
        collator = sft_run(tmp_path, dataset_of(data), template_text, **config)
        assert collator.checked >= 2 and not collator.session.findings
        return
    with pytest.raises(MaskingError, match=kind) as err:
        sft_run(tmp_path, dataset_of(data), template_text, **config)
    assert "Fix:" in str(err.value) and "⟨!" in str(err.value)


@pytest.mark.slow
def test_collator_metrics_reach_the_sft_log_and_stay_bounded(tmp_path: Path) -> None:
    """Issue 23 #5: the wrapper's metrics reach ``log_history`` through SFTTrainer's own buffer, every logging
    step, and nothing piles up in the collator (437f4ff: none in the log, one list entry per batch in the session)."""
    tok = build_tokenizer(2048, "qwen3")
    warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)
    args = SFTConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
        max_steps=12, per_device_train_batch_size=2, logging_steps=2, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    # messages without assistant_only_loss: every token trains, a prompt_trained violation on every batch
    trainer = SFTTrainer(
        model=build_model(tok), processing_class=tok, args=args, train_dataset=Dataset.from_dict({"messages": MESSAGES})
    )
    collator = MaskCheckingCollator(trainer.data_collator, tok, mode="log")
    trainer.data_collator = collator
    trainer.train()
    rows = [row for row in trainer.state.log_history if "loss" in row]
    assert len(rows) == 6
    for row in rows:  # averaged over the two batches of each logging step
        assert row["rl_guards/masking/violating_rows"] == 2.0 and row["rl_guards/masking/violations"] == 1.0
    checked = [row["rl_guards/masking/checked_batches"] for row in rows]
    # a running count, shown as it stands at each log (the loader may have collated a batch ahead)
    assert checked == sorted(set(checked)) and all(c == int(c) for c in checked) and checked[-1] <= collator.checked
    assert collator.session.metrics == {}  # popped at every batch
    assert collator.metrics.last["rl_guards/masking/checked_batches"] == 12.0
    assert collator.metrics.delivered == 36 and collator.session.counts[("masking", M.PROMPT_TRAINED)] == 12
    assert len(collator.session.findings) <= collator.session.MAX_FINDINGS_PER_KIND


def test_collator_memory_is_bounded_without_a_trainer(qwen_tok: Any) -> None:
    """Called from a custom loop (no trainer to log to): running values per key, no list growing per batch."""
    features = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}]

    def collate(rows: list[Any]) -> dict[str, Any]:
        ids = torch.tensor([r["input_ids"] for r in rows])
        return {"input_ids": ids, "labels": torch.tensor([r["labels"] for r in rows]), "attention_mask": ids * 0 + 1}

    collator = MaskCheckingCollator(collate, qwen_tok, mode="log", expect="completion_only")
    for _ in range(500):
        collator(features)
    assert collator.session.metrics == {} and collator.metrics.delivered == 0
    assert collator.metrics.last["rl_guards/masking/checked_batches"] == 500.0
    assert set(collator.metrics.sums) == {
        "rl_guards/masking/checked_batches",
        "rl_guards/masking/violating_rows",
        "rl_guards/masking/violations",
    }
