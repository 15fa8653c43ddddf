"""Record the texts a call receives, so :class:`~rl_guards.guards.slicing.SlicingGuard` can spot cut copies.

Wrap the call *inside* your reward function that receives the text you worry about, typically the judge::

    judge = watch_inputs(call_judge, name="judge")      # module level

    def judge_reward(prompts, completions, **kwargs):
        return [judge(build_judge_prompt(p, c)) for p, c in zip(prompts, completions)]

Each string the wrapped callable gets (positional or keyword; also strings in lists, and ``content`` of chat
messages) is kept in a small per-process buffer; on every batch the guard takes them and checks whether
they hold a completion cut short (``completion[:3000]``) or line up on one round length.

What this can and cannot see: only calls you wrap, in the process that makes them (each rank records its own
calls, so with several processes these findings are reported, never raised). Wrapping the reward function
itself records what TRL passed it, which the guard already sees; the cut usually happens one call further in.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from rl_guards.rewards.callables import is_async_reward, reward_name

__all__ = ["AsyncInputWatch", "InputWatch", "drain_watched", "watch_inputs"]

MAX_TEXTS = 4096  # texts kept per watched name until the guard takes them (oldest dropped)

_lock = threading.Lock()
_buffers: dict[str, deque[str]] = {}


def _record(name: str, texts: list[str]) -> None:
    with _lock:
        buffer = _buffers.setdefault(name, deque(maxlen=MAX_TEXTS))
        buffer.extend(texts)


def drain_watched() -> dict[str, list[str]]:
    """Take every text recorded since the last call, per watched name."""
    with _lock:
        out = {name: list(buf) for name, buf in _buffers.items() if buf}
        for buf in _buffers.values():
            buf.clear()
    return out


def _strings(value: Any, depth: int = 0) -> list[str]:
    if isinstance(value, str):
        return [value]
    if depth >= 3:
        return []
    if isinstance(value, dict):
        content = value.get("content")
        return _strings(content, depth + 1) if content is not None else []
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v, depth + 1)]
    return []


class InputWatch:
    """Calls ``fn`` unchanged after recording the strings it receives under ``name``; picklable with ``fn``."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.watch_name = name or reward_name(fn)
        self.__name__ = reward_name(fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.watch_name})"

    def _observe(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        texts = [s for a in args for s in _strings(a)]
        texts += [s for k, v in kwargs.items() if k != "trainer_state" for s in _strings(v)]
        if texts:
            _record(self.watch_name, texts)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._observe(args, kwargs)
        return self.fn(*args, **kwargs)


class AsyncInputWatch(InputWatch):
    """:class:`InputWatch` for an ``async`` callable."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._observe(args, kwargs)
        return await self.fn(*args, **kwargs)


def watch_inputs(fn: Callable[..., Any], name: str | None = None) -> InputWatch:
    """Wrap ``fn`` so the strings it receives are checked for cut copies of completions (see module doc)."""
    return (AsyncInputWatch if is_async_reward(fn) else InputWatch)(fn, name)
