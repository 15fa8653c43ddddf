"""The start-of-training report: choices a GRPO run should make deliberately, checked on plain values.

Pure: no torch / transformers. The TRL adapter (:mod:`rl_guards.chat.preflight`) reads the trainer, renders the
templates and calls :func:`build_report`. Each finding has a severity:

- ``blocking``: the run would train on something other than what it evaluates (an eval path rendered with a
  different template or kwargs, a completion cap far below what the data needs). Stops the run in raise mode.
- ``warning``: a known bias or a likely mistake (per-response length normalisation, warm-up ignored by the
  ``constant`` scheduler, tiny groups, no length probe, an SFT stage rendered differently).
- ``info``: a choice stated with its consequences (schedule, learning rate, std normalisation, KL, ...).

Topics: ``optimisation``, ``loss``, ``group_size``, ``generation``, ``template``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rl_guards.console import Column, render_table
from rl_guards.core.group_size import expected_dead_share
from rl_guards.core.lengths import CENSORED_SHARE, HEADROOM, round_up

SEVERITIES: tuple[str, ...] = ("blocking", "warning", "info")  # display order


@dataclass(frozen=True)
class PreflightFinding:
    """One item of the report."""

    severity: str  # "info" | "warning" | "blocking"
    topic: str  # "optimisation" | "loss" | "group_size" | "generation" | "template"
    code: str  # short machine code, e.g. "lr_schedule", "eval_template_mismatch"
    message: str  # what the current choice does
    fix: str = ""  # what to change, or what to check
    detail: str = ""  # multi-line text shown under the table (diffs, tables)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {list(SEVERITIES)}, got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----- the values checked ----------------------------------------------------------------------------------


@dataclass
class TrainingChoices:
    """The GRPOConfig values the report looks at, as plain Python values."""

    learning_rate: float = 1e-6
    lr_scheduler_type: str = "linear"
    warmup_steps: float = 0.0  # int steps, or a float in [0, 1) = ratio of total steps (transformers 5)
    warmup_ratio: float = 0.0  # transformers 4 only
    max_steps: int = -1
    num_train_epochs: float = 3.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    multi_objective_aggregation: str = "sum_then_normalize"
    importance_sampling_level: str = "token"
    beta: float = 0.0
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    generation_batch_size: int | None = None
    world_size: int = 1
    mask_truncated_completions: bool = False
    max_completion_length: int | None = 512
    temperature: float = 1.0
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    trainer: str = "grpo"  # "grpo" (GRPOConfig and subclasses) or "rloo" (RLOOConfig: no loss_type)
    normalize_advantages: bool = False  # RLOO only

    @classmethod
    def from_args(cls, args: Any, *, world_size: int = 1) -> TrainingChoices:
        """Read a GRPOConfig (or any object / mapping with those attribute names); missing ones keep defaults."""
        values: dict[str, Any] = {}
        for f in cls.__dataclass_fields__.values():
            if f.name == "world_size":
                continue
            raw = args.get(f.name, _MISSING) if isinstance(args, Mapping) else getattr(args, f.name, _MISSING)
            if raw is _MISSING:
                continue
            values[f.name] = _plain(raw)
        values.pop("trainer", None)
        choices = cls(**values, world_size=world_size)
        choices.trainer = trainer_kind(args)
        args_world = args.get("world_size") if isinstance(args, Mapping) else getattr(args, "world_size", None)
        if args_world is not None and int(args_world) != world_size and choices.steps_per_generation:
            # The config was built on another machine size: recompute the generation batch for this one.
            choices.generation_batch_size = (
                choices.per_device_train_batch_size * world_size * int(choices.steps_per_generation)
            )
        choices.scale_rewards = {True: "group", False: "none"}.get(choices.scale_rewards, choices.scale_rewards)  # type: ignore[call-overload]
        choices.chat_template_kwargs = dict(choices.chat_template_kwargs or {})
        return choices

    @property
    def groups_per_generation_batch(self) -> float | None:
        """Prompts (groups) per generation batch, i.e. per optimizer step by default."""
        size = self.generation_batch_size
        if size is None:
            steps = self.steps_per_generation or self.gradient_accumulation_steps
            size = self.per_device_train_batch_size * self.world_size * steps
        return size / self.num_generations if self.num_generations else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_MISSING = object()


def _plain(value: Any) -> Any:
    """Enums (transformers' SchedulerType) to their value; everything else unchanged."""
    inner = getattr(value, "value", None)
    if isinstance(inner, str | int | float):
        return inner
    return value


@dataclass(frozen=True)
class LengthProbeNumbers:
    """Completion lengths (tokens) measured by sampling from the model on the training prompts."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    share_at_cap: float | None = None  # share of probe completions that hit the probe's own cap
    cap: int | None = None  # max_new_tokens the probe sampled with
    num_completions: int | None = None
    recommended: int | None = None  # the probe's suggested max_completion_length
    lower_bound: bool | None = None  # the probe's cap censored the tail: quantiles are lower bounds

    @property
    def censored(self) -> bool:
        """The probe's own cap cut more than 1% of its samples, so its tail quantiles are too low."""
        if self.lower_bound is not None:
            return bool(self.lower_bound)
        return bool(self.share_at_cap and self.share_at_cap > CENSORED_SHARE)

    @classmethod
    def from_any(cls, probe: Any) -> LengthProbeNumbers | None:
        """Accept a mapping, a JSON string, or an object with ``to_dict()`` or those attributes."""
        if probe is None or isinstance(probe, LengthProbeNumbers):
            return probe
        if isinstance(probe, str):
            probe = json.loads(probe)
        if not isinstance(probe, Mapping):
            to_dict = getattr(probe, "to_dict", None)
            probe = to_dict() if callable(to_dict) else dict(vars(probe))
        if isinstance(probe.get("overall"), Mapping):  # per-task probes keep the pooled numbers under "overall"
            probe = {**probe["overall"], **{k: v for k, v in probe.items() if k != "overall"}}
        values: dict[str, Any] = {}
        for name, aliases in _PROBE_ALIASES.items():
            for alias in aliases:
                if probe.get(alias) is not None:
                    values[name] = probe[alias]
                    break
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


# Field name -> keys accepted in a probe result (the probe module's names first).
_PROBE_ALIASES: dict[str, tuple[str, ...]] = {
    "p50": ("p50", "median"),
    "p90": ("p90",),
    "p99": ("p99",),
    "max": ("max", "max_length"),
    "share_at_cap": ("share_at_cap", "truncated_share", "clipped_ratio"),
    "cap": ("cap", "max_new_tokens", "probe_cap", "max_completion_length"),
    "num_completions": ("num_completions", "n", "count"),
    "recommended": ("recommended",),
    "lower_bound": ("lower_bound",),
}


@dataclass(frozen=True)
class TemplateFingerprint:
    """How one path (train, eval, SFT) turns a probe conversation into the text the model sees."""

    label: str  # "train", "eval", "sft", ...
    tokenizer_name: str = ""
    tokenizer_class: str = ""
    template_sha: str = ""  # sha256[:12] of the chat template string ("" = none)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    rendered: str = ""  # the probe conversation rendered with add_generation_prompt=True
    generation_suffix: str = ""  # what add_generation_prompt appends (where the model starts writing)
    ids_sha: str = ""  # sha256[:12] of the rendered probe's token ids ("" = not tokenized)
    templated: bool = True  # False: prompts reach the model as raw strings (TRL does not template strings)

    def summary(self) -> str:
        kwargs = json.dumps(self.chat_template_kwargs, sort_keys=True)
        return (
            f"{self.label}: tokenizer {self.tokenizer_name or '?'} ({self.tokenizer_class or '?'}), "
            f"template sha {self.template_sha or '-'}, kwargs {kwargs}, "
            f"generation prompt {visible_whitespace(self.generation_suffix, newline_marks=True) or '-'}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def text_sha(text: str | Sequence[int] | None) -> str:
    """Short sha256 of a string or of a token id list ("" for None/empty)."""
    if not text:
        return ""
    data = text if isinstance(text, str) else ",".join(str(int(t)) for t in text)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:12]


# ----- whitespace and diffs --------------------------------------------------------------------------------


def visible_whitespace(text: str, *, newline_marks: bool = False) -> str:
    """Make whitespace readable: tabs ``→``, trailing spaces ``·``, newlines ``↵`` (kept as line breaks unless
    ``newline_marks``, which also puts the text on one line)."""
    lines = text.split("\n")
    shown = []
    for line in lines:
        stripped = line.rstrip(" ")
        shown.append((stripped + "·" * (len(line) - len(stripped))).replace("\t", "→"))
    if newline_marks:
        return "↵".join(shown)
    return "↵\n".join(shown)


def unified_diff(a: str, b: str, label_a: str, label_b: str, *, context: int = 2) -> str:
    """A unified diff of two renderings, whitespace visible; "" when equal."""
    if a == b:
        return ""
    a_lines = [visible_whitespace(line) for line in a.splitlines(keepends=True)]
    b_lines = [visible_whitespace(line) for line in b.splitlines(keepends=True)]
    # splitlines(keepends) then visible_whitespace turns "x\n" into "x↵\n"; keep one line per entry.
    a_lines = [line.rstrip("\n") for line in a_lines]
    b_lines = [line.rstrip("\n") for line in b_lines]
    diff = difflib.unified_diff(a_lines, b_lines, fromfile=label_a, tofile=label_b, n=context, lineterm="")
    return "\n".join(diff)


# ----- optimisation --------------------------------------------------------------------------------------

DECAYING_SCHEDULES = frozenset(
    {"linear", "cosine", "cosine_with_restarts", "polynomial", "cosine_with_min_lr", "cosine_warmup_with_min_lr"}
)
CONSTANT_SCHEDULES = frozenset({"constant", "constant_with_warmup"})
SWEEP_FIX = "run a short LR sweep over schedules (rl_guards.sweeps.lr_sweep.run_lr_sweep, examples/lr_sweep.py)"


def check_lr_schedule(choices: TrainingChoices) -> list[PreflightFinding]:
    """The scheduler type and its warm-up."""
    kind = str(choices.lr_scheduler_type)
    warmup = choices.warmup_steps or choices.warmup_ratio
    warmup_text = _warmup_text(choices)
    out: list[PreflightFinding] = []
    if kind == "constant" and warmup:
        out.append(
            PreflightFinding(
                "warning",
                "optimisation",
                "warmup_ignored",
                f"lr_scheduler_type='constant' ignores the warm-up ({warmup_text}): transformers builds "
                "get_constant_schedule without warm-up steps, so the first updates run at full learning rate.",
                "set lr_scheduler_type: constant_with_warmup to keep the warm-up, or drop the warm-up setting",
            )
        )
    if kind in DECAYING_SCHEDULES:
        default = " (transformers' default)" if kind == "linear" else ""
        horizon = f"max_steps={choices.max_steps}" if choices.max_steps > 0 else f"{choices.num_train_epochs} epochs"
        out.append(
            PreflightFinding(
                "info",
                "optimisation",
                "lr_schedule",
                f"lr_scheduler_type={kind!r}{default}: the learning rate decays towards 0 over {horizon}, "
                f"{warmup_text}. Late RL steps then barely move the policy, and a longer or shorter run "
                "changes the whole schedule. The failure-modes notes suggest considering constant schedules "
                "rather than the framework default.",
                f"choose deliberately: lr_scheduler_type: constant_with_warmup is the usual RL alternative; "
                f"{SWEEP_FIX}",
            )
        )
    elif kind in CONSTANT_SCHEDULES:
        out.append(
            PreflightFinding(
                "info",
                "optimisation",
                "lr_schedule",
                f"lr_scheduler_type={kind!r}: the learning rate stays at {choices.learning_rate:g}"
                + (f" after the warm-up ({warmup_text})" if kind == "constant_with_warmup" else "")
                + "; results do not depend on the planned run length.",
                f"a constant rate is sensitive to its value: {SWEEP_FIX}",
            )
        )
    else:
        out.append(
            PreflightFinding(
                "info",
                "optimisation",
                "lr_schedule",
                f"lr_scheduler_type={kind!r}, {warmup_text}.",
                f"compare it with a constant schedule: {SWEEP_FIX}",
            )
        )
    return out


def _warmup_text(choices: TrainingChoices) -> str:
    if choices.warmup_ratio:
        return f"warm-up ratio {choices.warmup_ratio:g}"
    steps = choices.warmup_steps
    if not steps:
        return "no warm-up"
    if 0 < steps < 1:
        return f"warm-up over {steps:g} of total steps"
    return f"warm-up {int(steps)} steps"


# Typical GRPO learning rates, for orientation only (full fine-tuning vs LoRA adapters).
FULL_FINETUNE_LR_RANGE = (1e-7, 5e-6)
LORA_LR_RANGE = (1e-5, 2e-4)


def check_learning_rate(choices: TrainingChoices) -> list[PreflightFinding]:
    """Learning-rate magnitude against typical RL ranges (information, not a prescription)."""
    lr = choices.learning_rate
    lo, hi = FULL_FINETUNE_LR_RANGE
    lora_lo, lora_hi = LORA_LR_RANGE
    if lr < lo:
        where = f"below the range most full-parameter GRPO runs use ({lo:g}..{hi:g})"
    elif lr <= hi:
        where = f"within the range most full-parameter GRPO runs use ({lo:g}..{hi:g})"
    elif lr <= lora_hi:
        where = (
            f"above the full-parameter range ({lo:g}..{hi:g}) but usual for LoRA adapters ({lora_lo:g}..{lora_hi:g})"
        )
    else:
        where = f"above both the full-parameter ({lo:g}..{hi:g}) and LoRA ({lora_lo:g}..{lora_hi:g}) ranges"
    default = (
        f" (TRL's {'RLOO' if choices.trainer == 'rloo' else 'GRPO'}Config default)" if math.isclose(lr, 1e-6) else ""
    )
    return [
        PreflightFinding(
            "info",
            "optimisation",
            "learning_rate",
            f"learning_rate={lr:g}{default}: {where}. RL does not necessarily share SFT's learning-rate "
            "characteristics.",
            SWEEP_FIX,
        )
    ]


# ----- the loss: length and std normalisation --------------------------------------------------------------

# loss_type -> (per-response length normalisation?, how token losses are aggregated)
LOSS_AGGREGATION: dict[str, tuple[bool, str]] = {
    "grpo": (True, "each response's token losses are averaged over its own length, then over responses"),
    "sapo": (True, "each response's (soft-gated) token losses are averaged over its own length, then over responses"),
    "bnpo": (False, "token losses are summed and divided by the active tokens of the local (per-device) batch"),
    "dapo": (False, "token losses are summed and divided by the active tokens of the global accumulated batch"),
    "cispo": (False, "clipped-IS token losses are divided by the active tokens of the global accumulated batch"),
    "vespo": (False, "Gamma-weighted token losses are divided by the active tokens of the global accumulated batch"),
    "dr_grpo": (False, "token losses are summed and divided by a constant (batch rows x max_completion_length)"),
    "luspo": (False, "each response's token losses are summed (scaled by its length), then averaged over responses"),
}
SCALE_REWARDS: dict[str, str] = {
    "group": "advantages are divided by each group's reward std (per-question std normalisation)",
    "batch": "advantages are divided by one std over the whole batch (no per-question reweighting)",
    "none": "advantages are the raw reward minus the group mean (no std normalisation)",
}


def check_loss_type(choices: TrainingChoices) -> list[PreflightFinding]:
    """Per-response length normalisation of the chosen ``loss_type`` and the bias it brings."""
    loss_type = choices.loss_type
    if loss_type not in LOSS_AGGREGATION:
        return [
            PreflightFinding(
                "warning",
                "loss",
                "loss_type_unknown",
                f"loss_type={loss_type!r} is not one this report knows ({', '.join(sorted(LOSS_AGGREGATION))}).",
                "check TRL's GRPOConfig docs for how it normalises response length",
            )
        ]
    length_normalised, how = LOSS_AGGREGATION[loss_type]
    default = " (TRL 1.16 default)" if loss_type == "dapo" else ""
    if loss_type == "bnpo" and choices.per_device_train_batch_size == 1:
        return [
            PreflightFinding(
                "warning",
                "loss",
                "length_normalisation",
                "loss_type='bnpo' with per_device_train_batch_size=1 normalises by one response's length: it is "
                "the GRPO loss, with its length bias (long incorrect answers are penalised less per token).",
                "use loss_type: dr_grpo (Dr. GRPO) or dapo, or a larger per-device batch",
            )
        ]
    if length_normalised:
        return [
            PreflightFinding(
                "info",  # a documented choice of TRL's: said, with its consequence, never a warning
                "loss",
                "length_normalisation",
                f"loss_type={loss_type!r}: {how}. This per-response length normalisation biases length: a long "
                "incorrect answer spreads its negative advantage over more tokens, so it is penalised less per "
                "token and incorrect answers drift longer, while short correct answers get the largest per-token "
                "push. TRL's docs call it not recommended.",
                "loss_type: dr_grpo (Dr. GRPO, with scale_rewards: none) or dapo remove the per-response length "
                "normalisation",
            )
        ]
    extra = ""
    if loss_type == "dr_grpo":
        extra = (
            f" The constant is max_completion_length ({choices.max_completion_length}): changing the cap rescales "
            "the gradient like a learning-rate change."
        )
    elif loss_type == "bnpo":
        extra = " Results depend on the per-device batch size at a fixed effective batch."
    elif loss_type == "luspo" and choices.importance_sampling_level != "sequence":
        extra = " TRL requires importance_sampling_level='sequence' with luspo."
    return [
        PreflightFinding(
            "info",
            "loss",
            "length_normalisation",
            f"loss_type={loss_type!r}{default}: {how}; no per-response length normalisation, so no length bias "
            f"on incorrect answers from the aggregation itself.{extra}",
            "keep it if deliberate; Dr. GRPO is loss_type: dr_grpo with scale_rewards: none",
        )
    ]


def check_scale_rewards(choices: TrainingChoices) -> list[PreflightFinding]:
    """Per-group reward-std normalisation (``scale_rewards``) and how it weights groups."""
    scale = str(choices.scale_rewards)
    if choices.multi_objective_aggregation == "normalize_then_sum":
        return [
            PreflightFinding(
                "info",
                "loss",
                "std_normalisation",
                "multi_objective_aggregation='normalize_then_sum': every reward function is divided by its own "
                f"per-group std, then the sum by the batch std, whatever scale_rewards ({scale!r}) says. Groups "
                "with low reward variance are up-weighted per reward function.",
                "use sum_then_normalize with scale_rewards: none for Dr. GRPO-style unscaled advantages",
            )
        ]
    if scale not in SCALE_REWARDS:
        return [
            PreflightFinding(
                "warning",
                "loss",
                "std_normalisation",
                f"scale_rewards={scale!r} is not one of {sorted(SCALE_REWARDS)}; TRL will reject it.",
                "set scale_rewards to group, batch or none",
            )
        ]
    how = SCALE_REWARDS[scale]
    if scale == "group":
        message = (
            f"scale_rewards='group' (TRL default): {how}. A group whose rewards barely differ (a question almost "
            "always solved or almost always failed) gets its small differences blown up to unit scale, so "
            "low-variance questions weigh as much as informative ones: a question-level difficulty bias."
        )
        fix = "scale_rewards: none (Dr. GRPO) or batch, if you do not want groups reweighted by their reward std"
    elif scale == "batch":
        message = f"scale_rewards='batch': {how}; groups keep their relative reward spread."
        fix = "keep it if deliberate; Dr. GRPO uses scale_rewards: none"
    else:
        message = f"scale_rewards='none': {how}; groups with a larger reward spread get larger advantages."
        fix = "keep it if deliberate; the advantage scale now follows the reward scale (mind reward_weights)"
    summary = _algorithm_name(choices)
    if summary:
        message += f" Together with loss_type={choices.loss_type!r}: {summary}."
    return [PreflightFinding("info", "loss", "std_normalisation", message, fix)]


def _algorithm_name(choices: TrainingChoices) -> str:
    length_normalised = LOSS_AGGREGATION.get(choices.loss_type, (None, ""))[0]
    std = str(choices.scale_rewards) == "group"
    if choices.loss_type == "dr_grpo" and str(choices.scale_rewards) == "none":
        return "Dr. GRPO (neither normalisation)"
    if length_normalised and std:
        return "standard GRPO (both per-response length and per-group std normalisation)"
    if length_normalised is False and std:
        return "no length normalisation, but per-group std normalisation (half of Dr. GRPO)"
    if length_normalised and not std:
        return "per-response length normalisation without per-group std normalisation"
    return ""


def check_kl(choices: TrainingChoices) -> list[PreflightFinding]:
    """The KL coefficient ``beta``."""
    if not choices.beta:
        return [
            PreflightFinding(
                "info",
                "loss",
                "kl",
                "beta=0 (TRL default): no reference model, no KL penalty; only the clipped ratio limits how far the "
                "policy drifts from where it started.",
                "watch reward vs. behaviour in saved rollouts; set beta (e.g. 0.001) if the policy drifts",
            )
        ]
    return [
        PreflightFinding(
            "info",
            "loss",
            "kl",
            f"beta={choices.beta:g}: a reference model is loaded and a KL penalty pulls the policy back towards it.",
            "TRL rebuilds the reference from the model's name_or_path: pass a saved checkpoint path, not an "
            "in-memory model",
        )
    ]


# ----- group size ------------------------------------------------------------------------------------------


def dead_group_table(group_sizes: Sequence[int], rates: Sequence[float] = (0.05, 0.2, 0.5, 0.8, 0.95)) -> str:
    """Dead-group share for pass/fail rewards, per group size (rows) and success rate (columns)."""
    columns = [Column("G \\ success", "right"), *(Column(f"{r:.0%}", "right") for r in rates)]
    rows = [[g, *(f"{expected_dead_share(r, g):.0%}" for r in rates)] for g in group_sizes]
    return render_table(columns, rows, styled=False)


def check_group_size(choices: TrainingChoices) -> list[PreflightFinding]:
    """Group size G: how often a whole group gets one reward and teaches nothing."""
    g = int(choices.num_generations)
    sizes = sorted({max(2, g // 2), g, g * 2})
    groups = choices.groups_per_generation_batch
    groups_text = f"{groups:g} prompts per generation batch" if groups is not None else "prompts per batch unknown"
    # A choice, not evidence of a problem in this run: the dead_groups guard warns when groups really die.
    severity = "info"
    message = (
        f"num_generations={g} ({groups_text}). With pass/fail rewards a group is dead (zero advantage, no "
        f"gradient) with probability p^G + (1-p)^G: {expected_dead_share(0.5, g):.0%} at success rate 0.5, "
        f"{expected_dead_share(0.9, g):.0%} at 0.9. A task that is too easy or too hard can contribute no "
        "gradient at all."
    )
    fix = (
        "watch rl_guards_task/<task>/dead_group_share (dead_groups guard, which also advises a group size per "
        "task); raise num_generations or re-balance the task mix for tasks whose groups die"
    )
    if g < 4:
        fix = f"num_generations: 8 or more; {fix}"
    out = [PreflightFinding(severity, "group_size", "group_size", message, fix, detail=dead_group_table(sizes))]
    if groups is not None and groups < 2:
        out.append(
            PreflightFinding(
                "info",  # common on one GPU with a large group; a choice, not a defect
                "group_size",
                "one_prompt_per_batch",
                f"one generation batch holds {groups:g} prompt(s): each update follows a single question.",
                "raise per_device_train_batch_size, gradient_accumulation_steps or steps_per_generation so several "
                "prompts share an update",
            )
        )
    return out


# ----- generation limits -----------------------------------------------------------------------------------


def check_truncated_masking(choices: TrainingChoices) -> list[PreflightFinding]:
    """What happens to completions cut at ``max_completion_length``."""
    if choices.mask_truncated_completions:
        return [
            PreflightFinding(
                "info",
                "generation",
                "mask_truncated",
                "mask_truncated_completions=True: completions cut at max_completion_length are left out of the "
                "loss (DAPO); if many are cut, many rollouts teach nothing.",
                "keep the truncated share low (truncation guard); raise max_completion_length if it grows",
            )
        ]
    return [
        PreflightFinding(
            "info",
            "generation",
            "mask_truncated",
            "mask_truncated_completions=False (TRL default): completions cut at max_completion_length are scored "
            "as they are (usually low) and trained on, which pushes against long answers even when they were right.",
            "mask_truncated_completions: true (DAPO's recommendation), and keep the truncated share low",
        )
    ]


def check_completion_length(
    max_completion_length: int | None, probe: LengthProbeNumbers | None, *, blocking_ratio: float = 0.5
) -> list[PreflightFinding]:
    """``max_completion_length`` against the lengths the model actually produces on the training prompts."""
    cap = max_completion_length
    if cap is None:
        return [
            PreflightFinding(
                "info",
                "generation",
                "completion_length",
                "max_completion_length=None: generation runs to the model's limit.",
                "set a cap from a length probe so one runaway rollout cannot stall a step",
            )
        ]
    if probe is None:  # no evidence either way: a note; the truncation guard judges the cap on the live lengths
        return [
            PreflightFinding(
                "info",
                "generation",
                "completion_length",
                f"max_completion_length={cap} was not checked before training (no length probe); the truncation "
                "guard checks it against the run's own completion lengths.",
                "to check before training: rl-guards probe-lengths --model DIR --dataset DATA --output probe.json, "
                "then rl-guards preflight grpo.yaml --length_probe probe.json",
            )
        ]
    out: list[PreflightFinding] = []
    numbers = ", ".join(
        f"{k}={v:g}"
        for k, v in probe.to_dict().items()
        if k in ("p50", "p90", "p99", "max", "share_at_cap", "cap") and isinstance(v, int | float)
    )
    if probe.censored:
        out.append(
            PreflightFinding(
                "warning",
                "generation",
                "probe_censored",
                f"{probe.share_at_cap or 0:.1%} of the length probe's completions hit its own cap ({probe.cap}): "
                "its quantiles underestimate the lengths the model needs.",
                "rerun the probe with a higher --max-new-tokens"
                + (f" (at least {probe.recommended})" if probe.recommended else ""),
            )
        )
    p90, p99 = probe.p90, probe.p99
    target = probe.recommended or (round_up(p99 * HEADROOM) if p99 else None)  # the probe's own rule
    if p90 and cap < blocking_ratio * p90:
        out.append(
            PreflightFinding(
                "blocking",
                "generation",
                "completion_length",
                f"max_completion_length={cap} is far below the probe's p90 ({p90:g} tokens; {numbers}): most "
                "rollouts would be cut before they finish, and the rewards would score truncated text.",
                f"set max_completion_length to about {target} (the probe's p99 {p99:g} plus headroom)"
                if p99 and target
                else f"set max_completion_length above {p90:g}",
            )
        )
    elif p99 and cap < p99:
        out.append(
            PreflightFinding(
                "warning",
                "generation",
                "completion_length",
                f"max_completion_length={cap} is below the probe's p99 ({p99:g}; {numbers}): about "
                f"{'over 10%' if p90 and cap < p90 else '1-10%'} of rollouts will be truncated.",
                f"raise max_completion_length to about {target} (p99 plus headroom), or accept it and set "
                "mask_truncated_completions: true",
            )
        )
    else:
        out.append(
            PreflightFinding(
                "info",
                "generation",
                "completion_length",
                f"max_completion_length={cap} covers the probe's p99 ({numbers}).",
                "re-probe after large policy changes: lengths drift during RL",
            )
        )
    return out


def check_vllm(choices: TrainingChoices, *, has_rollout_func: bool = False) -> list[PreflightFinding]:
    """Where rollouts are generated, and whether that path renders its own prompts."""
    out: list[PreflightFinding] = []
    if has_rollout_func:
        out.append(
            PreflightFinding(
                "info",  # no evidence of a difference: the masking and template guards still see its rows
                "template",
                "rollout_func",
                "a rollout_func is set: TRL hands it the raw prompts and it renders them itself, so rollouts do not "
                "go through the trainer's apply_chat_template call checked here.",
                "render a probe conversation inside rollout_func and compare it with the train rendering shown here",
            )
        )
    if choices.use_vllm:
        mode = choices.vllm_mode
        where = (
            "a separate `vllm serve` process with its own model, tokenizer and generation config"
            if mode == "server"
            else "vLLM inside this process"
        )
        out.append(
            PreflightFinding(
                "info",
                "template",
                "vllm",
                f"use_vllm=True, vllm_mode={mode!r}: TRL 1.16 renders prompts with the trainer's tokenizer and sends "
                f"token ids to {where}. vLLM's own chat rendering (its chat endpoint, eval scripts using "
                "LLM.chat) is a different path, and its sampler's stop tokens and logprobs can differ.",
                "serve the same checkpoint and tokenizer revision; evaluate through the same rendering; keep "
                "vllm_importance_sampling_correction on",
            )
        )
    return out


# ----- template paths --------------------------------------------------------------------------------------


def check_template_paths(
    train: TemplateFingerprint,
    others: Sequence[TemplateFingerprint] = (),
    *,
    blocking_labels: Sequence[str] = ("eval",),
) -> list[PreflightFinding]:
    """Compare each other path's rendering of the same probe conversation with the training one.

    A difference is blocking for labels starting with one of ``blocking_labels`` (evaluating on a different
    rendering than training measures something else) and a warning otherwise (e.g. the SFT stage).
    """
    out: list[PreflightFinding] = []
    for other in others:
        blocking = any(other.label.startswith(prefix) for prefix in blocking_labels)
        out.extend(_compare_fingerprints(train, other, "blocking" if blocking else "warning"))
    return out


def _fingerprint_differences(a: TemplateFingerprint, b: TemplateFingerprint) -> list[str]:
    diffs = []
    # Checkpoint folders differ between stages by design: names count only with a class or vocabulary change.
    vocab_changed = bool(a.ids_sha and b.ids_sha and a.ids_sha != b.ids_sha)
    if a.tokenizer_class != b.tokenizer_class or (vocab_changed and a.tokenizer_name != b.tokenizer_name):
        diffs.append(f"tokenizer {a.tokenizer_name} ({a.tokenizer_class}) vs {b.tokenizer_name} ({b.tokenizer_class})")
    if a.template_sha != b.template_sha:
        diffs.append(f"chat template sha {a.template_sha or '-'} vs {b.template_sha or '-'}")
    if a.chat_template_kwargs != b.chat_template_kwargs:
        diffs.append(
            f"chat_template_kwargs {json.dumps(a.chat_template_kwargs, sort_keys=True)} vs "
            f"{json.dumps(b.chat_template_kwargs, sort_keys=True)}"
        )
    if a.templated != b.templated:
        diffs.append(f"templated {a.templated} vs {b.templated}")
    return diffs


def _compare_fingerprints(
    train: TemplateFingerprint, other: TemplateFingerprint, severity: str
) -> list[PreflightFinding]:
    settings = _fingerprint_differences(train, other)
    diff = unified_diff(train.rendered, other.rendered, train.label, other.label)
    label = other.label
    if diff:
        where = _first_changed_line(diff)
        return [
            PreflightFinding(
                severity,
                "template",
                f"{label}_template_mismatch",
                f"the {label} path renders the probe conversation differently from training"
                + (f" ({'; '.join(settings)})" if settings else "")
                + f". First difference: {where}",
                f"render {label} with the training tokenizer, chat template and chat_template_kwargs "
                f"({json.dumps(train.chat_template_kwargs, sort_keys=True)})",
                detail=diff,
            )
        ]
    if train.ids_sha and other.ids_sha and train.ids_sha != other.ids_sha:
        return [
            PreflightFinding(
                severity,
                "template",
                f"{label}_tokens_mismatch",
                f"the {label} path renders the same text but tokenizes it into different ids"
                + (f" ({'; '.join(settings)})" if settings else "")
                + ".",
                f"use the training tokenizer for {label}",
            )
        ]
    if settings:
        return [
            PreflightFinding(
                "info",
                "template",
                f"{label}_template_equivalent",
                f"the {label} path differs in settings ({'; '.join(settings)}) but renders the probe conversation to "
                "the same text and ids.",
                "nothing to do for plain prompts; re-check if prompts use tools, system prompts or multi-turn history",
            )
        ]
    return [
        PreflightFinding(
            "info",
            "template",
            f"{label}_template_same",
            f"the {label} path renders exactly like training (same tokenizer, template and kwargs).",
        )
    ]


def _first_changed_line(diff: str) -> str:
    minus = plus = None
    for line in diff.splitlines():
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-") and minus is None:
            minus = line[1:]
        elif line.startswith("+") and plus is None:
            plus = line[1:]
        if minus is not None and plus is not None:
            break
    if minus is None and plus is None:
        return "(whitespace only)"
    shown = [repr(x) if x is not None else "(nothing)" for x in (minus, plus)]
    return f"{shown[0]} vs {shown[1]}"


def check_eval_prompts(
    train_rendered: Sequence[str],
    eval_rendered: Sequence[str],
    *,
    train_templated: bool,
    eval_templated: bool,
    generation_suffix: str,
) -> list[PreflightFinding]:
    """The trainer's own eval dataset, rendered by the trainer's path, against the train dataset.

    TRL templates conversational prompts and passes string prompts through untouched, so the eval path only
    differs from training when the two datasets hold different prompt kinds, or pre-rendered strings whose
    generation prompt differs from the one training uses.
    """
    if not eval_rendered:
        return [
            PreflightFinding(
                "info",
                "template",
                "eval_dataset",
                "no eval dataset in the trainer.",
                "if you evaluate elsewhere, set preflight.eval_chat_template_kwargs (and eval_tokenizer) so that "
                "path is compared here",
            )
        ]
    if train_templated and eval_templated:
        return [
            PreflightFinding(
                "info",
                "template",
                "eval_dataset",
                "train and eval prompts are both conversational and go through the same apply_chat_template call "
                "(same tokenizer, template and chat_template_kwargs).",
            )
        ]
    if not train_templated and not eval_templated:
        return [
            PreflightFinding(
                "info",
                "template",
                "eval_dataset",
                "train and eval prompts are plain strings: TRL feeds them to the model untemplated, exactly as "
                "written.",
                "check that both were rendered by the same code (see the rendered examples)",
            )
        ]
    mismatched = []
    if train_templated:
        # Eval strings must already hold the rendering; check they end where training's generation prompt ends.
        mismatched = [text for text in eval_rendered if not generation_suffix or not text.endswith(generation_suffix)]
        if not mismatched:
            return [
                PreflightFinding(
                    "info",
                    "template",
                    "eval_dataset",
                    "eval prompts are pre-rendered strings that end with training's generation prompt "
                    f"({visible_whitespace(generation_suffix, newline_marks=True)}).",
                    "prefer conversational eval prompts so both go through the same call",
                )
            ]
    sample_train = train_rendered[0] if train_rendered else ""
    sample_eval = mismatched[0] if mismatched else eval_rendered[0]
    tail_lines = max(3, generation_suffix.count("\n") + 2)
    train_tail, eval_tail = _tail(sample_train, tail_lines), _tail(sample_eval, tail_lines)
    diff = unified_diff(train_tail, eval_tail, "train (tail)", "eval (tail)", context=tail_lines)
    kinds = (
        "train prompts are conversational (templated by TRL) but eval prompts are plain strings (passed untemplated)"
        if train_templated
        else "train prompts are plain strings (untemplated) but eval prompts are conversational (templated by TRL)"
    )
    count = f"{len(mismatched)}/{len(eval_rendered)} " if mismatched else ""
    return [
        PreflightFinding(
            "blocking",
            "template",
            "eval_template_mismatch",
            f"{kinds}: {count}eval prompts do not end with the generation prompt training uses "
            f"({visible_whitespace(generation_suffix, newline_marks=True) or '-'}), so eval measures a different "
            "rendering.",
            "store eval prompts in the same form as train prompts (conversational messages), or render them with the "
            "training tokenizer and chat_template_kwargs",
            detail=diff,
        )
    ]


def _tail(text: str, lines: int) -> str:
    parts = text.splitlines(keepends=True)
    return "".join(parts[-lines:])


# ----- the report ------------------------------------------------------------------------------------------


@dataclass
class PreflightReport:
    """Findings plus what was looked at: the choices, the template fingerprints, rendered examples."""

    findings: list[PreflightFinding] = field(default_factory=list)
    choices: dict[str, Any] = field(default_factory=dict)
    templates: list[TemplateFingerprint] = field(default_factory=list)
    examples: list[tuple[str, str]] = field(default_factory=list)  # (label, rendered prompt as the model sees it)

    @property
    def blocking(self) -> list[PreflightFinding]:
        return [f for f in self.findings if f.severity == "blocking"]

    @property
    def warnings(self) -> list[PreflightFinding]:
        return [f for f in self.findings if f.severity == "warning"]

    def counts(self) -> dict[str, int]:
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    def sorted_findings(self) -> list[PreflightFinding]:
        """Blocking first, then warnings, then info; insertion order within a severity."""
        return sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))

    def find(self, code: str) -> list[PreflightFinding]:
        """Findings with this code."""
        return [f for f in self.findings if f.code == code]

    def headline(self) -> str:
        c = self.counts()
        return f"rl_guards preflight: {c['blocking']} blocking, {c['warning']} warning, {c['info']} info"

    def render(self, width: int = 110, *, styled: bool = False) -> str:
        """The readable report: choices, findings table with fixes, details (diffs), template paths, examples."""
        lines = [self.headline(), ""]
        if self.choices:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in self.choices.items())
            lines += textwrap.wrap(f"choices: {shown}", width, subsequent_indent="  ")
            lines.append("")
        rows = [
            [f.severity, f.topic, f"[{f.code}] {f.message}" + (f"\nfix: {f.fix}" if f.fix else "")]
            for f in self.sorted_findings()
        ]
        table = render_table(["severity", "topic", "finding"], rows, width=width, styled=styled, severity_column=0)
        lines.append(table)
        details = [f for f in self.sorted_findings() if f.detail]
        for f in details:
            lines += ["", f"--- {f.code} ({f.severity}) ---", f.detail]
        if self.templates:
            lines += ["", "--- template paths (probe conversation) ---"]
            lines += [t.summary() for t in self.templates]
        for i, (label, text) in enumerate(self.examples):
            shown = visible_whitespace(text).rstrip("\n")
            lines += ["", f"--- rendered example {i + 1}: {label} (whitespace visible) ---", shown]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts(),
            "findings": [f.to_dict() for f in self.sorted_findings()],
            "choices": dict(self.choices),
            "templates": [t.to_dict() for t in self.templates],
            "examples": [{"label": label, "text": text} for label, text in self.examples],
        }


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


REPORT_CHOICES = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "loss_type",
    "scale_rewards",
    "beta",
    "num_generations",
    "max_completion_length",
    "mask_truncated_completions",
    "temperature",
    "use_vllm",
    "chat_template_kwargs",
)


def trainer_kind(args: Any) -> str:
    """``rloo`` for an RLOOConfig (it has ``normalize_advantages`` and no ``loss_type``), else ``grpo``."""

    def has(name: str) -> bool:
        return name in args if isinstance(args, Mapping) else hasattr(args, name)

    return "rloo" if has("normalize_advantages") and not has("loss_type") else "grpo"


def check_rloo(choices: TrainingChoices) -> list[PreflightFinding]:
    """What RLOO does with its own settings (it has no loss_type or scale_rewards)."""
    norm = "normalised (divided by their std across the batch)" if choices.normalize_advantages else "not normalised"
    return [
        PreflightFinding(
            "info",
            "loss",
            "rloo_advantages",
            "RLOO: each completion's advantage is its reward minus the mean reward of the other completions of its "
            f"prompt (leave-one-out baseline); advantages are {norm} (normalize_advantages="
            f"{choices.normalize_advantages}). A group whose rewards are all equal still gives zero advantage.",
            "keep num_generations >= 4 so the leave-one-out baseline is not one other completion",
        ),
        PreflightFinding(
            "info",
            "loss",
            "kl",
            f"beta={choices.beta:g} (RLOOConfig default 0.05): RLOO subtracts beta x the sequence KL to the reference "
            "model from the reward itself, so the KL term shifts rewards (and the logged reward) rather than the "
            "loss; beta=0 removes the reference model."
            if choices.beta
            else "beta=0: no reference model and no KL term in RLOO's reward.",
            "TRL rebuilds the reference from the model's name_or_path: pass a saved checkpoint path, not an "
            "in-memory model",
        ),
    ]


def check_choices(
    choices: TrainingChoices,
    *,
    length_probe: LengthProbeNumbers | None = None,
    blocking_cap_ratio: float = 0.5,
    has_rollout_func: bool = False,
) -> list[PreflightFinding]:
    """Every check that needs only the training choices (and a length probe)."""
    loss = (
        check_rloo(choices)
        if choices.trainer == "rloo"
        else [*check_loss_type(choices), *check_scale_rewards(choices), *check_kl(choices)]
    )
    return [
        *check_lr_schedule(choices),
        *check_learning_rate(choices),
        *loss,
        *check_group_size(choices),
        *check_truncated_masking(choices),
        *check_completion_length(choices.max_completion_length, length_probe, blocking_ratio=blocking_cap_ratio),
        *check_vllm(choices, has_rollout_func=has_rollout_func),
    ]


def build_report(
    choices: TrainingChoices,
    *,
    template_findings: Sequence[PreflightFinding] = (),
    templates: Sequence[TemplateFingerprint] = (),
    examples: Sequence[tuple[str, str]] = (),
    length_probe: LengthProbeNumbers | None = None,
    blocking_cap_ratio: float = 0.5,
    has_rollout_func: bool = False,
) -> PreflightReport:
    """The full report from plain values."""
    findings = check_choices(
        choices, length_probe=length_probe, blocking_cap_ratio=blocking_cap_ratio, has_rollout_func=has_rollout_func
    )
    findings += list(template_findings)
    shown = {name: getattr(choices, name) for name in REPORT_CHOICES}
    return PreflightReport(findings=findings, choices=shown, templates=list(templates), examples=list(examples))


__all__ = [
    "SEVERITIES",
    "LengthProbeNumbers",
    "PreflightFinding",
    "PreflightReport",
    "TemplateFingerprint",
    "TrainingChoices",
    "build_report",
    "check_choices",
    "check_completion_length",
    "check_eval_prompts",
    "check_group_size",
    "check_kl",
    "check_learning_rate",
    "check_loss_type",
    "check_lr_schedule",
    "check_scale_rewards",
    "check_template_paths",
    "check_truncated_masking",
    "check_vllm",
    "dead_group_table",
    "text_sha",
    "unified_diff",
    "visible_whitespace",
]
