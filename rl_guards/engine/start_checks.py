"""The start-of-training checks: one list (:func:`start_check_classes`), one function (:func:`run_begin`).

``install()`` runs them at train start with the rest of the guards' ``on_train_begin``; ``GuardsCallback`` without
a trainer it can install on, and ``rl-guards preflight``, run them through :func:`run_start_checks`.
``rl-guards preflight`` builds the :class:`~rl_guards.guards.base.RunContext` a live trainer would give the guards
(GRPOConfig, tokenizer, datasets, reward functions, TRL's prompt rendering) and runs the ``on_train_begin`` of every
start check (preflight report, template, reward sanity, routing, task column: :func:`start_check_classes`) exactly as
``install()`` does at train start; what only prepares a run (moving a resumed run's dumps aside, the drift baseline)
is never run, so a check never writes to the run's folder. The verdict is "blocking" when training would stop there:
a violation of a guard in raise mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.errors import GuardError
from rl_guards.guards.base import Finding, Guard, GuardSession, RunContext, overrides, run_hook


@dataclass
class StartVerdict:
    """What the start-of-training checks found."""

    findings: list[Finding]
    stop: GuardError | None  # the error training would stop with (None: training would start)
    preflight_report: Any = None
    guards: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> bool:
        """Training would stop here, or the preflight report has a blocking finding (stops it in raise mode)."""
        return self.stop is not None or bool(getattr(self.preflight_report, "blocking", None))

    def render(self) -> str:
        """The findings of every guard but the preflight report (printed on its own), one per line."""
        rows = [f for f in self.findings if f.guard != "preflight"]
        lines = [f"start-of-training checks ({', '.join(self.guards)}): {len(rows)} finding(s)"]
        for f in rows:
            first, *rest = f.message.splitlines() or [""]
            lines.append(f"  [{f.severity}] {f.guard}/{f.kind}: {first}")
            lines += [f"      {line}" for line in rest[:12]]
        if self.stop is not None:
            verdict = f"blocking: training would stop: {self.stop}"
        elif self.blocking:
            verdict = (
                "blocking: the preflight report has blocking findings (they stop training in preflight.mode raise)"
            )
        else:
            verdict = "ok: training would start"
        lines.append(verdict.splitlines()[0])
        return "\n".join(lines)


def render_prompts_like_trl(
    tokenizer: Any, chat_template_kwargs: dict[str, Any], chat_template: str | None = None
) -> Any:
    """A ``render_prompts`` for the context: prompts rendered and tokenized as GRPOTrainer renders rollouts."""
    from rl_guards.chat.preflight import render_prompt_text

    def render(prompts: list[Any]) -> list[list[int]]:
        texts = [
            render_prompt_text(tokenizer, p, chat_template=chat_template, chat_template_kwargs=chat_template_kwargs)
            for p in prompts
        ]
        return [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]

    return render


def context_without_trainer(
    args: Any,
    tokenizer: Any,
    *,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    reward_funcs: Sequence[Any] = (),
    world_size: int = 1,
    call_timeout: float = 30.0,
) -> RunContext:
    """The RunContext ``install()`` builds from a trainer, built from its parts; the reward functions are called
    as ``GRPOTrainer`` calls them (``checked_calls``, each call bounded by ``call_timeout`` seconds)."""
    from rl_guards.reward_calls.trl import trl_callers
    from rl_guards.rewards.checked_calls import CheckedCalls

    kwargs = dict(getattr(args, "chat_template_kwargs", None) or {})
    names = []
    for fn in reward_funcs:
        if isinstance(fn, str):
            names.append(fn.split("/")[-1])
        else:
            names.append(getattr(fn, "__name__", type(fn).__name__))
    eos = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
    funcs = [fn for fn in reward_funcs if not isinstance(fn, str)]
    return RunContext(
        output_dir=str(getattr(args, "output_dir", ".")),
        world_size=world_size,
        tokenizer=tokenizer,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        chat_template_kwargs=kwargs,
        eos_token_ids=eos,
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
        reward_func_names=names,
        reward_funcs=funcs,
        checked_calls=CheckedCalls(trl_callers(funcs, tokenizer=tokenizer, eos_ids=eos), cap=call_timeout),
        render_prompts=render_prompts_like_trl(tokenizer, kwargs),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        decode_text=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )


def start_check_classes() -> list[type[Guard]]:
    """The guards whose ``on_train_begin`` is a check (reads the context, writes nothing), in ``install()`` order.

    An explicit list: the other guards with an ``on_train_begin`` prepare the run at start (the rollout recorder
    moves a resumed run's later dumps aside and rewrites the index, the drift guard generates its baseline and
    writes it), and a check must never write to a run's folder. A new guard with an ``on_train_begin`` is put in
    one list or the other (a contract test looks).
    """
    from rl_guards.guards.preflight import PreflightGuard
    from rl_guards.guards.reward_sanity import RewardSanityGuard
    from rl_guards.guards.routing import RoutingGuard
    from rl_guards.guards.task_rewards import TaskRewardMonitor
    from rl_guards.guards.template import DoubleThinkGuard

    return [PreflightGuard, DoubleThinkGuard, RewardSanityGuard, TaskRewardMonitor, RoutingGuard]


def prepare_at_start_classes() -> list[type[Guard]]:
    """The guards whose ``on_train_begin`` prepares the run (writes to its folder, generates, starts a clock): never
    run by a check."""
    from rl_guards.guards.drift import DriftGuard
    from rl_guards.guards.probes import RewardProbeGuard
    from rl_guards.guards.recorder import RolloutRecorder

    return [DriftGuard, RolloutRecorder, RewardProbeGuard]


def start_guards(config: GuardsConfig, guard_classes: Sequence[type[Guard]] | None = None) -> list[Guard]:
    """The enabled start checks (:func:`start_check_classes`, or those of ``guard_classes`` that are start checks),
    in the order ``install()`` runs them."""
    from rl_guards.guards.registry import BATCH_GUARDS

    checks = start_check_classes()
    classes = list(guard_classes) if guard_classes is not None else list(BATCH_GUARDS)
    guards = [cls(config) for cls in classes if cls in checks]
    return [g for g in guards if g.enabled]


def run_begin(
    guards: Sequence[Guard],
    session: GuardSession,
    step: int,
    around: Callable[[Guard, str], AbstractContextManager[Any] | None] | None = None,
) -> GuardError | None:
    """Every guard's ``on_train_begin``, in order, in the session's ``"begin"`` phase: the one place start checks run
    (``install()``'s run at train start, :func:`run_start_checks` for ``GuardsCallback`` without a trainer and for
    ``rl-guards preflight``). Raise-mode violations wait for ``session.settle()``; the first GuardError a guard
    raised itself is returned. ``around``: the lockstep section a guard's hook runs in (the engine's), or None.
    """
    stop: GuardError | None = None
    session.phase = "begin"
    try:
        for guard in guards:
            if not overrides(guard, "on_train_begin"):
                continue
            try:
                section = around(guard, "on_train_begin") if around is not None else None
                run_hook(guard, "on_train_begin", session, step, settle=False, around=section)
            except GuardError as exc:  # a guard that raised its own error (as in training)
                stop = stop or exc
    finally:
        session.phase = "run"
    return stop


def run_start_checks(
    ctx: RunContext,
    config: GuardsConfig,
    *,
    guard_classes: Sequence[type[Guard]] | None = None,
    guards: Sequence[Guard] | None = None,
    session: GuardSession | None = None,
    step: int = 0,
) -> StartVerdict:
    """Every start-of-training check on ``ctx`` (or the already built start checks ``guards``); never raises for a
    finding (the verdict carries the stop)."""
    session = session if session is not None else GuardSession()
    session.defer = True
    if config.think_tags.per_row_thinking and ctx.per_row_thinking_column is None:  # as install() renders them
        ctx.per_row_thinking_column = config.think_tags.thinking_column
    guards = list(guards) if guards is not None else start_guards(config, guard_classes)
    for guard in guards:
        if guard.name == "preflight":  # checks never write to the run's folder
            guard.write_report = False  # type: ignore[attr-defined]
        guard.setup(ctx)
    stop = run_begin(guards, session, step)
    stop = session.settle() or stop
    report = next((getattr(g, "last_report", None) for g in guards if g.name == "preflight"), None)
    return StartVerdict(list(session.findings), stop, report, [g.name for g in guards])


__all__ = [
    "StartVerdict",
    "context_without_trainer",
    "prepare_at_start_classes",
    "render_prompts_like_trl",
    "run_begin",
    "run_start_checks",
    "start_check_classes",
    "start_guards",
]
