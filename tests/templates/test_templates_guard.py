"""DoubleThinkGuard on a real GRPOTrainer: rows rendered by the trainer's own ``_tokenize_prompts``."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from datasets import Dataset

import rl_guards
from rl_guards.errors import TemplateError
from rl_guards.guards.base import GuardSession, RunContext, run_hook
from rl_guards.guards.template import DoubleThinkGuard
from rl_guards.testing import build_tokenizer, make_dataset
from rl_guards.testing.logs import shows


class OpenedProbe:
    """A reward function that records the template verdict the hook hands out."""

    __name__ = "opened_probe"
    seen: ClassVar[list[tuple[bool, bool]]] = []

    def set_prompt_opened(self, thinking_on: bool, thinking_off: bool) -> None:
        OpenedProbe.seen.append((thinking_on, thinking_off))

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return [0.0] * len(completions)


def _prefilled(ds: Dataset, prefill: str = "<think>\n") -> Dataset:
    return ds.map(lambda row: {"prompt": [*row["prompt"], {"role": "assistant", "content": prefill}]})


def _findings(trainer: Any) -> list[float]:
    key = "rl_guards/template/findings"
    return [row[key] for row in trainer.state.log_history if key in row]


@pytest.mark.slow
def test_clean_qwen3_run_passes(make_grpo_trainer: Any) -> None:
    OpenedProbe.seen.clear()
    trainer = make_grpo_trainer(max_steps=1, reward_funcs=[OpenedProbe()])
    run = rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard])
    trainer.train()
    guard = run.guard("template")
    assert guard.report is not None and not guard.report.findings, guard.report.format()
    assert len([r for r in guard.report.renders if r.startswith("dataset row")]) == 4  # template.num_prompts
    assert guard.prompt_opened(True) is False and guard.prompt_opened(False) is False
    assert OpenedProbe.seen == [(False, False)]


@pytest.mark.slow
def test_prefill_on_a_prefilling_template_stops_the_run(make_grpo_trainer: Any) -> None:
    OpenedProbe.seen.clear()
    trainer = make_grpo_trainer(
        max_steps=1,
        reward_funcs=[OpenedProbe()],
        processing_class=build_tokenizer(chat_template="qwen3_5_think"),
        train_dataset=_prefilled(make_dataset()),
    )
    rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard])
    with pytest.raises(TemplateError) as info:
        trainer.train()
    text = str(info.value)
    assert "prefill_duplicates_template" in text or "unclosed '<think>'" in text
    assert "the template already adds it" in text
    assert "<think><|im_end|>\\n<|im_start|>assistant\\n<think>\\n" in text  # rendered, whitespace visible
    assert trainer.state.global_step == 0


@pytest.mark.slow
def test_warn_mode_keeps_training_and_shares_the_verdict(make_grpo_trainer: Any) -> None:
    OpenedProbe.seen.clear()
    trainer = make_grpo_trainer(
        max_steps=1,
        reward_funcs=[OpenedProbe()],
        processing_class=build_tokenizer(chat_template="qwen3_5_think"),
        train_dataset=_prefilled(make_dataset()),
    )
    run = rl_guards.install(trainer, {"template": {"mode": "warn"}}, guards=[DoubleThinkGuard])
    with shows("already adds it"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert run.session.counts[("template", "prefill_duplicates_template")] == 1
    assert OpenedProbe.seen == [(True, False)]  # qwen3_5_think prefills <think> only in thinking mode


@pytest.mark.slow
def test_ignored_non_thinking_flag_stops_the_run(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(
        max_steps=1,
        processing_class=build_tokenizer(chat_template="deepseek_r1_distill"),
        chat_template_kwargs={"enable_thinking": False},
    )
    rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard])
    with pytest.raises(TemplateError, match=r"thinking_flag_ignored|enable_thinking=False still leaves"):
        trainer.train()


@pytest.mark.slow
def test_findings_metric_reaches_log_history(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(
        max_steps=1,
        processing_class=build_tokenizer(chat_template="qwen3_5_think"),
        train_dataset=_prefilled(make_dataset()),
    )
    rl_guards.install(trainer, {"template": {"mode": "log"}}, guards=[DoubleThinkGuard])
    trainer.train()
    assert _findings(trainer) == [1.0]


def test_guard_without_trainer_uses_the_mirror_render_path() -> None:
    # No render_prompts in the context: the guard renders through the mirror of _tokenize_prompts.
    guard = DoubleThinkGuard(rl_guards.GuardsConfig.from_dict({"template": {"mode": "log", "num_prompts": 2}}))
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]] * 3})
    guard.setup(
        RunContext(
            tokenizer=build_tokenizer(chat_template="qwen3"),
            train_dataset=_prefilled(ds),
            chat_template_kwargs={"enable_thinking": False},
        )
    )
    session = GuardSession()
    run_hook(guard, "on_train_begin", session, 0)
    assert session.counts[("template", "prefill_duplicates_template")] == 1
    assert "2/2 rendered dataset prompts" in session.findings[0].message
    assert session.metrics["rl_guards/template/findings"] == [1.0]


@pytest.mark.slow
def test_unhonoured_thinking_column_stops_the_run(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=1, train_dataset=make_dataset(thinking="mixed"))
    rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard])
    with pytest.raises(TemplateError, match="honour_thinking_column") as info:
        trainer.train()
    assert "8/16 rows have enable_thinking=False" in str(info.value)


@pytest.mark.slow
def test_mixed_deepseek_run_cannot_turn_thinking_off(make_grpo_trainer: Any) -> None:
    from rl_guards.trl.thinking_mix import honour_thinking_column

    trainer = make_grpo_trainer(
        max_steps=1,
        train_dataset=make_dataset(thinking="mixed"),
        processing_class=build_tokenizer(chat_template="deepseek_r1_distill"),
    )
    rl_guards.install(trainer, {"template": {"mode": "raise"}}, guards=[DoubleThinkGuard])
    honour_thinking_column(trainer)
    with pytest.raises(TemplateError, match="enable_thinking=False still leaves"):
        trainer.train()


# ----- issue 41 item 7: plain-text prompts and no chat template are a supported shape -----------------------------
def _plain_text_context(tmp_path: Any, prompts: list[Any]) -> RunContext:
    from rl_guards.testing import tiny_grpo_config

    tokenizer = build_tokenizer()
    tokenizer.chat_template = None  # a base model's tokenizer: TRL's standard plain-text format needs none
    return RunContext(tokenizer=tokenizer, args=tiny_grpo_config(tmp_path), train_dataset=Dataset.from_dict(
        {"prompt": prompts, "task": ["arith"] * len(prompts)}))  # fmt: skip


def test_plain_text_prompts_without_a_chat_template_get_a_note_not_a_failure(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rl_guards.guards.preflight import PreflightGuard

    ctx = _plain_text_context(tmp_path, ["What is 2+2? Answer with the number.", "Repeat the word: apple"])
    session = GuardSession()
    guards = [PreflightGuard(rl_guards.GuardsConfig()), DoubleThinkGuard(rl_guards.GuardsConfig())]
    for guard in guards:
        guard.setup(ctx)
        run_hook(guard, "on_train_begin", session, 0)
    kinds = {(f.guard, f.kind) for f in session.findings}
    assert ("preflight", "internal_error") not in kinds  # e1b9f62: ValueError, no chat template
    assert ("template", "render_failed") not in kinds  # e1b9f62: "probe render failed"
    assert not [f for f in session.findings if f.severity != "info"], session.findings
    note = session.notes[("template", "no_chat_template")]
    assert "prompts are plain text" in note and "do not apply" in note and "still checked" in note
    printed = guards[0].last_report.render()  # the preflight report says it too, as an info line
    assert "[plain_text_prompts] prompts are plain text and the tokenizer has no chat" in printed
    assert "still checked:" in " ".join(printed.split()) and "blocking" not in printed.split("\n", 1)[1]


def test_without_a_chat_template_a_doubled_prefill_in_the_text_is_still_caught(tmp_path: Any) -> None:
    ctx = _plain_text_context(tmp_path, ["What is 2+2?\n<think>\n<think>\n"] * 2)
    guard = DoubleThinkGuard(rl_guards.GuardsConfig.from_dict({"template": {"mode": "warn"}}))
    guard.setup(ctx)
    session = GuardSession()
    with shows("2 unclosed '<think>' at the end of the prompt"):
        run_hook(guard, "on_train_begin", session, 0)
    assert session.counts[("template", "double_open")] == 1 and ("template", "render_failed") not in session.counts
    [finding] = [f for f in session.findings if f.kind == "double_open"]
    assert "keep a single '<think>'" in finding.message and "template already adds it" not in finding.message


def test_conversational_prompts_without_a_chat_template_block_in_preflight(tmp_path: Any) -> None:
    from rl_guards.chat.preflight import build_preflight_report

    ctx = _plain_text_context(tmp_path, [[{"role": "user", "content": "What is 2+2?"}]] * 2)
    report = build_preflight_report(ctx.args, ctx.tokenizer, ctx.train_dataset)  # e1b9f62: ValueError
    [finding] = report.find("no_chat_template")
    assert finding.severity == "blocking" and "TRL cannot render them" in finding.message
