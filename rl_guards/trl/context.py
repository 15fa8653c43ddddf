"""The one :class:`~rl_guards.guards.base.RunContext` builder for a TRL trainer, and what install does to the
trainer's reward functions (the row-error wrappers, ``configure``) and dataset (task counts)."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from rl_guards.core.task_labels import task_name
from rl_guards.guards.base import RunContext
from rl_guards.rewards.callables import is_async_reward, trl_awaits_async_objects
from rl_guards.rewards.row_errors import CatchRowErrors, RowErrorLog, catch_row_errors
from rl_guards.trl.thinking_mix import thinking_column_of

logger = logging.getLogger("rl_guards")
_UNSET = object()  # an attribute the trainer did not have


def build_context(trainer: Any) -> RunContext:
    """Everything a guard may know about this trainer's run; the driver adds the callables of its own."""
    args = trainer.args
    tokenizer = getattr(trainer, "_tokenizer", None) or getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer
    accelerator = getattr(trainer, "accelerator", None)
    kwargs = getattr(trainer, "chat_template_kwargs", None) or getattr(args, "chat_template_kwargs", None) or {}

    def render_prompts(prompts: list[Any]) -> list[list[int]]:
        # With environment_factory, TRL renders each prompt with its batch environment's tools, which it sets
        # only inside a rollout: outside one, render with the first environment's (the only one, usually).
        factories = getattr(trainer, "environment_factories", None)
        if not factories:
            ids = trainer._tokenize_prompts(prompts)[0]
            return [list(map(int, row)) for row in ids]
        before = trainer.__dict__.get("_batch_environments", _UNSET)
        trainer._batch_environments = [next(iter(factories))] * len(prompts)
        try:
            ids = trainer._tokenize_prompts(prompts)[0]
        finally:
            if before is _UNSET:
                trainer.__dict__.pop("_batch_environments", None)
            else:
                trainer._batch_environments = before
        return [list(map(int, row)) for row in ids]

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    def decode_text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    eos = list(getattr(trainer, "eos_token_ids", None) or [])
    if not eos and getattr(tokenizer, "eos_token_id", None) is not None:
        eos = [tokenizer.eos_token_id]
    return RunContext(
        output_dir=str(args.output_dir),
        is_main_process=bool(getattr(accelerator, "is_main_process", True)),
        world_size=int(getattr(accelerator, "num_processes", 1)),
        process_index=int(getattr(accelerator, "process_index", 0)),
        tokenizer=tokenizer,
        args=args,
        train_dataset=getattr(trainer, "train_dataset", None),
        eval_dataset=getattr(trainer, "eval_dataset", None),
        chat_template=getattr(trainer, "chat_template", None),
        chat_template_kwargs=dict(kwargs),
        eos_token_ids=[int(e) for e in eos],
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
        reward_func_names=list(getattr(trainer, "reward_func_names", []) or []),
        reward_funcs=list(getattr(trainer, "reward_funcs", []) or []),
        render_prompts=render_prompts if hasattr(trainer, "_tokenize_prompts") else None,
        decode=decode if tokenizer is not None else None,
        decode_text=decode_text if tokenizer is not None else None,
        per_row_thinking_column=thinking_column_of(trainer),
    )


def reward_callers(trainer: Any, ctx: RunContext) -> list[Any]:
    """Each reward function called as ``GRPOTrainer`` calls it (None for a reward model: checks do not call it)."""
    from rl_guards.reward_calls.trl import trl_callers

    tools = getattr(trainer, "tools", None) or None
    return trl_callers(
        ctx.reward_funcs, tokenizer=ctx.tokenizer, eos_ids=ctx.eos_token_ids, trainer_state=trainer.state, tools=tools
    )


def configure_reward_funcs(ctx: RunContext, metrics_level: str) -> None:
    """Give reward functions that ask for it (``configure``) the tokenizer and the trainer's template kwargs."""
    for fn in ctx.reward_funcs:
        configure = getattr(fn, "configure", None)
        if callable(configure) and not isinstance(fn, type):
            try:
                kwargs: dict[str, Any] = {"tokenizer": ctx.tokenizer}
                kwargs["chat_template_kwargs"] = ctx.chat_template_kwargs
                if "metrics_level" in inspect.signature(configure).parameters:
                    kwargs["metrics_level"] = metrics_level
                configure(**kwargs)
            except Exception as exc:  # never fatal: the function keeps its own defaults
                logger.warning("rl_guards: could not configure reward function %r: %s", fn, exc)


def catch_reward_errors(trainer: Any) -> RowErrorLog | None:
    """Wrap each plain reward function so that rows it raises on are scored None and reported, not fatal."""
    funcs = getattr(trainer, "reward_funcs", None)
    if not isinstance(funcs, list):
        return None
    log = RowErrorLog()
    async_ok = trl_awaits_async_objects()  # TRL 1.13 awaits only plain coroutine functions: leave those as is
    for index, fn in enumerate(funcs):
        if not callable(fn) or isinstance(fn, CatchRowErrors) or hasattr(fn, "forward"):
            continue
        if is_async_reward(fn) and not async_ok:
            continue
        funcs[index] = catch_row_errors(fn, index, log)
    return log


def dataset_task_counts(dataset: Any, tasks: Any) -> dict[str, int]:
    """Rows per task name in a map-style dataset's task column ({} when it cannot be counted cheaply)."""
    try:
        if tasks.task_column not in (getattr(dataset, "column_names", None) or []):
            return {}
        values = dataset.data.column(tasks.task_column).value_counts().to_pylist()  # Arrow: no Python row loop
    except Exception:  # iterable datasets, other containers: names are then taken as they appear
        return {}
    counts: dict[str, int] = {}
    for item in values:
        name = task_name(item["values"], tasks.default_task)
        counts[name] = counts.get(name, 0) + int(item["counts"])
    return counts




TESTED_TRL = ("1.13", "1.14", "1.15", "1.16")  # the suite runs on the oldest and the newest in CI
REQUIRED_METHODS = ("_generate_and_score_completions", "_calculate_rewards")


def trl_version() -> str:
    try:
        import trl

        return str(trl.__version__)
    except Exception:
        return "unknown"


def check_compatibility(trainer: Any, guards: list[Any]) -> dict[str, str]:
    """Say what this trainer and TRL version get: the guards that cannot run (name -> why), where TRL's hook points
    are missing, e.g. a trainer that scores rollouts in another process (TRL's experimental AsyncGRPOTrainer)."""

    from rl_guards import __version__
    from rl_guards.console import say
    from rl_guards.core.severity import WARNING
    from rl_guards.guards.base import overrides

    version = trl_version()
    kind = type(trainer).__name__
    tested = ", ".join(TESTED_TRL)
    if not any(version == v or version.startswith(f"{v}.") for v in TESTED_TRL):
        logger.warning("rl_guards %s was tested with TRL %s; this is TRL %s.", __version__, tested, version)
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(trainer, m, None))]
    if not isinstance(getattr(trainer, "_metrics", None), dict):
        missing.append("_metrics")
    unavailable: dict[str, str] = {}
    if not missing:
        logger.debug("rl_guards: installed on %s (TRL %s; tested with TRL %s).", kind, version, tested)
        return unavailable
    reason = f"{kind} (TRL {version}) has no {', '.join(missing)}"
    for guard in guards:
        if overrides(guard, "on_batch") or overrides(guard, "check_tensors"):
            unavailable[guard.name] = reason
    message = (
        f"[rl_guards] warning: {reason}: it scores rollouts where the batch guards cannot see them. Off: "
        f"{', '.join(sorted(unavailable))}. Still on: the start-of-training checks and the "
        "reward-function wrappers (StrayThinkPenalty, route(), blind_judge, watch_inputs), which run "
        "wherever the reward functions run."
    )
    say(message, severity=WARNING)
    return unavailable


__all__ = [
    "TESTED_TRL",
    "build_context",
    "catch_reward_errors",
    "check_compatibility",
    "configure_reward_funcs",
    "dataset_task_counts",
    "trl_version",
]
