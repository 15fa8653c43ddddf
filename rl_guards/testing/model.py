"""A tiny random Qwen3 model, a short SFT warm-up that teaches it to end its turns, and how often it does."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from rl_guards.testing.data import Example, make_examples
from rl_guards.testing.rewards import arith_correct, echo_match

__all__ = ["build_model", "measure_turn_endings", "render_warm_up_example", "warm_up"]

WARM_UP_LR = 5e-3  # high on purpose: 80 steps must teach the turn format to a random model
WARM_UP_BATCH = 16  # conversations per warm-up step
WARM_UP_POOL = 64  # distinct synthetic examples per task the warm-up draws from


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run tiny-tensor work on one thread: on a busy 2-core machine extra threads spin and cost 10x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no {token!r} token: build it with rl_guards.testing.build_tokenizer()")
    return token_id


def build_model(
    tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2
) -> Qwen3ForCausalLM:
    """A randomly initialised ``Qwen3ForCausalLM`` sized to ``len(tokenizer)`` (about 0.2 M parameters at 2048 ranks).

    4 attention heads of ``hidden_size // 4`` dims, 2 KV heads, tied embeddings. ``generation_config.eos_token_id``
    is ``[<|im_end|>, <|endoftext|>]`` and the pad id is ``<|endoftext|>``, as in Qwen3. The caller's RNG state is
    left untouched.
    """
    if hidden_size % 4:
        raise ValueError(f"hidden_size must be a multiple of 4 (4 attention heads), got {hidden_size}")
    im_end = _token_id(tokenizer, "<|im_end|>")
    endoftext = _token_id(tokenizer, "<|endoftext|>")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else endoftext
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = [im_end, endoftext]
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    model.eval()
    return model


def _chat_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    return list(out["input_ids"])


def render_warm_up_example(
    tokenizer: PreTrainedTokenizerBase, example: Example, *, thinking: bool
) -> tuple[list[int], list[int]]:
    """Token ids and loss labels (-100 on the prompt) of one conversation rendered with the tokenizer's template.

    Thinking examples answer ``<think>\\n{reasoning}\\n</think>\\n\\n{answer}``; the others give just the answer,
    which Qwen3's template renders with its own empty think block. The target ends at the first EOS (appended
    if the template does not emit it).
    """
    prompt = [{"role": "user", "content": example.question}]
    content = f"<think>\n{example.reasoning}\n</think>\n\n{example.answer}" if thinking else example.answer
    prompt_ids = _chat_ids(tokenizer, prompt, add_generation_prompt=True)
    full_ids = _chat_ids(tokenizer, [*prompt, {"role": "assistant", "content": content}])
    # Where the rendered conversation stops matching the generation prompt, the completion starts.
    start = 0
    while start < min(len(prompt_ids), len(full_ids)) and prompt_ids[start] == full_ids[start]:
        start += 1
    completion = full_ids[start:]
    eos = tokenizer.eos_token_id
    completion = completion[: completion.index(eos) + 1] if eos in completion else [*completion, eos]
    ids = full_ids[:start] + completion
    return ids, [-100] * start + completion


def warm_up(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, *, steps: int = 80, seed: int = 0
) -> Qwen3ForCausalLM:
    """Plain PyTorch SFT on synthetic arith/echo conversations, half with a short thinking block, half without.

    After about 80 steps the model ends most turns with ``<|im_end|>`` within 16 tokens while its answers stay
    unreliable, so GRPO rewards vary: some groups are all-equal ("dead"), some are not. Returns ``model``
    (trained in place, left in eval mode). Runs on one torch thread; the caller's RNG state is left untouched.
    """
    if steps <= 0:
        return model
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pool = make_examples(WARM_UP_POOL, seed=seed + 1)
    rendered = [
        render_warm_up_example(tokenizer, example, thinking=index % 4 < 2) for index, example in enumerate(pool)
    ]
    rng = random.Random(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARM_UP_LR, weight_decay=0.0)
    model.train()
    with torch.random.fork_rng(devices=[]), _one_thread():
        torch.manual_seed(seed)
        for _ in range(steps):
            batch = rng.sample(rendered, min(WARM_UP_BATCH, len(rendered)))
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (ids, target) in enumerate(batch):
                input_ids[row, : len(ids)] = torch.tensor(ids)
                labels[row, : len(target)] = torch.tensor(target)
                attention[row, : len(ids)] = 1
            loss = model(
                input_ids=input_ids.to(device), attention_mask=attention.to(device), labels=labels.to(device)
            ).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model


@torch.no_grad()
def measure_turn_endings(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[dict[str, str]]] | None = None,
    *,
    answers: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    num_samples: int = 4,
    budgets: tuple[int, ...] = (16, 32),
    seed: int = 0,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Sample completions as GRPO does (temperature 1, no top-k) and report what fraction ends the turn in time.

    Returns ``ends_within_<n>`` for each budget (an EOS among the first n new tokens) and, when ``answers`` and
    ``tasks`` are given, the mean of ``arith_correct`` / ``echo_match`` over their rows (``reward_<name>``) plus
    ``frac_groups_zero_std``: the fraction of prompts whose ``num_samples`` completions all score the same.
    Defaults to the prompts of ``make_dataset()``.
    """
    if prompts is None:
        from rl_guards.testing.data import make_dataset

        dataset = make_dataset()
        prompts, answers, tasks = dataset["prompt"], dataset["answer"], dataset["task"]
    eos_ids = model.generation_config.eos_token_id
    eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [
        _chat_ids(tokenizer, list(prompt), add_generation_prompt=True, **(chat_template_kwargs or {}))
        for prompt in prompts
    ]
    width = max(len(ids) for ids in encoded)
    input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in encoded])  # left padded
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]), _one_thread():
        torch.manual_seed(seed)
        output = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max(budgets),
            num_return_sequences=num_samples,
            eos_token_id=sorted(eos_ids),
            pad_token_id=pad_id,
        )
    new_tokens = output[:, width:].tolist()
    first_eos = [next((i for i, t in enumerate(row) if t in eos_ids), None) for row in new_tokens]
    stats = {
        f"ends_within_{budget}": sum(i is not None and i < budget for i in first_eos) / len(first_eos)
        for budget in budgets
    }
    if answers is not None and tasks is not None:
        texts = [
            tokenizer.decode(row[: i + 1] if i is not None else row, skip_special_tokens=True)
            for row, i in zip(new_tokens, first_eos, strict=True)
        ]
        row_answers = [answer for answer in answers for _ in range(num_samples)]
        row_tasks = [task for task in tasks for _ in range(num_samples)]
        scores = [0.0] * len(texts)  # each row's score from the reward function of its task
        for name, func in (("arith_correct", arith_correct), ("echo_match", echo_match)):
            values = func(texts, row_answers, task=row_tasks)
            mine = [v for v in values if v is not None]
            if mine:
                stats[f"reward_{name}"] = sum(mine) / len(mine)
            scores = [score if value is None else value for score, value in zip(scores, values, strict=True)]
        groups = [scores[i : i + num_samples] for i in range(0, len(scores), num_samples)]
        stats["frac_groups_zero_std"] = sum(len(set(group)) == 1 for group in groups) / len(groups)
    return stats
