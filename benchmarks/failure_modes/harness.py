"""Run one small real GRPO or SFT job on the tiny fixture and collect what rl_guards reported.

:func:`run_grpo` builds a ``GRPOTrainer`` on the warmed tiny model, lets a case plant its bug (before or after
``rl_guards.install``), trains, and returns an :class:`Outcome`; :func:`run_sft` does the same for an
``SFTTrainer`` whose collator the case wraps. Output, progress bars and logs are swallowed; findings come from
the guard session(s), a guard's raise, and warnings the rl_guards logger said that no session recorded (reward-function
wrappers such as ``blind_judge`` warn on their own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

# Batch of 8 prompts x 4 generations: several groups per task per step, so a clean task is rarely dead by chance.
# 48 new tokens: the warmed model ends its turns well before (it writes about 10-20 tokens).
GRPO_BASE: dict[str, Any] = {
    "per_device_train_batch_size": 32,
    "num_generations": 4,
    "max_completion_length": 48,
    "max_steps": 3,
    "learning_rate": 1e-6,
    "lr_scheduler_type": "constant",
    "chat_template_kwargs": {"enable_thinking": True},
}
N_PER_TASK = 16  # prompts per task in the dataset (32 rows: one epoch is 4 steps)
SEED = {"value": 0}  # trainer seed of every run (sampling, shuffling); run.py --seed sets it


@dataclass
class Hit:
    """One thing reported during a run."""

    guard: str
    kind: str
    severity: str  # "blocking" (raised), "warning", "info": rl_guards.core.severity
    step: int | None
    message: str
    source: str = "session"  # "session", "preflight" (the preflight report's own severity), "warning"

    def label(self) -> str:
        return f"{self.guard}/{self.kind}"


@dataclass
class Outcome:
    """What one run produced."""

    hits: list[Hit] = field(default_factory=list)
    raised: str | None = None  # "<guard>: <ErrorClass>" when a guard stopped the run
    crashed: str | None = None  # any other exception (a benchmark bug or an uncaught corruption)
    steps: int = 0
    log_history: list[dict[str, Any]] = field(default_factory=list)
    preflight: list[Hit] = field(default_factory=list)  # the preflight report, with its own severities

    def alarms(self) -> list[Hit]:
        """Findings that would get a user's attention: errors, warnings (not info)."""
        return [h for h in self.hits if h.severity in ("blocking", "warning")]

    def infos(self) -> list[Hit]:
        return [h for h in self.hits if h.severity == "info"]


@contextlib.contextmanager
def quiet() -> Iterator[Any]:
    """Swallow stdout/stderr, library logs and progress bars; yield what rl_guards says at warning level
    (:class:`rl_guards.console.Said`, filled as it is said)."""
    import datasets
    import transformers

    from rl_guards.console import capture

    datasets.disable_progress_bars()
    loggers = [logging.getLogger(n) for n in ("transformers", "trl", "accelerate", "datasets")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    transformers.utils.logging.disable_progress_bar()
    sink = io.StringIO()
    try:
        with (
            warnings.catch_warnings(),
            capture() as said,
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            warnings.simplefilter("ignore")
            yield said
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        transformers.utils.logging.enable_progress_bar()
        datasets.enable_progress_bars()


_WARNING_GUARD = re.compile(r"^\[rl_guards/([\w.-]+)\]\s*(?:warning:\s*)?(.*)", re.S)
# What a warning from a session-less component means, by its prefix (rl_guards/<name>).
WARNING_KINDS = {"blind_judge": "judge_input_markup"}


def first_metric_step(log_history: list[dict[str, Any]], guard: str) -> int | None:
    """The generation step of the first log row where a ``rl_guards/<guard>/...`` metric is positive."""
    prefix = f"rl_guards/{guard}/"
    for row in log_history:
        if any(k.startswith(prefix) and isinstance(v, int | float) and v > 0 for k, v in row.items()):
            return max(int(row.get("step", 1)) - 1, 0)  # logged after the optimiser step of that batch
    return None


def warning_hits(caught: Any, session_guards: set[str], step: int | None) -> list[Hit]:
    """Warnings rl_guards said (``caught``: :func:`quiet`'s capture) from code that has no session (reward
    wrappers), one hit per guard."""
    out: dict[str, Hit] = {}
    for message in caught.messages:
        match = _WARNING_GUARD.match(message)
        guard = match.group(1) if match else "rl_guards"
        if guard in session_guards or guard in out:
            continue
        out[guard] = Hit(guard, WARNING_KINDS.get(guard, "warning"), "warning", step, message, source="warning")
    return list(out.values())


def session_hits(session: Any) -> list[Hit]:
    """Every (guard, kind) of a GuardSession: its worst severity, first step and first message."""
    rank = {"blocking": 2, "warning": 1, "info": 0}
    best: dict[tuple[str, str], Hit] = {}
    for f in session.findings:
        key = (f.guard, f.kind)
        step = session.first_step.get(key, f.step)
        hit = best.get(key)
        if hit is None:
            best[key] = Hit(f.guard, f.kind, f.severity, step, f.message)
        elif rank[f.severity] > rank[hit.severity]:
            hit.severity = f.severity
    return list(best.values())


@dataclass
class GrpoSpec:
    """One GRPO run: what to train on, and where the case plants its bug."""

    reward_funcs: list[Any]
    dataset: Any = None  # default: make_dataset(N_PER_TASK, thinking=True)
    args: dict[str, Any] = field(default_factory=dict)  # GRPOConfig overrides on top of GRPO_BASE
    guards: dict[str, Any] = field(default_factory=dict)  # GuardsConfig.from_dict input
    before_install: Callable[[Any], None] | None = None  # trainer -> None (plants the guard must see through)
    after_install: Callable[[Any], None] | None = None
    tokenizer: Any = None  # default: the tiny fixture's tokenizer (fresh copy)
    model: str | None = None  # model dir; default: the warmed tiny model


def guard_classes() -> list[Any]:
    """The registry's guards, plus the preflight guard when the registry does not list it (yet)."""
    from rl_guards.guards.registry import BATCH_GUARDS

    classes = list(BATCH_GUARDS)
    try:
        from rl_guards.guards.preflight import PreflightGuard
    except ImportError:
        return classes
    if PreflightGuard not in classes:
        classes.insert(0, PreflightGuard)
    return classes


def tiny() -> Any:
    from rl_guards.testing import tiny_setup

    return tiny_setup()


PROBE_MAX_NEW_TOKENS = 96  # the length probe's own cap: twice the runs' max_completion_length
_PROBE: dict[str, str] = {}


def length_probe_file() -> str:
    """A length probe of the warmed model on the training prompts (thinking on), as preflight reads it.

    Measured once per process (a second or two) into a temporary JSON file removed at exit.
    """
    import atexit
    import json

    from transformers import Qwen3ForCausalLM

    from rl_guards.chat.length_probe import probe_lengths
    from rl_guards.testing import make_dataset

    setup = tiny()
    if setup.model_dir in _PROBE:
        return _PROBE[setup.model_dir]
    model = Qwen3ForCausalLM.from_pretrained(setup.model_dir)
    prompts = list(make_dataset(N_PER_TASK, thinking=True)["prompt"])
    probe = probe_lengths(
        model,
        setup.load_tokenizer(),
        prompts,
        max_new_tokens=PROBE_MAX_NEW_TOKENS,
        chat_template_kwargs=GRPO_BASE["chat_template_kwargs"],
    )
    fd, path = tempfile.mkstemp(prefix="fm-length-probe-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(probe.to_dict(), f)
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    _PROBE[setup.model_dir] = path
    return path


def run_grpo(spec: GrpoSpec, workdir: Path) -> Outcome:
    """Train ``spec`` on the tiny model with every guard installed; never raises."""
    import torch
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.config import GuardsConfig
    from rl_guards.errors import GuardError
    from rl_guards.testing import make_dataset, tiny_grpo_config

    torch.set_num_threads(1)
    setup = tiny()
    outcome = Outcome()
    out_dir = Path(tempfile.mkdtemp(prefix="grpo-", dir=workdir))
    run = trainer = None
    with quiet() as caught:
        try:
            args = tiny_grpo_config(out_dir, **{**GRPO_BASE, "seed": SEED["value"], **spec.args})
            trainer = GRPOTrainer(
                model=spec.model or setup.model_dir,
                processing_class=spec.tokenizer if spec.tokenizer is not None else setup.load_tokenizer(),
                reward_funcs=spec.reward_funcs,
                args=args,
                train_dataset=spec.dataset if spec.dataset is not None else make_dataset(N_PER_TASK, thinking=True),
            )
            if spec.before_install is not None:
                spec.before_install(trainer)
            guards: dict[str, dict[str, Any]] = {
                "rollouts": {"every_steps": 1000},  # no dumps: nothing to read back here
                "preflight": {"length_probe": length_probe_file()},  # the cap is chosen from measured lengths
                # the tiny model's steps take ~0.1 s where a real one takes tens: at the default time budget (2 %)
                # the reward probes would not run within these 3-step runs (their budget: bench_checks_cost.py)
                "probes": {"budget": 100.0},
            }
            for section, values in spec.guards.items():
                guards.setdefault(section, {}).update(values)
            run = rl_guards.install(trainer, GuardsConfig.from_dict(guards), guards=guard_classes())
            if spec.after_install is not None:
                spec.after_install(trainer)
            trainer.train()
        except GuardError as exc:
            outcome.raised = f"{exc.guard}: {type(exc).__name__}"
        except Exception as exc:  # a plant the guards missed may crash TRL; report it, do not hide it
            outcome.crashed = f"{type(exc).__name__}: {str(exc)[:300]}"
    if trainer is not None:
        outcome.steps = int(trainer.state.global_step)
        outcome.log_history = list(trainer.state.log_history)
    if run is not None:
        outcome.hits = session_hits(run.session)
        seen = {g.name for g in run.guards}
        for hit in warning_hits(caught, seen, None):
            hit.step = first_metric_step(outcome.log_history, hit.guard)
            outcome.hits.append(hit)
        preflight = next((g for g in run.guards if g.name == "preflight"), None)
        report = getattr(preflight, "last_report", None)
        if report is not None:
            outcome.preflight = [
                Hit("preflight", f.code, f.severity, 0, f.message, source="preflight") for f in report.findings
            ]
    shutil.rmtree(out_dir, ignore_errors=True)
    return outcome


@dataclass
class SftSpec:
    """One SFT run: a conversational dataset, SFTConfig overrides, and the collator wrapper(s) that check it."""

    dataset: Any
    args: dict[str, Any] = field(default_factory=dict)
    # (trainer.data_collator, tokenizer) -> (new collator, [objects with a `.session` GuardSession])
    wrap: Callable[[Any, Any], tuple[Any, list[Any]]] | None = None


SFT_BASE: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": "none",
    "per_device_train_batch_size": 4,
    "max_steps": 3,
    "learning_rate": 1e-5,
    "logging_steps": 1,
    "save_strategy": "no",
    "disable_tqdm": True,
    "max_length": 96,
    "seed": 0,
}


def run_sft(spec: SftSpec, workdir: Path) -> Outcome:
    """SFT the tiny model on ``spec.dataset`` with the case's collator wrappers; never raises."""
    import torch
    from trl import SFTConfig, SFTTrainer

    from rl_guards.errors import GuardError

    torch.set_num_threads(1)
    setup = tiny()
    outcome = Outcome()
    out_dir = Path(tempfile.mkdtemp(prefix="sft-", dir=workdir))
    checkers: list[Any] = []
    first_steps: dict[tuple[str, str], int] = {}
    trainer = None
    with quiet() as caught:
        try:
            settings = {**SFT_BASE, "seed": SEED["value"], **spec.args}
            if "activation_checkpointing" in {f.name for f in dataclasses.fields(SFTConfig)}:
                settings.setdefault("activation_checkpointing", False)
            tok = setup.load_tokenizer()
            trainer = SFTTrainer(
                model=setup.model_dir,
                processing_class=tok,
                args=SFTConfig(str(out_dir), **settings),
                train_dataset=spec.dataset,
            )
            if spec.wrap is not None:
                inner, checkers = spec.wrap(trainer.data_collator, tok)
                trainer.data_collator = _Stamped(inner, checkers, trainer, first_steps)
            trainer.train()
        except GuardError as exc:
            outcome.raised = f"{exc.guard}: {type(exc).__name__}"
        except Exception as exc:
            outcome.crashed = f"{type(exc).__name__}: {str(exc)[:300]}"
    if trainer is not None:
        outcome.steps = int(trainer.state.global_step)
        outcome.log_history = list(trainer.state.log_history)
    for checker in checkers:
        for hit in session_hits(checker.session):
            hit.step = first_steps.get((hit.guard, hit.kind), hit.step)
            outcome.hits.append(hit)
    outcome.hits += warning_hits(caught, {h.guard for h in outcome.hits} | {"masking"}, outcome.steps)
    shutil.rmtree(out_dir, ignore_errors=True)
    return outcome


class _Stamped:
    """Outermost collator: notes the trainer's step when a checker first records a (guard, kind)."""

    def __init__(self, collator: Any, checkers: list[Any], trainer: Any, first_steps: dict[tuple[str, str], int]):
        self.collator, self.checkers, self.trainer, self.first_steps = collator, checkers, trainer, first_steps

    def __getattr__(self, name: str) -> Any:
        if name == "collator":
            raise AttributeError(name)
        return getattr(self.collator, name)

    def __call__(self, features: list[Any]) -> Any:
        try:
            return self.collator(features)
        finally:
            for checker in self.checkers:
                for key in checker.session.counts:
                    self.first_steps.setdefault(key, int(self.trainer.state.global_step))
