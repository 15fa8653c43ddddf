"""TRL's own GRPO tests with ``rl_guards.install`` called on each trainer right after it is built.

Ported from ``tests/test_grpo_trainer.py`` of TRL's repository (``test_train_with_tools``,
``test_train_with_mask_truncated_completions``, ``test_train_with_malformed_tool_calls``,
``test_train_with_unknown_environment_raises``) onto the tiny offline fixture, the Hub being unreachable: each
keeps its test's GRPOConfig (batch 3, 3 generations, completion length, masking, loss type), its mocked
``generate`` (token ids re-encoded with the fixture's tokenizer, whose added tokens sit at other ids) and its
assertions; the model is the tiny Qwen3, the reward model a tiny random ``Qwen3ForSequenceClassification`` on the
same tokenizer, and runs are cut to 3 steps.

TRL's mocks answer only the batch shapes training uses (3 rows, then 2 after the tool calls): the drift probe
must generate through the same calls as training, batch for batch, or its baseline fails and drift is off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import torch

import rl_guards
from rl_guards.testing import make_dataset, tiny_grpo_config

pytestmark = pytest.mark.slow  # every test here trains a real GRPOTrainer on the tiny model


def multiply_tool(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


async def async_multiply_tool(a: int, b: int) -> int:
    """
    Asynchronously multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


@pytest.fixture(scope="module")
def reward_model(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random sequence-classification reward model on the fixture's tokenizer (TRL's tests use
    ``tiny-Qwen2ForSequenceClassification-2.5`` from the Hub)."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    tokenizer = tiny.load_tokenizer()
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("reward_model")
    Qwen3ForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _ids(tokenizer: Any, texts: list[str], width: int | None = None) -> torch.Tensor:
    """TRL's hand-written completion ids, encoded with this tokenizer and right-padded with its pad token."""
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    width = width or max(len(r) for r in rows)
    return torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])


def _trainer(tiny: Any, reward_model: str, out: Path, dataset: Any, **options: Any) -> Any:
    from trl import GRPOTrainer

    trainer_options = {k: options.pop(k) for k in ("tools", "environment_factory") if k in options}
    args = tiny_grpo_config(out, learning_rate=0.1, per_device_train_batch_size=3, num_generations=3, **options)
    return GRPOTrainer(model=tiny.model_dir, processing_class=tiny.load_tokenizer(), reward_funcs=reward_model,
                       args=args, train_dataset=dataset, **trainer_options)  # fmt: skip


def _params(trainer: Any) -> dict[str, torch.Tensor]:
    return {n: p.clone() for n, p in trainer.model.named_parameters()}


def _assert_trained(trainer: Any, before: dict[str, torch.Tensor]) -> None:
    assert trainer.state.log_history[-1]["train_loss"] is not None
    for name, param in before.items():
        assert not torch.equal(param, trainer.model.get_parameter(name)), f"Parameter {name} has not changed."


def _assert_drift_measured(run: Any) -> None:
    """The drift baseline was generated (the probe went through TRL's path) and no probe failed."""
    failed = [f.message for f in run.findings if f.guard == "drift"]
    assert not failed, failed
    assert run.guard("drift").baseline, run.summary()


@pytest.mark.parametrize("tools", [[multiply_tool], [async_multiply_tool]], ids=["sync", "async"])
def test_train_with_tools(tiny: Any, reward_model: str, tmp_path: Path, tools: list[Any]) -> None:
    # The model makes 3 completions per prompt, 2 of them tool calls (one succeeds, one has a wrong argument name);
    # the 2 calls are then answered in a second generation of 2 rows.
    trainer = _trainer(tiny, reward_model, tmp_path, make_dataset(), max_completion_length=128, tools=tools)
    run = rl_guards.install(trainer)
    tokenizer = trainer.processing_class
    name = tools[0].__name__
    first = _ids(tokenizer, [
        f'<tool_call>\n{{"name": "{name}", "arguments": {{"a": 3, "b": 4}}}}\n</tool_call><|im_end|>',
        f'<tool_call>\n{{"name": "{name}", "arguments": {{"a": 3, "c": 4}}}}\n</tool_call><|im_end|>',
        "I don't know any tool<|im_end|>",
    ])  # fmt: skip
    second = _ids(tokenizer, ["Done!<|im_end|>", "Done!<|im_end|>"])
    before = _params(trainer)

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        completion_ids = first if input_ids.shape[0] == 3 else second  # the second call has the 2 tool calls
        return torch.cat([input_ids, completion_ids.to(input_ids.device)], dim=-1)

    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()

    _assert_trained(trainer, before)
    last = trainer.state.log_history[-2]  # the last step's log (TRL's tests log less often: their final entry)
    assert last["tools/call_frequency"] == pytest.approx(2 / 3)
    assert last["tools/failure_frequency"] == pytest.approx(1 / 2)
    _assert_drift_measured(run)


def test_train_with_mask_truncated_completions(tiny: Any, reward_model: str, tmp_path: Path) -> None:
    dataset = make_dataset().map(lambda row: {"prompt": row["prompt"][0]["content"]})  # standard prompts
    trainer = _trainer(tiny, reward_model, tmp_path, dataset, max_completion_length=8,
                       mask_truncated_completions=True, loss_type="dapo")  # fmt: skip
    run = rl_guards.install(trainer)
    tokenizer = trainer.processing_class
    eos, pad = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    completion_ids = torch.tensor([
        [1, 2, 3, 4, 5, 6, 7, 8],  # truncated
        [9, 10, 11, eos, pad, pad, pad, pad],  # ends with EOS
        [12, 13, 14, 15, 16, 17, 18, eos],  # EOS just within the limit
    ])  # fmt: skip
    before = _params(trainer)

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.cat([input_ids, completion_ids.to(input_ids.device)], dim=1)

    with patch("transformers.generation.utils.GenerationMixin.generate", side_effect=fake_generate):
        trainer.train()

    _assert_trained(trainer, before)
    _assert_drift_measured(run)


def test_train_with_malformed_tool_calls(tiny: Any, reward_model: str, tmp_path: Path) -> None:
    trainer = _trainer(tiny, reward_model, tmp_path, make_dataset(), max_completion_length=128, tools=[multiply_tool])
    run = rl_guards.install(trainer)
    completion_ids = _ids(trainer.processing_class, [
        '<tool_call>\n{"arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>',  # no name
        '<toolcall>\n{"arguments": {"a": 3, "b": 4}}\n</toolcall><|im_end|>',  # not the tool-call markup
        '<tool_call>\n{"arguments": {a: 3, b: 4}}\n</tool_call><|im_end|>',  # not JSON
    ])  # fmt: skip
    before = _params(trainer)

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        assert input_ids.shape[0] == 3  # a second call (fewer rows) would mean a malformed call was run as a tool
        return torch.cat([input_ids, completion_ids.to(input_ids.device)], dim=-1)

    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()

    _assert_trained(trainer, before)
    _assert_drift_measured(run)


def _transformers_below(version: str) -> bool:
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) < Version(version)


@pytest.mark.skipif(_transformers_below("5.2.0"), reason="TRL's environment_factory needs transformers >= 5.2.0")
def test_train_with_unknown_environment_raises(
    tiny: Any, reward_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An example whose `environment` matches no configured environment fails with TRL's clear error. The drift
    # probe meets it first, at train start: it says it is the trainer's own error, not a memory problem.
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    dataset = make_dataset().map(lambda row: {"environment": "unknown"})

    class CounterEnvironment:
        def reset(self, **kwargs: Any) -> None: ...

        def increment(self, step: int) -> int:
            """
            Increment the internal counter.

            Args:
                step: Value to add to the counter.

            Returns:
                The updated counter value.
            """
            return step

    trainer = _trainer(tiny, reward_model, tmp_path, dataset, environment_factory={"counter": CounterEnvironment})
    run = rl_guards.install(trainer)

    with pytest.raises(ValueError, match="not among the environments"):
        trainer.train()

    said = [f.message for f in run.findings if f.guard == "drift"]
    assert len(said) == 1 and "not among the environments" in said[0], said
    assert "trainer's own" in said[0] and "memory" not in said[0] and "prompts_per_task" not in said[0], said[0]
