"""What every framework caller shares: the row a call is built from, scores read back, and calls that cannot hang.

A caller turns ``(row, text)`` items into the exact call a framework makes to a user's reward function (its
argument names, its shapes, its return handling), so that whatever the framework would crash on, or silently turn
into a zero, happens here too and becomes a finding. Callers never filter a function's arguments the framework
does not filter: a function missing a parameter the framework passes raises here as it would there.

:func:`bounded` runs any such call with a deadline, on the calling thread as the frameworks call reward functions
(some refuse to run elsewhere: math_verify's ``parse`` raises off the main thread). On the main thread a watchdog
thread, at the deadline, sends it a signal whose handler raises :class:`CallStalled` inside the call, naming the last
text the function read (the inputs are :class:`Tracked` lists): a sleep, a socket read or a pure-Python loop is
interrupted there, and the function's own ``except Exception`` cannot swallow it. The watchdog uses a real-time
signal, not the ``SIGALRM`` timer, which graders such as math_verify set and clear for their own timeouts. Off the
main thread the call runs on a worker thread instead, left behind at the deadline. The run's random state is saved
before and restored after, so a check never moves the run's sampling. A C loop that holds the GIL (a catastrophic
regex) cannot be interrupted either way: the one case a deadline does not cover.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rl_guards.core.rng import forked_rng

T = TypeVar("T")


class RewardTypeError(TypeError):
    """A reward function returned something that is not a score (in the framework's terms)."""


class CallStalled(BaseException):
    """A call ran past its deadline; ``text`` is the last input the function read (when it read one). A
    BaseException: the function's own ``except Exception`` cannot swallow it."""

    def __init__(self, seconds: float, text: str | None) -> None:
        shown = f"; the last text it read: {_short(text, 160)}" if text is not None else ""
        super().__init__(f"did not return within {seconds:.3g} s{shown}")
        self.seconds = seconds
        self.text = text


@dataclass(frozen=True)
class CallRow:
    """One dataset row, as a framework hands it to reward functions.

    ``prompt``: as the dataset holds it (chat messages or a string); ``columns``: the row's other columns, as the
    framework passes them; ``reference``: the row's reference answer, raw (verl's ``ground_truth``, OpenRLHF's label,
    verifiers' ``answer``); ``rendered_prompt``: the prompt as the model saw it (templated), where the framework
    hands that over (OpenRLHF's queries begin with it); ``prompt_ids``: its token ids (TRL's response parser);
    ``original``: a completion the framework passed for this row (its shape: a string or messages); ``handle``: the
    framework's own object for the row where its reward is a method of it (a tinker-cookbook env).
    """

    prompt: Any = ""
    columns: Mapping[str, Any] = field(default_factory=dict)
    reference: Any = None
    rendered_prompt: str | None = None
    prompt_ids: Sequence[int] | None = None
    original: Any = None
    handle: Any = None


class Tracked(list):  # type: ignore[type-arg]
    """A list that remembers the last index read (by index or iteration): which text a stalled call was on."""

    last: int | None = None

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            self.last = index if index >= 0 else len(self) + index
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            self.last = i
            yield super().__getitem__(i)


def resolve(value: Any) -> Any:
    """``value``, awaited when it is awaitable (each call gets an event loop of its own)."""
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def gather(values: list[Any]) -> list[Any]:
    """Every awaitable in ``values`` awaited together (an async judge's calls run concurrently, as trainers do)."""
    if not any(inspect.isawaitable(v) for v in values):
        return values

    async def done(value: Any) -> Any:
        return value

    async def wait() -> list[Any]:
        return list(await asyncio.gather(*(v if inspect.isawaitable(v) else done(v) for v in values)))

    return asyncio.run(wait())


_SIGNAL = getattr(signal, "SIGRTMIN", 0) + 5 if hasattr(signal, "SIGRTMIN") else getattr(signal, "SIGUSR2", None)


class _Expired(BaseException):
    """Raised inside the call by the watchdog's signal."""


def bounded(
    call: Callable[[], T], deadline: float | None, *, inputs: Tracked | None = None, fork_rng: bool = True
) -> T:
    """``call()`` with a deadline (seconds; None: none), on this thread when it is the main one (a worker thread
    otherwise); its exception re-raised; :class:`CallStalled` past the deadline, naming ``inputs``' last read text.
    With ``fork_rng`` (in a run) the random state is restored after the call; without (the audit, where there is no
    run to protect) a sampled judge draws afresh on each call, as it would in training."""
    main = threading.current_thread() is threading.main_thread()
    with forked_rng() if fork_rng else contextlib.nullcontext():
        if deadline is None:
            return call()
        if main and _SIGNAL is not None:
            return _on_this_thread(call, float(deadline), inputs)
        return _on_a_worker(call, float(deadline), inputs)


def _stalled(seconds: float, inputs: Tracked | None) -> CallStalled:
    last = inputs.last if inputs is not None else None
    text = None
    if inputs is not None and last is not None and 0 <= last < len(inputs):
        item = list.__getitem__(inputs, last)
        text = item if isinstance(item, str) else _text_of(item)
    return CallStalled(seconds, text)


def _on_this_thread(call: Callable[[], T], deadline: float, inputs: Tracked | None) -> T:
    active = [True]

    def expire(signum: int, frame: Any) -> None:
        if active[0]:  # a signal that lands after the call returned is ignored
            active[0] = False
            raise _Expired()

    finished = threading.Event()
    main_id = threading.get_ident()

    def watch() -> None:
        if not finished.wait(deadline) and active[0]:
            with contextlib.suppress(Exception):
                signal.pthread_kill(main_id, _SIGNAL)

    previous = signal.signal(_SIGNAL, expire)
    watchdog = threading.Thread(target=watch, name="rl_guards-deadline", daemon=True)
    watchdog.start()
    try:
        return call()
    except _Expired:
        raise _stalled(deadline, inputs) from None
    finally:
        active[0] = False
        finished.set()
        watchdog.join()
        signal.signal(_SIGNAL, previous)


def _on_a_worker(call: Callable[[], T], deadline: float, inputs: Tracked | None) -> T:
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="rl_guards-reward-call", daemon=True).start()
    if not done.wait(deadline):
        raise _stalled(deadline, inputs)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _text_of(item: Any) -> str:
    if isinstance(item, list | tuple):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in item)
    return str(item)


def score_value(value: Any, *, dict_key: str | None = None) -> float | None:
    """One returned value as a score (None kept; NaN kept: the caller reports it); a dict read at ``dict_key``
    (verl's ``score``); RewardTypeError for anything else."""
    if isinstance(value, dict) and dict_key is not None:
        if dict_key not in value:
            raise RewardTypeError(f"returned a dict without {dict_key!r}: {_short(value)}")
        value = value[dict_key]
    if hasattr(value, "item") and not isinstance(value, bool | int | float):
        try:
            value = value.item()  # a 0-d tensor or a numpy scalar
        except Exception as exc:
            raise RewardTypeError(f"returned {type(value).__name__} {_short(value)}, not a number") from exc
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return float(value)
    raise RewardTypeError(f"returned {type(value).__name__} {_short(value)}, not a number")


def _short(value: Any, chars: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[:chars] + "…"


def params(fn: Any) -> dict[str, inspect.Parameter]:
    """``fn``'s parameters ({} when it has no readable signature)."""
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


class Timer:
    """Seconds per call of one function, as an estimate for deadlines and budgets: ``a + b * texts``, fitted on the
    calls seen (the run's own and the probes')."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float]] = []

    KEEP = 32  # samples kept; the oldest of a size seen again goes first, so every size seen keeps its latest

    def add(self, texts: int, seconds: float) -> None:
        self.samples.append((max(texts, 1), max(seconds, 0.0)))
        if len(self.samples) > self.KEEP:
            sizes = [n for n, _ in self.samples]
            drop = next((i for i, n in enumerate(sizes) if sizes.count(n) > 1), 0)
            del self.samples[drop]

    @property
    def sizes_seen(self) -> int:
        """How many different call sizes were timed (two or more separate a call's cost from a text's)."""
        return len({n for n, _ in self.samples})

    def coefficients(self) -> tuple[float, float] | None:
        """(seconds a call, seconds a text), fitted on the calls timed; with one call size only, all of it is put on
        the texts (the cautious reading); None before any call was timed."""
        if not self.samples:
            return None
        ns = [n for n, _ in self.samples]
        ss = [s for _, s in self.samples]
        if len(set(ns)) < 2:
            return 0.0, sum(ss) / sum(ns)
        mean_n, mean_s = sum(ns) / len(ns), sum(ss) / len(ss)
        cov = sum((n - mean_n) * (s - mean_s) for n, s in self.samples)
        var = sum((n - mean_n) ** 2 for n in ns)
        slope = max(cov / var, 0.0)
        return max(mean_s - slope * mean_n, 0.0), slope

    def estimate(self, texts: int) -> float | None:
        """Expected seconds of a call scoring ``texts`` texts (None before any call was timed)."""
        found = self.coefficients()
        return None if found is None else found[0] + found[1] * max(texts, 1)


def timed(timer: Timer | None, texts: int, call: Callable[[], T]) -> T:
    start = time.perf_counter()
    try:
        return call()
    finally:
        if timer is not None:
            timer.add(texts, time.perf_counter() - start)


__all__ = [
    "CallRow",
    "CallStalled",
    "RewardTypeError",
    "Timer",
    "Tracked",
    "bounded",
    "gather",
    "params",
    "resolve",
    "score_value",
    "timed",
]
