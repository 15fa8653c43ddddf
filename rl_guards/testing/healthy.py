"""Healthy GRPO runs written the way users write them: the precision corpus (a healthy run must be silent).

Each :class:`HealthyCase` builds a real ``GRPOTrainer`` on the tiny fixture with reward functions as users write
them (TRL's own, the widely copied XML-format rewards, graded last-number and exact-match graders), string or
conversational prompts, thinking / non-thinking / mixed rows, one task or several (with and without ``route()``),
attached with ``install()`` or ``GuardsCallback``, at the default ``GuardsConfig()`` but for the reward probes' time
budget (:data:`PROBE_TIME`: the tiny model's steps take a tenth of a second where a real one takes tens, so at the
default 2 % the probes would not run in these few-step runs). :func:`run_healthy` trains
one case and returns what a user would see: findings at warn/raise severity, what the ``rl_guards`` logger said at
warning level, and (when a W&B run is active) what the offline run recorded. The tests assert silence;
``benchmarks/failure_modes`` reports the same corpus as the precision column next to the planted failures' recall.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.testing.data import make_dataset
from rl_guards.testing.rewards import arith_correct, completion_text, echo_match, final_answer, length_penalty

__all__ = ["HEALTHY_CASES", "PROBE_TIME", "HealthyCase", "HealthyOutcome", "guards_config", "run_healthy"]

PROBE_TIME = {"probes": {"budget": 100.0}}  # the probes' time as a real run would give them (see the module doc)


def guards_config() -> Any:
    """The corpus's config: the defaults, the probes' time budget aside."""
    from rl_guards.config import GuardsConfig

    return GuardsConfig.from_dict(PROBE_TIME)

# ----- reward functions as users write them -----------------------------------------------------------------------
def last_number_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """The last integer of the completion against the reference (the usual GSM8K-style grader)."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        numbers = re.findall(r"-?\d+", completion_text(c))
        try:
            out.append(1.0 if numbers and float(numbers[-1]) == float(a) else 0.0)
        except ValueError:  # a non-numeric reference (another task's row): not this grader's to pay
            out.append(0.0)
    return out


def exact_match_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """The final answer, stripped and lower-cased, equal to the reference."""
    return [
        1.0 if final_answer(completion_text(c)).strip().lower() == str(a).strip().lower() else 0.0
        for c, a in zip(completions, answer, strict=True)
    ]


def boxed_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """``\\boxed{X}`` with X the reference, else the bare final answer equal to it."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        text = final_answer(completion_text(c))
        boxed = re.findall(r"\\boxed\{([^}]*)\}", text)
        got = boxed[-1] if boxed else text
        out.append(1.0 if got.strip() == str(a).strip() else 0.0)
    return out


def extract_xml_answer(text: str) -> str:
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def xml_correctness_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    return [
        2.0 if extract_xml_answer(completion_text(c)) == a else 0.0 for c, a in zip(completions, answer, strict=True)
    ]


def strict_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    pattern = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
    return [0.5 if re.match(pattern, completion_text(c), flags=re.S) else 0.0 for c in completions]


def soft_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    pattern = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
    return [0.5 if re.match(pattern, completion_text(c), flags=re.S) else 0.0 for c in completions]


def count_xml(text: str) -> float:
    count = 0.0
    if text.count("<reasoning>\n") == 1:
        count += 0.125
    if text.count("\n</reasoning>\n") == 1:
        count += 0.125
    if text.count("\n<answer>\n") == 1:
        count += 0.125
        count -= len(text.split("\n</answer>\n")[-1]) * 0.001
    if text.count("\n</answer>") == 1:
        count += 0.125
        count -= (len(text.split("\n</answer>")[-1]) - 1) * 0.001
    return count


def xmlcount_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    return [count_xml(completion_text(c)) for c in completions]


# ----- datasets -----------------------------------------------------------------------------------------------
def _string_prompts(data: Any) -> Any:
    return data.map(lambda row: {"prompt": row["prompt"][0]["content"]})


def _solutions(data: Any) -> Any:
    return data.map(lambda row: {"solution": f"${row['answer']}$"})


@dataclass
class HealthyCase:
    """One healthy configuration: reward functions, data, trainer overrides, and how the guards are attached."""

    name: str
    what: str
    reward_funcs: Callable[[], list[Any]]
    dataset: Callable[[], Any] = make_dataset
    args: dict[str, Any] = field(default_factory=dict)
    attach: str = "install"  # "install" | "callback"
    per_row_thinking: bool = False  # honour the dataset's enable_thinking column (the documented route)


def _trl(name: str) -> Any:
    import trl.rewards as rewards

    return getattr(rewards, name)


def _routed(*pairs: tuple[str, list[Any]]) -> list[Any]:
    from rl_guards.rewards.routing import route

    return list(route(dict(pairs)))


def _stray() -> Any:
    from rl_guards.rewards import StrayThinkPenalty

    return StrayThinkPenalty()


THINK = {"chat_template_kwargs": {"enable_thinking": True}}
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}

HEALTHY_CASES: list[HealthyCase] = [
    HealthyCase("two_tasks_plain", "two tasks, None off-task", lambda: [arith_correct, echo_match]),
    HealthyCase(
        "two_tasks_routed_shaped",
        "route() per task plus a length penalty",
        lambda: [*_routed(("arith", [arith_correct]), ("echo", [echo_match])), length_penalty],
    ),
    HealthyCase(
        "callback", "GuardsCallback() in the constructor", lambda: [arith_correct, echo_match], attach="callback"
    ),
    HealthyCase("thinking", "thinking on", lambda: [arith_correct, echo_match], args=THINK),
    HealthyCase(
        "non_thinking",
        "thinking off, stray-think penalty",
        lambda: [arith_correct, echo_match, _stray()],
        args=NO_THINK,
    ),
    HealthyCase(
        "mixed_thinking",
        "an enable_thinking column honoured per row",
        lambda: [arith_correct, echo_match],
        dataset=lambda: make_dataset(thinking="mixed"),
        per_row_thinking=True,
    ),
    HealthyCase(
        "string_prompts",
        "raw-text prompts (R1-Zero style), last-number grader",
        lambda: [last_number_reward],
        dataset=lambda: _string_prompts(make_dataset(tasks=("arith",))),
    ),
    HealthyCase(
        "trl_accuracy",
        "TRL's accuracy_reward on rows it can parse, think_format_reward",
        lambda: [_trl("accuracy_reward"), _trl("think_format_reward")],
        dataset=lambda: _solutions(make_dataset(tasks=("arith",))),
        args=THINK,
    ),
    HealthyCase(
        "trl_overlong",
        "TRL's soft overlong punishment next to graded rewards",
        lambda: [arith_correct, echo_match, _trl("get_soft_overlong_punishment")(16, 4)],
    ),
    HealthyCase(
        "trl_repetition",
        "TRL's repetition penalty next to graded rewards",
        lambda: [arith_correct, echo_match, _trl("get_repetition_penalty_reward")(2, -1.0)],
    ),
    HealthyCase(
        "xml_format",
        # no system prompt asking for the format: the tiny model writes its own markup (a system turn it never saw
        # in its warm-up breaks its think tags, which the think_tags guard rightly reports)
        "the widely copied XML format rewards (count, strict, soft) and an <answer> grader",
        lambda: [xmlcount_reward, soft_format_reward, strict_format_reward, xml_correctness_reward],
        dataset=lambda: make_dataset(tasks=("arith",)),
    ),
    HealthyCase(
        "last_number",
        "last-number grader on arithmetic",
        lambda: [last_number_reward],
        dataset=lambda: make_dataset(tasks=("arith",)),
    ),
    HealthyCase(
        "exact_and_boxed",
        "exact match for echo, boxed-or-bare for arith, routed",
        lambda: _routed(("arith", [boxed_reward]), ("echo", [exact_match_reward])),
    ),
    HealthyCase(
        "dr_grpo",
        "Dr. GRPO choices (loss_type dr_grpo, scale_rewards none), small groups",
        lambda: [arith_correct, echo_match],
        args={"loss_type": "dr_grpo", "scale_rewards": "none", "num_generations": 2},
    ),
    HealthyCase(
        "grpo_loss_accumulation",
        "loss_type grpo, gradient accumulation, steps_per_generation 2",
        lambda: [arith_correct, echo_match],
        args={"loss_type": "grpo", "gradient_accumulation_steps": 2, "max_steps": 4},
    ),
    HealthyCase(
        "eval_and_checkpoints",
        "an eval set and checkpoints (drift probes before each save)",
        lambda: [arith_correct, echo_match],
        args={"eval_strategy": "steps", "eval_steps": 2, "save_strategy": "steps", "save_steps": 2, "max_steps": 4},
    ),
]


@dataclass
class HealthyOutcome:
    """What a user of one healthy run would see."""

    name: str
    findings: list[str]  # guard/kind (severity) of every warning or error finding
    warnings: list[str]  # what rl_guards said at warning level and above
    notes: list[str]  # guard/kind of the notes said (not findings)
    steps: int
    summary: str


def build_trainer(case: HealthyCase, model_dir: str, tokenizer: Any, output_dir: Path, **extra: Any) -> Any:
    """The case's real GRPOTrainer (``extra``: more GRPOConfig overrides, e.g. ``report_to``)."""
    from trl import GRPOTrainer

    from rl_guards import GuardsCallback
    from rl_guards.testing.grpo import tiny_grpo_config

    args = {**case.args, **extra}
    data = case.dataset()
    eval_data = data.select(range(4)) if args.get("eval_strategy", "no") != "no" else None
    callbacks = [GuardsCallback(guards_config())] if case.attach == "callback" else None
    return GRPOTrainer(
        model=model_dir,
        processing_class=tokenizer,
        reward_funcs=case.reward_funcs(),
        args=tiny_grpo_config(output_dir, **args),
        train_dataset=data,
        eval_dataset=eval_data,
        callbacks=callbacks,
    )


def run_healthy(case: HealthyCase, model_dir: str, tokenizer: Any, output_dir: Path, **extra: Any) -> HealthyOutcome:
    """Train one case with every guard at the default config; collect what is loud."""
    import rl_guards
    from rl_guards.console import capture

    trainer = build_trainer(case, model_dir, tokenizer, output_dir, **extra)
    run = None
    if case.attach == "install":
        run = rl_guards.install(trainer, guards_config())
    if case.per_row_thinking:
        from rl_guards.trl.thinking_mix import honour_thinking_column

        honour_thinking_column(trainer)
    with capture() as said:  # what rl_guards says at warning level and above
        trainer.train()
    if run is None:  # the callback installed itself at train start
        callback = next(cb for cb in trainer.callback_handler.callbacks if type(cb).__name__ == "GuardsCallback")
        run = callback.run
    session = run.session
    loud = [r for r in session.summary_rows() if r["severity"] in ("warning", "blocking")]
    return HealthyOutcome(
        name=case.name,
        findings=[f"{r['guard']}/{r['kind']} ({r['severity']})" for r in loud],
        warnings=said.messages,
        notes=[f"{g}/{k}" for g, k in session.notes],
        steps=int(trainer.state.global_step),
        summary=run.summary(),
    )
