"""A reward function that raises on a batch: find the rows it raises on, score those None, keep the rest.

TRL calls each reward function once per batch; one malformed row that makes it raise ends the run with the user's
traceback and no row shown (and, on several ranks, only the rank that raised stops). :class:`CatchRowErrors` wraps
a function so that such a batch is scored row by row: rows that raise get None (TRL leaves them out of that
function's statistics), the others keep their scores, and what happened is written to a :class:`RowErrorLog` that
:class:`~rl_guards.guards.reward_errors.RewardErrorGuard` reads at the end of the batch. That guard warns with the
rows decoded (mode warn), or stops every rank together (mode raise). The wrapper itself never raises.

Outside training (drift's probe generation runs TRL's own rollout path), :meth:`RowErrorLog.checking` hands the
wrappers the run's :class:`~rl_guards.rewards.checked_calls.CheckedCalls`: each call is then bounded by the
function's deadline, a function past it is marked stalled (scored None from then on in such calls, left out of the
reward probes) and a call that raises is scored None whole (the probe's rows are not training's to explain).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_guards.reward_calls.base import CallStalled, Timer, Tracked, bounded

_PER_ROW_ONLY = ("log_extra", "log_metric")  # TRL's logging callbacks expect whole-batch columns: not per row


@dataclass
class RowError:
    """One row a function raised on: its index in the call, and the exception's last line and origin."""

    row: int
    error: str


@dataclass
class RowErrorLog:
    """What the wrapped functions raised in the last reward call of this process, by function index."""

    errors: dict[int, list[RowError]] = field(default_factory=dict)
    failed_whole: dict[int, str] = field(default_factory=dict)  # function raised on every row: its error
    calls: int = 0  # reward calls seen (a fresh call clears the previous call's errors)
    # each function's call times on the run's own rows (what the checks' deadlines and budgets are measured from)
    timers: dict[int, Timer] = field(default_factory=dict)
    checks: Any = None  # CheckedCalls while calls are outside training (bounded, see the module doc)
    stalled_now: dict[int, str] = field(default_factory=dict)  # functions that stalled while ``checks`` was set

    @contextlib.contextmanager
    def checking(self, checks: Any) -> Iterator[None]:
        """Calls made inside are the guards' own (not training's): bounded by ``checks``' deadlines."""
        previous, self.checks = self.checks, checks
        try:
            yield
        finally:
            self.checks = previous

    def timed(self, index: int, rows: int, seconds: float) -> None:
        self.timers.setdefault(index, Timer()).add(rows, seconds)

    def start_call(self, index: int) -> None:
        self.errors.pop(index, None)
        self.failed_whole.pop(index, None)

    def take(self) -> tuple[dict[int, list[RowError]], dict[int, str]]:
        """The errors of the last call, cleared."""
        errors, whole = self.errors, self.failed_whole
        self.errors, self.failed_whole = {}, {}
        return errors, whole


def describe_error(exc: BaseException) -> str:
    """``Type: message (at file:line)``: an exception's last line and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _row_kwargs(kwargs: dict[str, Any], n: int, i: int) -> dict[str, Any]:
    out = {}
    for key, value in kwargs.items():
        if key in _PER_ROW_ONLY:
            out[key] = _noop
        elif isinstance(value, list | tuple) and len(value) == n:
            out[key] = list(value[i : i + 1])
        else:
            out[key] = value
    return out


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class CatchRowErrors:
    """Wraps a TRL reward function (sync or async) so that an exception costs the rows that raise, not the run.

    The wrapper keeps the function's ``__name__`` (TRL's metric key) and forwards attribute access to it.
    """

    def __init__(self, fn: Any, index: int, log: RowErrorLog) -> None:
        self.__wrapped__ = fn
        self.index = index
        self.log = log
        functools.update_wrapper(self, fn, updated=())
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("__wrapped__")
        if wrapped is None:
            raise AttributeError(name)
        return getattr(wrapped, name)

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        if self.log.checks is not None:
            return self._checked(self.log.checks, args, kwargs)
        self.log.start_call(self.index)
        start = time.perf_counter()
        try:
            scores = self.__wrapped__(*args, **kwargs)
        except Exception as exc:
            return self._by_row(kwargs, exc)
        self.log.timed(self.index, len(kwargs.get("completions") or []), time.perf_counter() - start)
        return scores

    def _checked(self, checks: Any, args: Any, kwargs: dict[str, Any]) -> list[float | None]:
        """A call outside training: bounded; None for every row when it stalls (now or before) or raises."""
        n = len(kwargs.get("completions") or [])
        if self.index in checks.stalled:
            return [None] * n
        tracked = Tracked(kwargs.get("completions") or [])
        call_kwargs = {**kwargs, "completions": tracked} if "completions" in kwargs else kwargs
        try:
            deadline = checks.deadline(self.index, n)
            return bounded(lambda: self.__wrapped__(*args, **call_kwargs), deadline, inputs=tracked)
        except CallStalled as exc:
            checks.stalled[self.index] = str(exc)
            self.log.stalled_now[self.index] = str(exc)
        except Exception:
            pass
        return [None] * n

    def _by_row(self, kwargs: dict[str, Any], exc: BaseException) -> list[float | None]:
        n = len(kwargs.get("completions") or [])
        scores: list[float | None] = []
        errors: list[RowError] = []
        for i in range(n):
            try:
                value = self.__wrapped__(**_row_kwargs(kwargs, n, i))
                scores.append(_first(value))
            except Exception as row_exc:
                scores.append(None)
                errors.append(RowError(i, describe_error(row_exc)))
        self._record(errors, n, exc)
        return scores

    def _record(self, errors: list[RowError], n: int, exc: BaseException) -> None:
        if n and len(errors) == n:
            self.log.failed_whole[self.index] = describe_error(exc)
        else:
            alone = RowError(-1, describe_error(exc) + " (no single row raises alone)")
            self.log.errors[self.index] = errors or [alone]


def _first(value: Any) -> float | None:
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 1:
        value = value[0]
    return None if value is None else float(value)


class _AsyncCatchRowErrors(CatchRowErrors):
    """:class:`CatchRowErrors` for ``async def`` reward functions (TRL awaits them in parallel)."""

    async def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        checks = self.log.checks
        if checks is not None:
            n = len(kwargs.get("completions") or [])
            if self.index in checks.stalled:
                return [None] * n
            deadline = checks.deadline(self.index, n)
            try:
                return await asyncio.wait_for(self.__wrapped__(*args, **kwargs), deadline)
            except asyncio.TimeoutError:
                why = str(CallStalled(deadline, None))
                checks.stalled[self.index] = why
                self.log.stalled_now[self.index] = why
            except Exception:
                pass
            return [None] * n
        self.log.start_call(self.index)
        start = time.perf_counter()
        try:
            scores = await self.__wrapped__(*args, **kwargs)
            self.log.timed(self.index, len(kwargs.get("completions") or []), time.perf_counter() - start)
            return scores
        except Exception as exc:
            n = len(kwargs.get("completions") or [])
            scores: list[float | None] = []
            errors: list[RowError] = []
            for i in range(n):
                try:
                    scores.append(_first(await self.__wrapped__(**_row_kwargs(kwargs, n, i))))
                except Exception as row_exc:
                    scores.append(None)
                    errors.append(RowError(i, describe_error(row_exc)))
            self._record(errors, n, exc)
            return scores


def catch_row_errors(fn: Any, index: int, log: RowErrorLog) -> CatchRowErrors:
    """The wrapper for ``fn`` (async-aware)."""
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
    return (_AsyncCatchRowErrors if is_async else CatchRowErrors)(fn, index, log)


__all__ = ["CatchRowErrors", "RowError", "RowErrorLog", "catch_row_errors", "describe_error"]
