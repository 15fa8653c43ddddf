"""mix_thinking + honour_thinking_column: per-row enable_thinking really reaches GRPOTrainer's prompt renderer."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from rl_guards.errors import ConfigError
from rl_guards.testing import build_tokenizer, make_dataset
from rl_guards.trl.thinking_mix import honour_thinking_column, mix_thinking


def test_mix_thinking_ratio_seed_and_strata() -> None:
    ds = make_dataset(n_per_task=10)
    mixed = mix_thinking(ds, ratio=0.3, seed=1)
    assert sum(mixed["enable_thinking"]) == 6 and len(mixed) == 20
    assert mix_thinking(ds, ratio=0.3, seed=1)["enable_thinking"] == mixed["enable_thinking"]
    assert mix_thinking(ds, ratio=0.3, seed=2)["enable_thinking"] != mixed["enable_thinking"]
    strat = mix_thinking(ds, ratio=0.5, stratify_by="task")
    for task in ("arith", "echo"):
        assert sum(f for f, t in zip(strat["enable_thinking"], strat["task"], strict=True) if t == task) == 5
    assert mix_thinking(mixed, ratio=1.0)["enable_thinking"] == [True] * 20  # replaces the column
    with pytest.raises(ConfigError, match="ratio"):
        mix_thinking(ds, ratio=1.5)


def test_prefill_message_cannot_stand_in_for_the_flag() -> None:
    # The rejected option, checked byte for byte: TRL closes an assistant prefill as its own turn.
    tok = build_tokenizer(chat_template="qwen3")
    user = [{"role": "user", "content": "What is 3+4?"}]
    target = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    for prefill in ("<think>\n\n</think>\n\n", "<think>\n\n</think>"):
        conversation = [*user, {"role": "assistant", "content": prefill}]
        rendered = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        assert rendered != target
    assert target.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def _record(trainer: Any) -> list[tuple[list[dict[str, Any]], list[list[int]]]]:
    """Outermost recorders: each generation batch's input rows and the prompt ids the trainer rendered."""
    seen: list[tuple[list[dict[str, Any]], list[list[int]]]] = []
    generate, tokenize = trainer._generate_and_score_completions, trainer._tokenize_prompts
    current: list[Any] = []

    def gen(inputs: list[dict[str, Any]]) -> Any:
        current[:] = [inputs]
        return generate(inputs)

    def tok(prompts: list[Any]) -> Any:
        out = tokenize(prompts)
        seen.append((current[0], [list(map(int, ids)) for ids in out[0]]))
        return out

    trainer._generate_and_score_completions, trainer._tokenize_prompts = gen, tok
    return seen


def _expected(tok: Any, prompt: Any, flag: bool) -> list[int]:
    out = tok.apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=True, return_dict=True, enable_thinking=flag
    )
    return [int(t) for t in out["input_ids"]]


@pytest.mark.slow
def test_grpo_renders_each_row_in_its_own_mode(make_grpo_trainer: Any) -> None:
    dataset = mix_thinking(make_dataset(), ratio=0.5, seed=0)
    trainer = make_grpo_trainer(max_steps=2, train_dataset=dataset, per_device_train_batch_size=16)
    handle = honour_thinking_column(trainer)
    seen = _record(trainer)
    trainer.train()
    tok = trainer.processing_class
    rows = [(row, ids) for inputs, batch in seen for row, ids in zip(inputs, batch, strict=True)]
    flags = {row["enable_thinking"] for row, _ in rows}
    assert flags == {True, False} and handle.calls == 2
    for row, ids in rows:
        assert ids == _expected(tok, row["prompt"], row["enable_thinking"])
    empty = tok("<think>\n\n</think>\n\n", add_special_tokens=False)["input_ids"]
    assert all((ids[-len(empty) :] == empty) is (not row["enable_thinking"]) for row, ids in rows)
    handle.uninstall()
    assert trainer._tokenize_prompts.__name__ == "tok"  # the recorder, which wrapped ours, is untouched
    seen.clear()
    trainer.args.max_steps = 3
    trainer.train(resume_from_checkpoint=None)
    after = [(row, ids) for inputs, batch in seen for row, ids in zip(inputs, batch, strict=True)]
    assert after and all(ids == _expected(tok, row["prompt"], True) for row, ids in after)  # global kwargs again


@pytest.mark.slow
def test_stock_trainer_ignores_the_column(make_grpo_trainer: Any) -> None:
    # The negative control: without the wrapper every row renders with the global kwargs (thinking default).
    dataset = mix_thinking(make_dataset(), ratio=0.5, seed=0)
    trainer = make_grpo_trainer(max_steps=1, train_dataset=dataset, per_device_train_batch_size=16)
    seen = _record(trainer)
    trainer.train()
    tok = trainer.processing_class
    off = [
        (row, ids)
        for inputs, batch in seen
        for row, ids in zip(inputs, batch, strict=True)
        if not row["enable_thinking"]
    ]
    assert off and all(ids != _expected(tok, row["prompt"], False) for row, ids in off)


@pytest.mark.slow
def test_refuses_double_install(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=1)
    honour_thinking_column(trainer)
    with pytest.raises(ConfigError, match="already installed"):
        honour_thinking_column(trainer)


@pytest.mark.slow
def test_with_the_hook_each_row_knows_whether_its_prompt_opened(make_grpo_trainer: Any) -> None:
    import rl_guards
    from rl_guards.core.batch import RolloutBatch
    from rl_guards.guards.base import Guard, Reporter
    from rl_guards.guards.template import DoubleThinkGuard

    class Capture(Guard):
        name = "capture"
        config_field = "tasks"
        batches: ClassVar[list[RolloutBatch]] = []

        def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
            Capture.batches.append(batch)

    dataset = mix_thinking(make_dataset(), ratio=0.5, seed=0)
    trainer = make_grpo_trainer(
        max_steps=1,
        train_dataset=dataset,
        per_device_train_batch_size=16,
        processing_class=build_tokenizer(chat_template="qwen3_5_think"),  # prefills <think> in thinking mode only
    )
    rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard, Capture])
    honour_thinking_column(trainer)
    trainer.train()
    (batch,) = Capture.batches
    flags = batch.columns.get("enable_thinking") or batch.thinking
    assert set(flags) == {True, False}
    assert batch.prompt_opened == [bool(f) for f in flags]
