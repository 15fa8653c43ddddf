"""One configuration object, one sub-config per guard.

Every guard has ``enabled`` and ``mode`` (``raise`` stops the run, ``warn`` warns once and counts in a metric,
``log`` only counts), plus its thresholds. Load from a dict, a YAML file, or the command line next to TRL's
own dataclasses (see :class:`GuardsArguments`). Invalid values raise :class:`~rl_guards.errors.ConfigError`
naming the field, e.g. ``think_tags.mode``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from rl_guards.errors import ConfigError

Mode = Literal["raise", "warn", "log"]
MODES: tuple[str, ...] = ("raise", "warn", "log")


class _Checked:
    """Checks every assignment made after construction: ``cfg.masking.mode = "Raise"`` is a ConfigError at once
    (0.1 accepted it and treated the guard as ``log``), as are a wrong type, a NaN threshold or an unknown field."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_ready"):  # the dataclass __init__ filling the fields
            object.__setattr__(self, name, value)
            return
        fields = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        prefix = self.__dict__.get("_section") or type(self).__name__
        if name not in fields:
            raise ConfigError(f"unknown field {prefix}.{name}; available: {sorted(fields)}")
        coerced = _coerce(_hints(type(self))[name], value, f"{prefix}.{name}")
        old = self.__dict__.get(name)
        object.__setattr__(self, name, coerced)
        try:
            self.validate(prefix)  # type: ignore[attr-defined]
        except ConfigError:
            object.__setattr__(self, name, old)
            raise

    def _ready_now(self, section: str = "") -> None:
        object.__setattr__(self, "_section", section or self.__dict__.get("_section", ""))
        object.__setattr__(self, "_ready", True)


@dataclass
class GuardConfig(_Checked):
    """Fields every guard has."""

    enabled: bool = True  # turn the guard off entirely
    mode: Mode = "warn"  # raise: stop the run; warn: warn once and count; log: count only

    def __post_init__(self) -> None:
        self._ready_now()

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming ``prefix.<field>`` for an invalid value."""
        if self.mode not in MODES:
            raise ConfigError(f"{prefix}.mode must be one of {list(MODES)}, got {self.mode!r}")


def _check_positive(prefix: str, name: str, value: float, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{prefix}.{name} must be {bound}, got {_show(value)}")


def _check_fraction(prefix: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{prefix}.{name} must be within [0, 1], got {_show(value)}")


@dataclass
class MaskingConfig(GuardConfig):
    """GRPO batch masks and SFT collator labels."""

    mode: Mode = "raise"
    check_every: int = 1  # check one batch in N (1 = every batch)
    max_rows_shown: int = 2  # offending rows decoded in the error message

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "check_every", self.check_every)
        _check_positive(prefix, "max_rows_shown", self.max_rows_shown)


@dataclass
class ThinkTagsConfig(GuardConfig):
    """Think-markup scanning of every completion (rates per anomaly kind and per task)."""

    open_tag: str = "<think>"  # opening tag of the reasoning block
    close_tag: str = "</think>"  # closing tag of the reasoning block
    thinking_column: str = "enable_thinking"  # per-row thinking flag column, if the dataset has it
    # render each prompt with its row's thinking_column as enable_thinking (TRL renders every prompt with one global
    # chat_template_kwargs): what honour_thinking_column(trainer) does, for rl-guards grpo and the callback route
    per_row_thinking: bool = False
    max_anomaly_rate: float = 0.5  # warn/raise when the share of anomalous completions exceeds this
    # the thinking / non-thinking mix the run aims at (e.g. 0.5); None = not checked
    target_thinking_share: float | None = None
    thinking_share_tolerance: float = 0.15  # warn/raise when the live share (overall or a task's) leaves target +- this

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not self.open_tag or not self.close_tag or self.open_tag == self.close_tag:
            raise ConfigError(f"{prefix}.open_tag/close_tag must be two different non-empty strings")
        _check_fraction(prefix, "max_anomaly_rate", self.max_anomaly_rate)
        if self.target_thinking_share is not None:
            _check_fraction(prefix, "target_thinking_share", self.target_thinking_share)
        _check_fraction(prefix, "thinking_share_tolerance", self.thinking_share_tolerance)


@dataclass
class StrayThinkPenaltyConfig(GuardConfig):
    """Reward function penalising stray or malformed think tags (add it to ``reward_funcs``)."""

    mode: Mode = "log"
    weight: float = 1.0  # penalty per anomalous completion (the reward is -weight, else 0)
    # anomaly kinds that count; empty = every kind that is wrong for the row's thinking mode
    anomalies: list[str] = field(default_factory=list)
    thinking: bool | None = None  # default thinking mode; None = from chat_template_kwargs.enable_thinking

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "weight", self.weight, allow_zero=True)
        from rl_guards.core.think_markup import ALL_CODES

        unknown = sorted(set(self.anomalies) - set(ALL_CODES))
        if unknown:
            raise ConfigError(f"{prefix}.anomalies has unknown code(s) {unknown}; available: {list(ALL_CODES)}")


@dataclass
class TemplateConfig(GuardConfig):
    """Double ``<think>`` prefills and ignored thinking flags, checked on rendered prompts at train start."""

    mode: Mode = "raise"
    num_prompts: int = 4  # dataset prompts rendered through the trainer's own path

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "num_prompts", self.num_prompts)


@dataclass
class TasksConfig(GuardConfig):
    """Per-task reward curves."""

    mode: Mode = "log"
    task_column: str = "task"  # dataset column naming each row's task
    default_task: str = "all"  # task name when the column is missing or the row's value is null
    # tasks with their own per-task curves (the most frequent in the dataset first); the rest share one
    # "~other" curve (0 = no cap)
    max_tasks: int = 32

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "max_tasks", self.max_tasks, allow_zero=True)


@dataclass
class RoutingConfig(GuardConfig):
    """Which reward functions serve which task; checked on live batches."""

    mode: Mode = "raise"
    routes: dict[str, list[str]] = field(default_factory=dict)  # task -> reward function names

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        for task, funcs in self.routes.items():
            if not isinstance(funcs, list) or not all(isinstance(f, str) for f in funcs):
                raise ConfigError(f"{prefix}.routes[{task!r}] must be a list of reward function names")


@dataclass
class DeadGroupsConfig(GuardConfig):
    """Groups whose rollouts all got the same reward (zero advantage)."""

    warn_after_steps: int = 10  # a task with no gradient for this many consecutive batches triggers
    target_dead_share: float = 0.25  # the group-size advisor aims below this share of dead groups
    # a task whose dead-group share averages above this over the last warn_after_steps batches triggers, with the
    # group-size advice (most of its groups teach nothing)
    max_dead_share: float = 0.8

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "warn_after_steps", self.warn_after_steps)
        _check_fraction(prefix, "target_dead_share", self.target_dead_share)
        _check_fraction(prefix, "max_dead_share", self.max_dead_share)


@dataclass
class GroupsConfig(GuardConfig):
    """Every rollout of a group answered the same prompt (group-relative advantages compare like with like)."""

    mode: Mode = "raise"


@dataclass
class TruncationConfig(GuardConfig):
    """Completions that hit max_completion_length."""

    max_rate: float = 0.1  # warn/raise when a task's truncated share is, beyond sampling noise, above this
    window: int = 8  # recent batches per task whose rows the share is measured over
    min_rows: int = 32  # rows of a task in the window before its share is judged
    # prompts whose completions were all cut are judged from the first batch: reported when that many are this
    # unlikely (binomial p-value) at a share of max_rate (4 of 4 prompts at max_rate 0.1: 1e-4)
    early_alpha: float = 0.001

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_fraction(prefix, "max_rate", self.max_rate)
        _check_positive(prefix, "window", self.window)
        _check_positive(prefix, "min_rows", self.min_rows)
        _check_fraction(prefix, "early_alpha", self.early_alpha)


@dataclass
class SlicingConfig(GuardConfig):
    """Strings cut short on their way to a reward function (``text[:3000]``)."""

    min_repeats: int = 3  # this many texts of one identical round length look like a cap
    min_length: int = 64  # ignore caps shorter than this
    # completions re-decoded per batch and rank to compare with the reward functions' text: the longest ones, since
    # a slice shortens every text longer than its cut, the longest first (0 = every row; decoding is this guard's
    # main cost: ~0.8 ms per 1,000-token row)
    decode_rows: int = 8

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "min_repeats", self.min_repeats)
        _check_positive(prefix, "min_length", self.min_length)
        _check_positive(prefix, "decode_rows", self.decode_rows, allow_zero=True)


@dataclass
class RolloutsConfig(GuardConfig):
    """Rollout dumps: every N steps and at every checkpoint save."""

    mode: Mode = "warn"
    every_steps: int = 10  # dump the rollouts of one step in N
    on_save: bool = True  # also dump at every checkpoint save
    output_dir: str | None = None  # default: <trainer output_dir>/rl_guards/rollouts
    wandb_rows_per_task: int = 4  # rows per task in the W&B table of each dump (0 = no table)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "every_steps", self.every_steps)
        _check_positive(prefix, "wandb_rows_per_task", self.wandb_rows_per_task, allow_zero=True)


@dataclass
class PreflightConfig(GuardConfig):
    """One report at train start: template path, optimisation choices, generation limits."""

    examples: int = 2  # rendered examples printed in the report
    eval_chat_template_kwargs: dict[str, Any] | None = None  # kwargs an external eval renders with (None: not compared)
    eval_tokenizer: str | None = None  # tokenizer dir an external eval loads (None: the training tokenizer)
    sft_tokenizer: str | None = None  # tokenizer dir of the SFT stage, to compare its chat template
    length_probe: str | None = None  # JSON file of length-probe results (p90, p99, share_at_cap)
    blocking_cap_ratio: float = 0.5  # blocking when max_completion_length < this x the probe's p90

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "examples", self.examples, allow_zero=True)
        if not 0.0 < self.blocking_cap_ratio <= 1.0:
            raise ConfigError(f"{prefix}.blocking_cap_ratio must be within (0, 1], got {self.blocking_cap_ratio!r}")


@dataclass
class RewardSanityConfig(GuardConfig):
    """Known-good vs known-bad completions scored by the reward functions at train start."""

    mode: Mode = "raise"
    cases_file: str | None = None  # YAML/JSON cases (task, prompt, good, bad, columns); None = built from the data
    # shaping terms (e.g. a length penalty): exempt from the per-function rule, still part of the weighted total
    shaping: list[str] = field(default_factory=list)
    # without a cases file: the dataset column holding each row's reference answer (None = the first of answer,
    # solution, ground_truth, reference, target, gold, label that the dataset has)
    reference_column: str | None = None
    auto_cases: int = 2  # rows per task turned into good/bad cases when there is no cases file (0 = no such check)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "auto_cases", self.auto_cases, allow_zero=True)


@dataclass
class ProbesConfig(GuardConfig):
    """Re-score a few real rows with each reward function on controlled variants: does it read only a prefix, read
    the thinking, or pay a degenerate completion as much as the best real one?"""

    every_steps: int = 50  # probe as soon as the budget allows, then again every N steps (within the budget)
    rows: int = 8  # real rows probed per task, rank and probe (a verdict needs 3 rows, most of those probed)
    budget: float = 0.02  # probes' wall time at most this share of the run's elapsed time, at every step
    call_timeout: float = 30.0  # seconds any one probe call may take (less: 20x the function's measured time)
    skip: list[str] = field(default_factory=list)  # reward functions never probed (expensive judges); models never are
    process_rewards: list[str] = field(default_factory=list)  # functions meant to read the thinking (not flagged)
    prefix_ok: list[str] = field(default_factory=list)  # functions meant to read only the start or end (not flagged)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "every_steps", self.every_steps)
        _check_positive(prefix, "rows", self.rows)
        _check_positive(prefix, "budget", self.budget)  # a share; above 1 only for tests of very short runs
        _check_positive(prefix, "call_timeout", self.call_timeout)


@dataclass
class DriftConfig(GuardConfig):
    """Behaviour drift: fixed probe prompts generated at step 0 and at every checkpoint, compared to the baseline."""

    prompts_per_task: int = 2  # probe prompts per task (each generated num_generations times)
    max_tasks: int = 8  # tasks probed (the most frequent first)
    seed: int = 0  # picks the probe prompts (from eval_dataset when there is one, else the train set)
    reward_margin: float = 0.05  # the alarm needs the task's training reward up by this much since the start
    reward_window: int = 5  # train batches averaged for the start and the recent training reward
    length_ratio: float = 2.0  # mean completion length x this (or / this) counts as drift
    thinking_length_ratio: float = 2.0  # mean thinking length (characters) x this (or / this) counts as drift,
    thinking_length_floor: float = 32.0  # and by at least this many characters as well
    repetition_rise: float = 0.2  # absolute rise of the repeated 4-gram share
    distinct_drop: float = 0.3  # absolute drop of distinct-2 across a group
    thinking_share_drop: float = 0.5  # absolute drop of the share of completions with a think block
    empty_answer_rise: float = 0.3  # absolute rise of the empty-answer rate
    anomaly_rise: float = 0.3  # absolute rise of the think-markup anomaly rate
    terminated_drop: float = 0.3  # absolute drop of the share ending with EOS (more hit the length cap)
    non_ascii_rise: float = 0.2  # absolute rise of the non-ASCII share (a script change)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        _check_positive(prefix, "prompts_per_task", self.prompts_per_task)
        _check_positive(prefix, "max_tasks", self.max_tasks)
        _check_positive(prefix, "reward_window", self.reward_window)
        _check_positive(prefix, "reward_margin", self.reward_margin, allow_zero=True)
        _check_positive(prefix, "thinking_length_floor", self.thinking_length_floor, allow_zero=True)
        for name in ("length_ratio", "thinking_length_ratio"):
            if getattr(self, name) <= 1:
                raise ConfigError(f"{prefix}.{name} must be > 1, got {getattr(self, name)!r}")
        for name in ("repetition_rise", "distinct_drop", "thinking_share_drop", "empty_answer_rise", "anomaly_rise",
                     "terminated_drop", "non_ascii_rise"):  # fmt: skip
            _check_fraction(prefix, name, getattr(self, name))


@dataclass
class RewardErrorsConfig(GuardConfig):
    """A reward function that raises: the rows it raised on are found and shown (raise), or scored None (warn)."""


@dataclass
class UnpaidRewardsConfig(GuardConfig):
    """A reward function that gives one score on every row of a task (below what it pays a right answer) while the
    task's total moves: the run never gets it."""

    window: int = 8  # recent train batches of a task whose rows a function is judged over
    min_groups: int = 8  # groups (prompts) of the task it scored over the window before it is judged
    min_steps: int = 2  # batches of the window in which it scored the task
    probe_rows: int = 2  # rows per task and rank the function is asked to score right answers on (once per episode)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        for name in ("window", "min_groups", "min_steps", "probe_rows"):
            _check_positive(prefix, name, getattr(self, name))


@dataclass
class MetricsConfig(_Checked):
    """How much rl_guards logs: ``default`` is a small set, quiet when healthy (:mod:`rl_guards.core.metric_set`);
    ``full`` logs every metric of every guard. ``metrics: full`` in YAML is short for ``metrics: {level: full}``."""

    SHORTHAND: ClassVar[str] = "level"

    level: Literal["default", "full"] = "default"  # default: the headline set; full: every guard's every metric

    def __post_init__(self) -> None:
        self._ready_now()

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming ``prefix.level`` for an invalid value."""
        if self.level not in ("default", "full"):
            raise ConfigError(f"{prefix}.level must be one of ['default', 'full'], got {self.level!r}")


@dataclass
class EngineConfig(_Checked):
    """How the guards run beside the trainer. ``background`` (with more than one rank): a generation batch's
    gather, the guards' decisions and the ranks' agreement run on a background thread, on a process group of
    rl_guards' own, while the step trains; the training thread only reads its rows and waits at the step's end. A
    stop then lands at the end of the step that trained the batch (after its optimizer update, before its log and
    checkpoint) rather than before its loss. ``background: false`` decides before the loss, on the training thread,
    waiting for every rank. One process always decides before the loss: there is no rank to wait for."""

    background: bool = True  # with several ranks: decide each batch on a background thread while the step trains

    def __post_init__(self) -> None:
        self._ready_now()

    def validate(self, prefix: str) -> None:
        """Nothing to check beyond the field's type."""


@dataclass
class ConsoleConfig(_Checked):
    """What rl_guards prints (all of it on the ``rl_guards`` logger, :mod:`rl_guards.console`). By default: one
    preflight summary line (the full report is written next to the findings), each warning and blocking finding once
    in full, a status line when the status changes or every ``status_every`` steps, the findings table at the end."""

    verbose: bool = False  # also the full preflight report, info findings, notes, and a status line at every log
    status_every: int = 10  # a status line at least every N steps, even when nothing changed

    def __post_init__(self) -> None:
        self._ready_now()

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming ``prefix.status_every`` for an invalid value."""
        _check_positive(prefix, "status_every", self.status_every)


@dataclass
class GuardsConfig:
    """All guards. ``GuardsConfig()`` turns every guard on with its default mode."""

    masking: MaskingConfig = field(default_factory=MaskingConfig)
    think_tags: ThinkTagsConfig = field(default_factory=ThinkTagsConfig)
    stray_think_penalty: StrayThinkPenaltyConfig = field(default_factory=StrayThinkPenaltyConfig)
    template: TemplateConfig = field(default_factory=TemplateConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    dead_groups: DeadGroupsConfig = field(default_factory=DeadGroupsConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    truncation: TruncationConfig = field(default_factory=TruncationConfig)
    slicing: SlicingConfig = field(default_factory=SlicingConfig)
    rollouts: RolloutsConfig = field(default_factory=RolloutsConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    reward_sanity: RewardSanityConfig = field(default_factory=RewardSanityConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    reward_errors: RewardErrorsConfig = field(default_factory=RewardErrorsConfig)
    unpaid_rewards: UnpaidRewardsConfig = field(default_factory=UnpaidRewardsConfig)
    drift: DriftConfig = field(default_factory=DriftConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, self._section_value(f.name, getattr(self, f.name)))
        object.__setattr__(self, "_ready", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_ready"):
            object.__setattr__(self, name, value)
            return
        names = [f.name for f in dataclasses.fields(self)]
        if name not in names:
            raise ConfigError(f"unknown guard section {name!r}; available: {names}")
        object.__setattr__(self, name, self._section_value(name, value))

    def _section_value(self, name: str, value: Any) -> Any:
        """A section from a dict (or None: defaults) or an instance of its class, validated and named."""
        cls = _hints(type(self))[name]
        if value is None or isinstance(value, dict | str):
            value = _coerce(cls, {} if value is None else value, name)
        if not isinstance(value, cls):
            raise ConfigError(f"{name} must be a {cls.__name__} or a mapping, got {type(value).__name__}")
        _check_fields(value, name)
        value.validate(name)
        value._ready_now(name)
        return value

    def validate(self) -> GuardsConfig:
        """Check every section again (values changed in place, e.g. a list appended to); returns the config.

        ``rl_guards.install()`` calls it, so a config edited in code after construction is checked before training.
        """
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            _check_fields(section, f.name)
            section.validate(f.name)
        return self

    # ----- loading -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GuardsConfig:
        """Build from a nested dict; unknown keys and wrong types raise ConfigError naming the field."""
        return _build(cls, data or {}, "")

    @classmethod
    def from_yaml(cls, path: str | Path) -> GuardsConfig:
        """Load a YAML file (the same nesting as :meth:`to_dict`)."""
        return cls.from_dict(_guards_mapping(path))

    @classmethod
    def layered(
        cls, section: dict[str, Any] | None = None, path: str | Path | None = None, sets: list[str] | None = None
    ) -> GuardsConfig:
        """The precedence of the command lines: a YAML's ``guards:`` ``section`` < the ``--guards_config`` file at
        ``path`` (field by field: a field the file does not set keeps the section's value) < ``--guards_set``."""
        if section is not None and not isinstance(section, dict):
            raise ConfigError(f"the guards: section must be a mapping, got {type(section).__name__}")
        merged: dict[str, Any] = {
            key: dict(value) if isinstance(value, dict) else value for key, value in (section or {}).items()
        }
        for key, value in (_guards_mapping(path) if path else {}).items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        config = cls.from_dict(merged)
        return config.with_overrides(list(sets)) if sets else config

    @classmethod
    def guard_sections(cls) -> list[str]:
        """The sections that configure a guard (``enabled``, ``mode``); the others (``metrics``, ``engine``,
        ``console``) set how rl_guards runs."""
        hints = _hints(cls)
        return [f.name for f in dataclasses.fields(cls) if issubclass(hints[f.name], GuardConfig)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable nested dict."""
        return dataclasses.asdict(self)

    def with_overrides(self, assignments: list[str]) -> GuardsConfig:
        """Apply ``section.field=value`` strings (values parsed as YAML scalars/lists)."""
        data = self.to_dict()
        for item in assignments:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like section.field=value")
            key, raw = item.split("=", 1)
            parts = key.strip().split(".")
            if len(parts) != 2:
                raise ConfigError(f"override key {key!r} must be section.field, e.g. think_tags.mode")
            section, name = parts
            if section not in data:
                raise ConfigError(f"unknown guard section {section!r}; available: {sorted(data)}")
            if name not in data[section]:
                raise ConfigError(f"unknown field {section}.{name}; available: {sorted(data[section])}")
            data[section][name] = load_yaml(raw, f"override {key.strip()}")
        return GuardsConfig.from_dict(data)


# ----- what each field means ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldDoc:
    """One field of the config as ``rl-guards config`` lists it."""

    section: str
    name: str
    type: str
    default: Any
    doc: str


def section_doc(section: str) -> str:
    """The first sentence of a section's class docstring."""
    cls = _hints(GuardsConfig)[section]
    text = " ".join((cls.__doc__ or "").split())
    return text.split(". ")[0].rstrip(".")


@functools.cache
def _comments() -> dict[tuple[str, str], str]:
    """(class, field) -> the comment that documents the field in this file: the lines of comment right above it and
    the comment at the end of its line (a field a subclass only re-defaults has its parent's)."""
    import ast
    import io
    import tokenize

    source = Path(__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    out: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
                continue
            above, line = [], statement.lineno - 1
            while line in comments and lines[line - 1].strip().startswith("#"):
                above.insert(0, comments[line])
                line -= 1
            trailing = [
                comments[n]
                for n in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
                if n in comments and not lines[n - 1].strip().startswith("#")
            ]
            text = " ".join(part for part in [*above, *trailing] if part and part != "fmt: skip")
            if text:
                out[(node.name, statement.target.id)] = text
    return out


def field_docs(section: str | None = None) -> list[FieldDoc]:
    """Every field of every section of :class:`GuardsConfig` (or of ``section``), with its type, default and the
    comment that documents it in this file."""
    comments = _comments()
    defaults = GuardsConfig()
    out = []
    for name in [f.name for f in dataclasses.fields(GuardsConfig)]:
        if section is not None and name != section:
            continue
        cls = _hints(GuardsConfig)[name]
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            doc = next((comments[(k.__name__, f.name)] for k in cls.__mro__ if (k.__name__, f.name) in comments), "")
            kind = hints[f.name]
            type_text = kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
            out.append(FieldDoc(name, f.name, type_text, getattr(getattr(defaults, name), f.name), doc))
    return out


# ----- YAML ----------------------------------------------------------------------------------------------
MAX_YAML_NODES = 100_000  # nodes of a YAML document once its aliases are expanded (a config has hundreds)
MAX_INT = 2**63 - 1  # integer fields beyond this are refused (nothing downstream holds them)


def load_yaml(text: str | bytes, where: str = "YAML") -> Any:
    """The value of one YAML document (None when empty), or ConfigError naming ``where``.

    Safe types only; a mapping key given twice is an error naming it (PyYAML keeps the last silently); aliases are
    followed but a document whose expansion exceeds :data:`MAX_YAML_NODES` nodes (an alias bomb) or refers to
    itself is refused before anything is built from it. Bad syntax, tabs, bytes that are not UTF-8: ConfigError.
    """
    import yaml

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{where}: not UTF-8 text (byte {text[exc.start]:#04x} at offset {exc.start}); save the file as UTF-8"
            ) from None
    loader = None
    try:
        loader = _loader_class()(text)  # the reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {_first_lines(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a config") from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. an integer literal of more than 4300 digits
        raise ConfigError(f"{where}: a value cannot be read: {type(exc).__name__}: {str(exc)[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _guards_mapping(path: str | Path) -> dict[str, Any]:
    """A guards YAML's sections: the file's top level, or its ``rl_guards:`` mapping (not both)."""
    data = read_yaml_mapping(path)
    if "rl_guards" in data:
        others = sorted(str(k) for k in data if k != "rl_guards")
        if others:
            raise ConfigError(f"{path}: guard sections both under rl_guards: and at the top level ({others}); keep one")
        data = data["rl_guards"] or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: rl_guards: must be a mapping, got {type(data).__name__}")
    return data


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of the YAML file at ``path`` ({} for an empty file), or ConfigError naming the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    data = load_yaml(raw, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _first_lines(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


@functools.cache
def _loader_class() -> type:
    """The loader class, built on first use (PyYAML is imported lazily)."""
    import yaml

    class GuardsYamlLoader(yaml.SafeLoader):
        """SafeLoader that refuses a mapping key given twice (naming it) instead of keeping the last."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base": merged keys may be overridden
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:  # an unhashable key: PyYAML names it below
                        continue
                    if duplicate:
                        line = key_node.start_mark.line + 1
                        raise ConfigError(
                            f"key {_show(key)} is given twice in one mapping (line {line}); YAML would keep the "
                            "last one silently: keep one"
                        )
            return super().construct_mapping(node, deep=deep)

    return GuardsYamlLoader


def _check_expansion(root: Any, where: str) -> None:
    """ConfigError when the node graph, aliases expanded, has more than MAX_YAML_NODES nodes or a cycle."""
    import yaml

    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node, yaml)
            total = 1 + sum(size[id(c)] for c in children)
            size[key] = total
            if total > MAX_YAML_NODES:
                raise ConfigError(
                    f"{where}: its aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb?); "
                    "write the config out without so many aliases"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise ConfigError(f"{where}: an alias refers to a node that contains it (a recursive structure)")
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node, yaml):
            if id(child) in on_path:
                raise ConfigError(f"{where}: an alias refers to a node that contains it (a recursive structure)")
            if id(child) not in size:
                stack.append((child, False))


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _show(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters; a huge integer shown by its size (its repr may not exist)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_fields(section: Any, prefix: str) -> None:
    """Every field of ``section`` has a value of its declared type (ConfigError naming the first that does not)."""
    hints = _hints(type(section))
    for f in dataclasses.fields(section):
        _coerce(hints[f.name], getattr(section, f.name), f"{prefix}.{f.name}")


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {type(data).__name__}")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        where = prefix or "config"
        raise ConfigError(f"{where} has key(s) that are not names: {odd!r}; keys must be strings (field names)")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown field(s) {[where + u for u in unknown]}; available: {sorted(names)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        kwargs[key] = _coerce(hints[key], value, path)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        shorthand = getattr(tp, "SHORTHAND", None)
        if shorthand is not None and isinstance(value, str):  # "metrics: full" -> {"level": "full"}
            value = {shorthand: value}
        return _build(tp, {} if value is None else value, path)  # "masking:" with nothing: the defaults
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path} must be one of {list(args)}, got {_show(value)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path}: invalid value {_show(value)}")
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path} must be a list, got {_show(value)}")
        return [_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path} must be a mapping, got {_show(value)}")
        return {str(k): _coerce(args[1], v, f"{path}[{k!r}]") if args else v for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path} must be true or false, got {_show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path} must be an integer, got {_show(value)}")
        if abs(value) > MAX_INT:
            raise ConfigError(f"{path} is out of range: {_show(value)} (at most {MAX_INT})")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path} must be a number, got {_show(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float (weight: 1000...0, 400 digits)
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{path} must be a finite number, got {_show(value)}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path} must be a string, got {_show(value)}")
        return value
    return value


@dataclass
class GuardsArguments:
    """Command-line arguments parsed next to TRL's dataclasses by ``TrlParser``/``HfArgumentParser``.

    ``--guards_config guards.yaml --guards_set think_tags.mode=raise rollouts.every_steps=5``
    """

    guards_config: str | None = field(default=None, metadata={"help": "YAML file with the rl_guards config."})
    guards_set: list[str] = field(
        default_factory=list,
        metadata={"help": "Overrides as section.field=value, e.g. think_tags.mode=raise.", "nargs": "*"},
    )

    verbose: bool = field(
        default=False,
        metadata={"help": "rl_guards prints its full detail (console.verbose): the whole preflight report, info "
                  "findings and notes, a status line at every log."},
    )

    def to_config(self) -> GuardsConfig:
        """The GuardsConfig these arguments describe."""
        base = GuardsConfig.from_yaml(self.guards_config) if self.guards_config else GuardsConfig()
        config = base.with_overrides(list(self.guards_set)) if self.guards_set else base
        if self.verbose:
            config.console.verbose = True
        return config
