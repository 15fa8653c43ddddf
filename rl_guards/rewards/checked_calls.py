"""Calls rl_guards makes to a run's reward functions that the framework did not ask for (probes, reward sanity): each
bounded in time, timed, and never the cause of a hang or a changed run.

A call's deadline comes from the function's own measured time (the run's calls, timed by the framework driver, and
the checks' own), ``FACTOR`` times what a call of that size is expected to take, at least ``FLOOR`` seconds and at most
the configured cap. A function that overruns once is marked stalled (with the text it was reading) and never called
by a check again; its finding says which text stalled it. Calls run on the calling thread with the run's random
state restored after (:func:`rl_guards.reward_calls.bounded`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_guards.reward_calls import CallRow, CallStalled, Timer, Tracked, bounded

FACTOR = 20.0  # a call may take this many times its expected time
FLOOR = 2.0  # seconds: no deadline shorter (start-up, a first call that loads a model or a regex cache)
UNTIMED = 0.001  # seconds a text is assumed to take before a function's first timed call


class Stalled(Exception):
    """A function overran its deadline on a check's call (it is not called by checks again)."""


@dataclass
class CheckedCalls:
    """The run's reward functions as checks call them: ``callers[i]`` calls function ``i`` in its framework's
    convention (None: not callable by checks, e.g. a reward model); ``cap``: the longest any one call may take."""

    callers: Sequence[Any]
    cap: float = 30.0
    timers: dict[int, Timer] = field(default_factory=dict)
    stalled: dict[int, str] = field(default_factory=dict)  # function -> what stalled it
    seconds: float = 0.0  # wall time spent in these calls

    def timer(self, fn: int) -> Timer:
        return self.timers.setdefault(fn, Timer())

    def deadline(self, fn: int, texts: int) -> float:
        expected = self.timer(fn).estimate(texts)
        if expected is None:
            return self.cap
        return min(self.cap, max(FLOOR, FACTOR * expected))

    def expected(self, fn: int, texts: int) -> float:
        """The seconds a call of ``texts`` texts is expected to take (``UNTIMED`` a text before any call was timed:
        the first call then sizes it, within the cap's deadline)."""
        estimate = self.timer(fn).estimate(texts)
        return UNTIMED * max(texts, 1) if estimate is None else estimate

    def per_call(self, fn: int) -> tuple[float, float]:
        """(seconds a call, seconds a text) of function ``fn`` (``UNTIMED`` a text before any call was timed)."""
        return self.timer(fn).coefficients() or (0.0, UNTIMED)

    def usable(self, fn: int) -> bool:
        return 0 <= fn < len(self.callers) and self.callers[fn] is not None and fn not in self.stalled

    def __call__(self, fn: int, rows: Sequence[CallRow], texts: Sequence[str]) -> list[float | None]:
        """Function ``fn``'s scores of ``texts`` (NaN read as None); its own exception raised; :class:`Stalled`
        past the deadline (and for every call after)."""
        if not self.usable(fn):
            raise Stalled(self.stalled.get(fn, "not callable by checks"))
        tracked = Tracked()
        start = time.perf_counter()
        try:
            values = bounded(
                lambda: self.callers[fn](list(rows), list(texts), tracked=tracked),
                self.deadline(fn, len(texts)),
                inputs=tracked,
            )
        except CallStalled as exc:
            self.stalled[fn] = str(exc)
            raise Stalled(str(exc)) from None
        finally:
            spent = time.perf_counter() - start
            self.seconds += spent
        self.timer(fn).add(len(texts), spent)
        return [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]


__all__ = ["FACTOR", "FLOOR", "CheckedCalls", "Stalled"]
