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
