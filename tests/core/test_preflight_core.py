"""Pure preflight checks: each choice says the right thing, with the right severity."""

from __future__ import annotations

import json

import pytest

from rl_guards.chat.length_probe import LengthProbe
from rl_guards.core.lengths import summarize_lengths
from rl_guards.core.preflight import (
    LOSS_AGGREGATION,
    LengthProbeNumbers,
    PreflightFinding,
    PreflightReport,
    TemplateFingerprint,
    TrainingChoices,
    build_report,
    check_completion_length,
    check_eval_prompts,
    check_group_size,
    check_kl,
    check_learning_rate,
    check_loss_type,
    check_lr_schedule,
    check_scale_rewards,
    check_template_paths,
    check_truncated_masking,
    check_vllm,
    unified_diff,
    visible_whitespace,
)

# ----- loss_type x scale_rewards -------------------------------------------------------------------------

LENGTH_NORMALISED = {"grpo", "sapo"}


@pytest.mark.parametrize("loss_type", sorted(LOSS_AGGREGATION))
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_each_loss_type_and_scale_rewards_says_which_normalisations_it_has(loss_type: str, scale_rewards: str) -> None:
    choices = TrainingChoices(loss_type=loss_type, scale_rewards=scale_rewards, per_device_train_batch_size=8)
    [length] = check_loss_type(choices)
    [std] = check_scale_rewards(choices)
    assert length.code == "length_normalisation" and std.code == "std_normalisation"
    if loss_type in LENGTH_NORMALISED:
        assert length.severity == "info"  # a documented choice: said with its consequence, not warned (issue 20)
        assert "per-response length normalisation biases length" in length.message
        assert "incorrect answers drift longer" in length.message
        assert "dr_grpo" in length.fix
    else:
        assert length.severity == "info"
        assert "no per-response length normalisation" in length.message
    assert std.severity == "info"
    expected_std = {
        "group": "divided by each group's reward std",
        "batch": "one std over the whole batch",
        "none": "no std normalisation",
    }[scale_rewards]
    assert expected_std in std.message
    if scale_rewards == "group":
        assert "difficulty bias" in std.message
    if loss_type == "dr_grpo" and scale_rewards == "none":
        assert "Dr. GRPO (neither normalisation)" in std.message
    if loss_type in LENGTH_NORMALISED and scale_rewards == "group":
        assert "standard GRPO (both" in std.message


@pytest.mark.parametrize(
    ("loss_type", "extra"),
    [
        ("dr_grpo", "The constant is max_completion_length (512)"),
        ("bnpo", "depend on the per-device batch size"),
        ("luspo", "importance_sampling_level='sequence'"),
    ],
)
def test_loss_type_specific_notes(loss_type: str, extra: str) -> None:
    [finding] = check_loss_type(TrainingChoices(loss_type=loss_type))
    assert extra in finding.message


def test_bnpo_with_one_row_per_device_is_grpo() -> None:
    [finding] = check_loss_type(TrainingChoices(loss_type="bnpo", per_device_train_batch_size=1))
    assert finding.severity == "warning" and "it is the GRPO loss" in finding.message


def test_unknown_loss_type_and_scale_rewards_warn() -> None:
    assert check_loss_type(TrainingChoices(loss_type="new_loss"))[0].code == "loss_type_unknown"
    assert check_scale_rewards(TrainingChoices(scale_rewards="bogus"))[0].severity == "warning"


def test_normalize_then_sum_overrides_scale_rewards() -> None:
    choices = TrainingChoices(scale_rewards="none", multi_objective_aggregation="normalize_then_sum")
    [finding] = check_scale_rewards(choices)
    assert "whatever scale_rewards ('none') says" in finding.message


def test_scale_rewards_bools_map_like_trl() -> None:
    assert TrainingChoices.from_args({"scale_rewards": True}).scale_rewards == "group"
    assert TrainingChoices.from_args({"scale_rewards": False}).scale_rewards == "none"


# ----- schedule and learning rate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "warmup", "codes", "phrase"),
    [
        ("linear", 0, ["lr_schedule"], "decays towards 0"),
        ("cosine", 10, ["lr_schedule"], "warm-up 10 steps"),
        ("constant", 0, ["lr_schedule"], "stays at"),
        ("constant", 0.1, ["warmup_ignored", "lr_schedule"], "ignores the warm-up"),
        ("constant_with_warmup", 0.1, ["lr_schedule"], "after the warm-up (warm-up over 0.1 of total steps)"),
        ("inverse_sqrt", 0, ["lr_schedule"], "compare it with a constant schedule"),
    ],
)
def test_lr_schedule(scheduler: str, warmup: float, codes: list[str], phrase: str) -> None:
    findings = check_lr_schedule(TrainingChoices(lr_scheduler_type=scheduler, warmup_steps=warmup))
    assert [f.code for f in findings] == codes
    text = " ".join(f.message + " " + f.fix for f in findings)
    assert phrase in text
    assert {f.severity for f in findings} == ({"warning", "info"} if "warmup_ignored" in codes else {"info"})
    assert "lr_sweep" in findings[-1].fix


def test_linear_is_named_the_default_and_constant_is_not() -> None:
    linear = check_lr_schedule(TrainingChoices(lr_scheduler_type="linear"))[0].message
    constant = check_lr_schedule(TrainingChoices(lr_scheduler_type="constant"))[0].message
    assert "transformers' default" in linear and "default" not in constant


def test_scheduler_enum_is_read_as_its_value() -> None:
    class FakeEnum:
        value = "cosine"

    assert TrainingChoices.from_args({"lr_scheduler_type": FakeEnum()}).lr_scheduler_type == "cosine"


@pytest.mark.parametrize(
    ("lr", "phrase"),
    [
        (1e-8, "below the range"),
        (1e-6, "within the range"),
        (5e-5, "usual for LoRA adapters"),
        (1e-2, "above both"),
    ],
)
def test_learning_rate_is_information_only(lr: float, phrase: str) -> None:
    [finding] = check_learning_rate(TrainingChoices(learning_rate=lr))
    assert finding.severity == "info" and phrase in finding.message
    assert ("TRL's GRPOConfig default" in finding.message) == (lr == 1e-6)


def test_kl() -> None:
    assert "no reference model" in check_kl(TrainingChoices(beta=0.0))[0].message
    assert "a reference model is loaded" in check_kl(TrainingChoices(beta=0.04))[0].message


# ----- group size, truncation, length cap, vLLM ----------------------------------------------------------


# A group size is a choice, not evidence: the dead_groups guard warns when groups really die (issue 20).
@pytest.mark.parametrize(("g", "severity"), [(2, "info"), (3, "info"), (4, "info"), (16, "info")])
def test_group_size(g: int, severity: str) -> None:
    choices = TrainingChoices(num_generations=g, per_device_train_batch_size=g * 4)
    [finding] = check_group_size(choices)
    assert finding.severity == severity
    assert "4 prompts per generation batch" in finding.message
    assert "dead_group_share" in finding.fix
    # The dead-group table: a row per group size, 50% success -> 2 * 0.5^G.
    row = next(line for line in finding.detail.splitlines() if line.split()[0] == str(g))
    assert row.split()[3] == f"{2 * 0.5**g:.0%}"


def test_one_prompt_per_batch_warns() -> None:
    findings = check_group_size(TrainingChoices(num_generations=8, per_device_train_batch_size=8))
    assert [f.code for f in findings] == ["group_size", "one_prompt_per_batch"]


def test_generation_batch_counts_processes_and_accumulation() -> None:
    choices = TrainingChoices(num_generations=4, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    choices.world_size = 2
    assert choices.groups_per_generation_batch == 4


def test_mask_truncated_completions() -> None:
    assert "trained on" in check_truncated_masking(TrainingChoices())[0].message
    masked = check_truncated_masking(TrainingChoices(mask_truncated_completions=True))
    assert "left out of the loss" in masked[0].message


PROBE = LengthProbeNumbers(p50=100, p90=300, p99=500, max=700, share_at_cap=0.0, cap=2048)


@pytest.mark.parametrize(
    ("cap", "probe", "codes", "severities"),
    [
        (512, None, ["completion_length"], ["info"]),  # no probe: a note, not a warning (issue 20 #1)
        (None, None, ["completion_length"], ["info"]),
        (100, PROBE, ["completion_length"], ["blocking"]),  # < 0.5 x p90
        (200, PROBE, ["completion_length"], ["warning"]),  # < p90 but not far
        (400, PROBE, ["completion_length"], ["warning"]),  # between p90 and p99
        (640, PROBE, ["completion_length"], ["info"]),
        (
            640,
            LengthProbeNumbers(p90=300, p99=500, share_at_cap=0.2, cap=512),
            ["probe_censored", "completion_length"],
            ["warning", "info"],
        ),
    ],
)
def test_completion_length_against_probe(
    cap: int | None, probe: LengthProbeNumbers | None, codes: list[str], severities: list[str]
) -> None:
    findings = check_completion_length(cap, probe)
    assert [f.code for f in findings] == codes
    assert [f.severity for f in findings] == severities


def test_blocking_ratio_is_configurable() -> None:
    assert check_completion_length(200, PROBE, blocking_ratio=0.8)[0].severity == "blocking"


def test_probe_numbers_from_the_length_probe_result() -> None:
    lengths = [10] * 90 + [40] * 9 + [64]
    summary = summarize_lengths(lengths, [n >= 64 for n in lengths], cap=64)
    probe = LengthProbe(lengths=lengths, hit_cap=[n >= 64 for n in lengths], max_new_tokens=64, summary=summary)
    numbers = LengthProbeNumbers.from_any(probe)
    assert numbers is not None
    assert (numbers.p90, numbers.p99, numbers.cap, numbers.num_completions) == (10, 40, 64, 100)
    assert numbers.recommended == summary.recommended and numbers.lower_bound is False
    # The same through JSON, as `rl-guards probe-lengths --output` writes it.
    assert LengthProbeNumbers.from_any(json.dumps(probe.to_dict())) == numbers
    [finding] = check_completion_length(16, numbers)
    assert finding.severity == "warning" and str(summary.recommended) in finding.fix


def test_vllm_and_rollout_func() -> None:
    assert check_vllm(TrainingChoices()) == []
    [server] = check_vllm(TrainingChoices(use_vllm=True, vllm_mode="server"))
    assert "separate `vllm serve` process" in server.message and server.severity == "info"
    [custom] = check_vllm(TrainingChoices(), has_rollout_func=True)
    assert custom.severity == "info" and custom.code == "rollout_func"


# ----- template paths ------------------------------------------------------------------------------------

THINK_OFF = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
THINK_ON = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def _fp(label: str, rendered: str, **kwargs: object) -> TemplateFingerprint:
    base: dict[str, object] = {
        "tokenizer_name": "tok",
        "tokenizer_class": "Fast",
        "template_sha": "aaa",
        "chat_template_kwargs": {"enable_thinking": False},
        "rendered": rendered,
        "ids_sha": "ids1",
    }
    base.update(kwargs)
    return TemplateFingerprint(label, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("other", "severity", "code"),
    [
        (_fp("eval_external", THINK_ON, chat_template_kwargs={"enable_thinking": True}), "blocking", "mismatch"),
        (_fp("sft", THINK_ON, template_sha="bbb"), "warning", "mismatch"),
        (_fp("eval_external", THINK_OFF, template_sha="bbb"), "info", "equivalent"),
        (_fp("eval_external", THINK_OFF, ids_sha="ids2"), "blocking", "tokens_mismatch"),
        (_fp("sft", THINK_OFF, ids_sha="ids2", tokenizer_name="other"), "warning", "tokens_mismatch"),
        (_fp("eval_external", THINK_OFF), "info", "same"),
    ],
)
def test_template_paths(other: TemplateFingerprint, severity: str, code: str) -> None:
    [finding] = check_template_paths(_fp("train", THINK_OFF), [other])
    assert finding.severity == severity
    assert finding.code == f"{other.label}_template_{code}" or finding.code == f"{other.label}_{code}"


def test_mismatched_eval_template_diff_shows_the_differing_lines() -> None:
    other = _fp("eval_external", THINK_ON, chat_template_kwargs={"enable_thinking": True})
    [finding] = check_template_paths(_fp("train", THINK_OFF), [other])
    assert 'chat_template_kwargs {"enable_thinking": false} vs {"enable_thinking": true}' in finding.message
    assert "First difference: '<think>↵' vs (nothing)" in finding.message
    removed = [line for line in finding.detail.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert removed == ["-<think>↵", "-↵", "-</think>↵", "-↵"]
    assert finding.detail.splitlines()[:2] == ["--- train", "+++ eval_external"]


def test_diff_makes_whitespace_visible() -> None:
    diff = unified_diff("a\nb  \n", "a\nb\n", "x", "y")
    assert "-b··↵" in diff.splitlines() and "+b↵" in diff.splitlines()
    assert unified_diff("same", "same", "x", "y") == ""
    assert visible_whitespace("a\tb \nc", newline_marks=True) == "a→b·↵c"


def test_eval_prompts_in_the_trainer() -> None:
    suffix = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    same = check_eval_prompts(
        [THINK_OFF], [THINK_OFF], train_templated=True, eval_templated=True, generation_suffix=suffix
    )
    assert [f.severity for f in same] == ["info"]
    prerendered_ok = check_eval_prompts(
        [THINK_OFF], [THINK_OFF], train_templated=True, eval_templated=False, generation_suffix=suffix
    )
    assert prerendered_ok[0].severity == "info" and "pre-rendered" in prerendered_ok[0].message
    [bad] = check_eval_prompts(
        [THINK_OFF], [THINK_ON, THINK_OFF], train_templated=True, eval_templated=False, generation_suffix=suffix
    )
    assert bad.severity == "blocking" and bad.code == "eval_template_mismatch"
    assert "1/2 eval prompts do not end with" in bad.message
    assert "-<think>↵" in bad.detail.splitlines()
    [reverse] = check_eval_prompts(
        ["What is 2+2?"], [THINK_OFF], train_templated=False, eval_templated=True, generation_suffix=""
    )
    assert reverse.severity == "blocking" and "train prompts are plain strings" in reverse.message
    [none] = check_eval_prompts([THINK_OFF], [], train_templated=True, eval_templated=True, generation_suffix=suffix)
    assert none.severity == "info" and "eval_chat_template_kwargs" in none.fix


# ----- the report ----------------------------------------------------------------------------------------


def test_report_orders_by_severity_and_round_trips_to_json() -> None:
    other = _fp("eval_external", THINK_ON, chat_template_kwargs={"enable_thinking": True})
    report = build_report(
        TrainingChoices(loss_type="grpo"),
        template_findings=check_template_paths(_fp("train", THINK_OFF), [other]),
        templates=[_fp("train", THINK_OFF, generation_suffix="<|im_start|>assistant\n"), other],
        examples=[("train", THINK_OFF)],
    )
    assert [f.code for f in report.blocking] == ["eval_external_template_mismatch"]
    severities = [f.severity for f in report.sorted_findings()]
    assert severities == sorted(severities, key=["blocking", "warning", "info"].index)
    text = report.render()
    assert text.splitlines()[0] == report.headline()
    assert "fix: render eval_external with the training tokenizer" in text
    assert "--- eval_external_template_mismatch (blocking) ---" in text
    assert "generation prompt <|im_start|>assistant↵" in text
    assert "--- rendered example 1: train (whitespace visible) ---\n<|im_start|>user↵" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["counts"]["blocking"] == 1 and data["examples"][0]["label"] == "train"


def test_finding_severity_is_validated() -> None:
    with pytest.raises(ValueError, match="severity"):
        PreflightFinding("fatal", "loss", "x", "y")
    assert PreflightReport().counts() == {"blocking": 0, "warning": 0, "info": 0}
