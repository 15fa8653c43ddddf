"""A plain grader, ``fn(completion, answer) -> float``: the completion's text and the row's reference answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, Tracked, gather, score_value


class PlainCaller:
    """``fn(text, reference)`` per sample (async graders awaited together)."""

    framework = "plain"

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        items = tracked if tracked is not None else Tracked()
        items.extend(texts)
        return [score_value(v) for v in gather([self.fn(items[i], row.reference) for i, row in enumerate(rows)])]


__all__ = ["PlainCaller"]
