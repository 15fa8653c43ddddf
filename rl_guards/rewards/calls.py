"""Calling a reward function the way TRL calls it, outside of TRL: for sanity cases and probes.

TRL calls ``fn(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=..., log_extra=...,
log_metric=...)`` and accepts a list with one float or None per row (async functions are awaited). Here the logging
callbacks are no-ops, so a call made to check a function never shows in the run's metrics or completions table.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from rl_guards.core.batch import nan_to_none
from rl_guards.core.rng import forked_rng


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


async def _await(awaitable: Any) -> Any:
    return await awaitable


def call_reward(
    fn: Any,
    *,
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    columns: dict[str, Sequence[Any]] | None = None,
    trainer_state: Any = None,
) -> list[float | None]:
    """``fn``'s scores of the rows, None where it returned None or NaN; ValueError when it returns the wrong count."""
    kwargs: dict[str, Any] = {
        "prompts": list(prompts),
        "completions": list(completions),
        "completion_ids": None if completion_ids is None else [list(ids) for ids in completion_ids],
        **{k: list(v) for k, v in (columns or {}).items()},
        "trainer_state": trainer_state,
        "log_extra": _noop,
        "log_metric": _noop,
    }
    with forked_rng():  # a check of the function must not move the run's random state (a sampled judge, ...)
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
    scores = nan_to_none([None if v is None else float(v) for v in result])
    if len(scores) != len(completions):
        raise ValueError(f"returned {len(scores)} values for {len(completions)} completions")
    return scores


__all__ = ["call_reward"]
