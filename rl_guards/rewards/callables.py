"""What TRL sees of a reward function: its name (the W&B key) and whether it is async."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def reward_name(fn: Any) -> str:
    """The name TRL gives a reward function (``__name__``, unwrapping ``functools.partial``)."""
    fn = _unwrap(fn)
    return str(getattr(fn, "__name__", type(fn).__name__))


def is_async_reward(fn: Any) -> bool:
    """True for a coroutine function or an object whose ``__call__`` is one (TRL awaits those)."""
    fn = _unwrap(fn)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def trl_awaits_async_objects() -> bool:
    """Whether the installed TRL awaits a callable object whose ``__call__`` is async (TRL >= 1.14 does; 1.13 checks
    ``inspect.iscoroutinefunction`` only, so it would call such an object and get a coroutine back)."""
    try:
        from trl.trainer.utils import is_async_callable  # noqa: F401  (added with the fix)
    except ImportError:
        return False
    return True


def require_async_support(fn: Any, wrapper: str) -> None:
    """ConfigError when ``fn`` is async and the installed TRL cannot await the wrapper object around it."""
    if is_async_reward(fn) and not trl_awaits_async_objects():
        from rl_guards.errors import ConfigError

        raise ConfigError(
            f"{wrapper}({reward_name(fn)}): wrapping an async reward function needs TRL >= 1.14 (this TRL calls "
            "a wrapped async function without awaiting it). Upgrade TRL, or pass the async function unwrapped "
            "(the batch guards still check it)."
        )
