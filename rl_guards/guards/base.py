"""What every guard shares: the batch hook, the mode switch (raise | warn | log), metrics and findings.

A guard is framework-free: it receives a :class:`~rl_guards.core.batch.RolloutBatch` and a :class:`Reporter`.
The TRL adapter calls it once per generation batch::

    for batch in generation_batches:          # every rank, same gathered batch
        for guard in guards:
            run_hook(guard, "on_batch", session, batch.step, batch)   # guard.on_batch(batch, reporter)
        session.pop_metrics()                 # -> trainer metrics -> logs / W&B
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rl_guards.config import GuardConfig, GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.metric_keys import METRIC_PREFIX, metric_key, task_metric_key
from rl_guards.errors import GuardError, RLGuardsWarning
from rl_guards.guards.session import SEVERITIES, Finding, GuardSession, Reporter, Tracker


@dataclass
class RunContext:
    """What a guard may know about the run, filled by the adapter (TRL) or by hand in tests."""

    output_dir: str = "."
    is_main_process: bool = True
    world_size: int = 1
    process_index: int = 0
    tokenizer: Any = None  # the trainer's tokenizer (processing class)
    args: Any = None  # the trainer's TrainingArguments / GRPOConfig
    train_dataset: Any = None
    eval_dataset: Any = None
    chat_template: str | None = None  # template string the trainer renders prompts with
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    reward_func_names: list[str] = field(default_factory=list)
    reward_funcs: list[Any] = field(default_factory=list)  # the trainer's reward function objects
    # where the adapter's reward-function wrappers record rows a function raised on (rl_guards.rewards.row_errors)
    reward_error_log: Any = None
    # the run's reward functions as checks call them, each through its framework's caller, bounded in time
    # (rl_guards.rewards.checked_calls.CheckedCalls; None: the driver cannot call them outside the run)
    checked_calls: Any = None
    # callable(list[row dict]) -> dict | None: generate and score these dataset rows with the trainer's own path,
    # leaving the trainer's metrics and logs as they were (collective: every rank calls it with the same rows)
    probe_generate: Any = None
    # callable(list[list[float]]) -> list[list[float]]: every rank's rows, rank order (collective)
    all_gather_rows: Any = None
    # callable(list[prompt]) -> list[list[int]]: renders prompts exactly as the trainer does for rollouts
    render_prompts: Any = None
    # callable(list[int]) -> str: decode keeping special tokens
    decode: Any = None
    # callable(list[int]) -> str: decode skipping special tokens (what TRL hands reward functions)
    decode_text: Any = None
    # the dataset column each row's prompt is rendered with (its own enable_thinking), None: one mode for all rows
    per_row_thinking_column: str | None = None
    # the run's renderer where prompts are rendered by one rather than by the chat template (tinker-cookbook's
    # Renderer: build_generation_prompt / parse_response); None: the chat template renders them
    renderer: Any = None
    # prompt ids as the run itself rendered them (its first rollouts' prompts), where no dataset of prompts exists
    rendered_prompts: list[list[int]] | None = None
    # the name of the setting that caps completion length in the run's framework (messages name it)
    length_cap_name: str = "max_completion_length"

    @property
    def template_text(self) -> str | None:
        """The template prompts render with: ``chat_template`` when the trainer overrides it, else the tokenizer's."""
        return self.chat_template or getattr(self.tokenizer, "chat_template", None)


class Guard:
    """Base class of guards. Subclasses set ``name``/``config_field`` and implement the hooks they need.

    The driver (:mod:`rl_guards.engine.driver`) calls these hooks, and only these (``HOOKS``), in training-loop
    order::

        setup(ctx)                           # once, at install; ctx is complete
        on_train_begin(report)               # before step 0 (start-of-training checks)
        for each generation batch, on every rank:
            check_tensors(output, report)    # the trainer's loss tensors (this rank's rows, on their device)
            tensor_features(rows, device)    # per-row TENSOR_FEATURES computed there, gathered with the others
            scan(batch) -> {feature: [value per held row]}   # per-row work on this rank's own rows only
            # the driver gathers the features (numbers only) so that every rank holds them for every row
            on_batch(batch, report)          # decisions from numbers every rank holds: all ranks agree
            wants_rows(batch)                # the main process needs every row's text (a dump)
            after_batch(batch, report)       # the rows a message or a dump asked for are in place
        on_train_inputs(batch, inputs, report)  # the exact inputs the trainer is about to train on (a driver that
                                             # sees them after the batch was decided: tinker's datums as sent)
        on_step_end(final, report)           # after each optimizer step, before the trainer logs it
        before_save(checkpoint_dir, report)  # the trainer is about to write this checkpoint
        on_save(checkpoint_dir, report)      # after each checkpoint save
        on_stop(batch, report)               # a guard stopped the run on this batch: save evidence (never raise)
        flush(report)                        # wait for background work (a benchmark, a test)
        on_train_end(report)

    Also: ``state_dict``/``load_state_dict`` (resume), ``row_evidence`` (a held row rendered for a message),
    ``prompt_opened`` (a verdict the driver passes to reward functions), ``summary_text`` (lines for the run
    summary). A hook a guard does not override costs nothing: the driver calls only overridden ones.

    Per-row features: a guard that looks at text or ids declares their names in ``FEATURES`` and computes them in
    :meth:`scan` for ``batch.held_rows``; :meth:`features` returns them for every row (computing them itself
    when the batch was built by hand with every row). A message that shows rows passes their global indices to
    ``report.violation(..., rows=...)`` and renders lazily; :meth:`row_evidence` renders a row from what only the
    rank holding it has (e.g. the loss-mask tensors).
    """

    HOOKS: ClassVar[tuple[str, ...]] = (
        "setup",
        "on_train_begin",
        "check_tensors",
        "tensor_features",
        "scan",
        "features",
        "row_evidence",
        "on_batch",
        "wants_rows",
        "after_batch",
        "on_train_inputs",
        "on_step_end",
        "before_save",
        "on_save",
        "on_stop",
        "flush",
        "on_train_end",
        "state_dict",
        "load_state_dict",
        "prompt_opened",
        "summary_text",
    )
    name: ClassVar[str] = ""
    config_field: ClassVar[str] = ""
    # hooks that run collectives (every rank together): the driver runs each in a lockstep section, so that an
    # exception on one rank stops the hook on every rank instead of leaving the others waiting in a collective
    COLLECTIVE_HOOKS: ClassVar[frozenset[str]] = frozenset()
    FEATURES: ClassVar[tuple[str, ...]] = ()  # per-row features scan() returns (gathered across ranks)
    TENSOR_FEATURES: ClassVar[tuple[str, ...]] = ()  # per-row features tensor_features() returns (on the device)

    def __init__(self, config: GuardsConfig) -> None:
        self.guards_config = config
        self.config: GuardConfig = getattr(config, self.config_field)
        self.ctx = RunContext()

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def setup(self, ctx: RunContext) -> None:
        """Receive the run context (called once at install)."""
        self.ctx = ctx

    def _may_call(self, fn: int, name: str) -> bool:
        """Whether a check may call reward function ``fn`` (named ``name``): the driver can call it
        (``ctx.checked_calls``), it has not stalled, and ``probes.skip`` does not name it."""
        calls = getattr(self.ctx, "checked_calls", None)
        return calls is not None and calls.usable(fn) and name not in self.guards_config.probes.skip

    def _run_folder(self) -> str:
        """The folder a suggested command names (``rl-guards rollouts|drift|report FOLDER``), quoted for a shell:
        ``rollouts.output_dir`` when set (the commands take the rollouts folder itself), else the trainer's
        ``output_dir``."""
        import shlex

        return shlex.quote(self.guards_config.rollouts.output_dir or str(self.ctx.output_dir))

    def on_train_begin(self, report: Reporter) -> None:
        """Checks before step 0."""

    def check_tensors(self, output: Any, report: Reporter) -> None:
        """The trainer's loss tensors of this rank's rows (a dict of device tensors), before anything is gathered."""

    def tensor_features(self, rows: int, device: Any) -> dict[str, Any]:
        """``TENSOR_FEATURES`` of the last :meth:`check_tensors` batch: name -> ``[rows]`` tensor on ``device``."""
        return {}

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        """Per-row features (``FEATURES``) of ``batch.held_rows``, in that order."""
        return {}

    def features(self, batch: RolloutBatch) -> dict[str, list[float]]:
        """This guard's features for every row: gathered by the adapter, or computed here for a hand-built batch."""
        names = [f"{self.name}/{f}" for f in self.FEATURES]
        if all(n in batch.features for n in names):
            return {f: batch.features[n] for f, n in zip(self.FEATURES, names, strict=True)}
        if batch.local_rows is not None:
            raise ValueError(f"{self.name}: features {names} were not gathered for this batch")
        return self.scan(batch)

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        """A view of one held row only this rank can render (shipped to the others for messages); None: none."""
        return None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        """Inspect one generation batch: numbers for every row, text for the held rows."""

    def wants_rows(self, batch: RolloutBatch) -> bool:
        """True: the main process needs the text of every row of ``batch`` (a dump of it)."""
        return False

    def after_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        """After :meth:`on_batch`, once the rows that messages and dumps asked for are in place."""

    def on_train_inputs(self, batch: RolloutBatch | None, inputs: Any, report: Reporter) -> None:
        """What the trainer is about to train on for ``batch`` (the step's train batch; None when unknown), seen
        after the batch was decided (e.g. the datums a local Tinker backend receives), before it trains."""

    def on_step_end(self, final: bool, report: Reporter) -> None:
        """After each optimizer step, before the trainer logs it; ``final``: the last step of the run."""

    def before_save(self, checkpoint_dir: str, report: Reporter) -> None:
        """Called right before the trainer writes ``checkpoint_dir`` (evidence that belongs to it goes first)."""

    def on_save(self, checkpoint_dir: str, report: Reporter) -> None:
        """Called after the trainer saved a checkpoint."""

    def on_stop(self, batch: RolloutBatch, report: Reporter) -> None:
        """Another guard is stopping the run on ``batch``: keep what helps the post-mortem (never raise)."""

    def flush(self, report: Reporter) -> None:
        """Wait until background work (a dump being written) is done, and report what happened to it."""

    def on_train_end(self, report: Reporter) -> None:
        """Called once at the end of training."""

    def prompt_opened(self, thinking: bool) -> bool | None:
        """Whether the generation prompt already opens the think block (None: this guard does not know)."""
        return None

    def summary_text(self) -> str:
        """Lines this guard adds to the run summary ("" for none)."""
        return ""

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state that must survive a resume."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def overrides(guard: Guard, hook: str) -> bool:
    """Whether ``guard`` implements ``hook`` itself (the driver skips the base class's no-ops)."""
    return getattr(type(guard), hook, None) is not getattr(Guard, hook)


def run_hook(
    guard: Guard,
    hook: str,
    session: GuardSession,
    step: int | None,
    *args: Any,
    settle: bool = True,
    around: AbstractContextManager[Any] | None = None,
) -> None:
    """Call ``guard.<hook>(*args, report)``; a guard's own bug is warned once and counted, never fatal.

    With ``settle`` (the default), deferred messages are rendered and a raise-mode violation raises its
    GuardError here; the TRL adapter passes ``settle=False`` and settles once the batch's text is in place.
    A GuardError a guard raises itself propagates: that is the guard doing its job. ``around``: the lockstep section
    the driver runs a collective hook in (:meth:`~rl_guards.engine.ranks.Ranks.section`); a failure on any rank is
    then recorded on every rank, with that rank's error.
    """
    report = session.reporter(guard.name, guard.config, step)
    try:
        if around is None:
            getattr(guard, hook)(*args, report)
        else:
            with around as section:
                getattr(guard, hook)(*args, report)
            if isinstance(section.error, GuardError):  # this rank's own stop: agreed on at the next agreement
                raise section.error
            if section.failure is not None:
                failure = section.failure
                where = f" {failure.where}" if guard.ctx.world_size > 1 else ""
                _internal_error(session, guard.name, f"{hook} failed{where}: {failure.message}", step)
    except GuardError:
        raise
    except Exception as exc:  # a guard's own bug must not kill the run
        _internal_error(session, guard.name, f"{hook} failed: {type(exc).__name__}: {exc}", step)
    if settle:
        stop = session.settle()
        if stop is not None:
            raise stop


def _internal_error(session: GuardSession, guard: str, message: str, step: int | None) -> None:
    session.record(Finding(guard, "internal_error", "warning", message, step), warn=True)
    session.add_metric(metric_key(guard, "internal_errors"), 1.0)


__all__ = [
    "METRIC_PREFIX",
    "SEVERITIES",
    "Finding",
    "Guard",
    "GuardSession",
    "RLGuardsWarning",
    "Reporter",
    "RunContext",
    "Tracker",
    "metric_key",
    "overrides",
    "run_hook",
    "task_metric_key",
]
