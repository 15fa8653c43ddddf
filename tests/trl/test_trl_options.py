"""TRL's own options with every guard on: each guard works (no guard fails inside while training goes on).

Tools, ``environment_factory`` (its tools rendered into the prompt, its own reward), ``mask_truncated_completions``
and a template without a system role (Gemma 2 style), on the tiny fixture with drift probing at train start and at
each checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.console import capture
from rl_guards.testing import make_dataset

NO_SYSTEM_ROLE = (
    "{%- if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{%- endif %}"
)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


class CounterEnv:
    """An environment with one tool and its own reward."""

    def reset(self, **kwargs: Any) -> None:
        self.calls = 0

    def increment(self, by: int) -> int:
        """Increment the counter.

        Args:
            by: How much to add.
        """
        self.calls += by
        return self.calls

    def get_reward(self) -> float:
        return float(self.calls)


def _string_prompts(dataset: Any) -> Any:
    return dataset.map(lambda row: {"prompt": row["prompt"][0]["content"]})


CASES = {
    "tools": {"tools": [add]},
    "environment_factory": {"environment_factory": CounterEnv},
    "mask_truncated_completions": {"mask_truncated_completions": True, "max_completion_length": 8},
    "template_without_system_role": {"no_system_role": True},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_guard_works_with_the_trl_option(
    case: str, tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trl import GRPOTrainer

    from rl_guards.testing import tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct, echo_match

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    options = dict(CASES[case])
    tokenizer = tiny.load_tokenizer()
    dataset = make_dataset(n_per_task=4)
    if options.pop("no_system_role", False):
        tokenizer.chat_template = NO_SYSTEM_ROLE + tokenizer.chat_template
        dataset = _string_prompts(dataset)  # preflight then renders its own probe conversation (system turn first)
    trainer_options = {k: options.pop(k) for k in ("tools", "environment_factory") if k in options}
    args = tiny_grpo_config(tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=1, **options)
    try:
        trainer = GRPOTrainer(model=tiny.model_dir, processing_class=tokenizer,
                              reward_funcs=[arith_correct, echo_match], args=args, train_dataset=dataset,
                              **trainer_options)  # fmt: skip
    except ImportError as exc:  # TRL's own requirement (environment_factory needs transformers >= 5.2)
        pytest.skip(f"this TRL/transformers cannot run {case}: {exc}")
    run = rl_guards.install(trainer, {"drift": {"mode": "warn"}})
    assert not run.unavailable
    with capture() as caught:
        trainer.train()
    internal = [f for f in run.findings if f.kind == "internal_error" or "internal" in f.kind]
    assert not internal, [f.message for f in internal]
    said = caught.messages
    failed = [text for text in said if " failed: " in text]
    assert not failed, failed
    assert not any(key[1] == "internal_error" for key in run.session.counts), run.summary()
    drift = run.guard("drift")
    assert drift.baseline and drift.checkpoints == [1, 2], run.summary()
    assert run.guard("preflight").last_report is not None
    assert os.path.isdir(tmp_path / "run" / "checkpoint-2")
