"""Lockstep sections: every collective started inside one is agreed on by every rank first, whatever raises where.

::

    with Section("batch", group) as section:   # every rank enters at the same point
        result = ...                            # local work, and collectives: each one gated
    if section.failure is not None:             # some rank raised inside: every rank left here, at the same point
        ...                                     # section.failure: the failing rank and its error, on every rank

A rank whose block ran to its end learns of another rank's failure only at the section's exit: its result is then
to be dropped, so a block never returns from inside the ``with``.

:func:`gate` runs before each collective of :mod:`rl_guards.tensors.collectives` (and, inside :func:`gated_torch`,
before each collective the trainer's own code starts): one ``all_reduce`` (max) of four integers, the failing
section's depth, which collective this rank is at (as ``site`` and ``-site``, so that ranks at different ones see
it) and this rank's depth. A rank whose code raised sends its failure from the section's exit
instead; it meets the others there, at their next gate or at their exit (which agrees too). Every rank then
exchanges the error's text (one ``all_gather_object``) and unwinds to the failing section with :class:`RankFailure`,
a ``BaseException`` so that ``except Exception`` on the way (a guard's, the trainer's) does not stop it; the section
catches it. So no rank is ever left waiting in a collective another rank will not start, and the rank-local error
reaches every rank (the main process's summary).

With one process (or no process group) a section only catches: an exception inside becomes its ``failure`` (rank 0),
as it would with several ranks, and nothing is agreed.
"""

from __future__ import annotations

import sys
import threading
import traceback
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

_BIG = 1 << 20  # depths are sent as _BIG - depth, so that the max is the outermost failing section
_EXIT = "section end"
_state = threading.local()  # .stack: the sections this thread is in; .agreeing: inside an agreement's own collectives

# What the trainer's code may start inside gated_torch(): each gated as it is called through torch.distributed.
TORCH_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_object", "gather",
    "gather_object", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "barrier",
)  # fmt: skip


@dataclass(frozen=True)
class Failure:
    """What every rank knows of a failed section: the (lowest) failing rank and its error as text."""

    rank: int  # -1: no rank raised (the ranks reached different collectives)
    message: str
    error_type: str = ""  # the exception's class name

    @property
    def where(self) -> str:
        return f"on rank {self.rank}" if self.rank >= 0 else "across ranks"


class Reported(Exception):
    """A failure this rank has already put into words (``str``), raised for its section to agree on."""

    def __init__(self, message: str, error_type: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type


class RankFailure(BaseException):  # a BaseException: a section unwinding, not an error of this rank
    """Some rank failed inside the section at ``depth``: raised on every rank at once, caught by that section."""

    def __init__(self, depth: int, failure: Failure) -> None:
        super().__init__(f"rank {failure.rank}: {failure.message}")
        self.depth = depth
        self.failure = failure


def _stack() -> list[Section]:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


def _site(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x3FFFFFFF


def several() -> bool:
    """True when ``torch.distributed`` is initialised with more than one rank (torch is not imported for this)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


class Section:
    """A stretch of code every rank runs together (see the module's docstring).

    ``group``/``device``: where its agreements run (None: the default group; ``device`` for NCCL). ``passthrough``:
    exception types that leave the section as they are, with no agreement (errors raised on every rank together by
    construction, such as an agreed stop). ``failure`` (after the block): None, or the agreed :class:`Failure`;
    ``error``: this rank's own exception, when this rank failed.
    """

    def __init__(
        self,
        name: str,
        group: Any = None,
        device: Any = None,
        passthrough: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.name = name
        self.group = group
        self.device = device
        self.passthrough = passthrough
        self.failure: Failure | None = None
        self.error: BaseException | None = None
        self.depth = 0
        self.active = False

    def __enter__(self) -> Section:
        self.active = several()
        if self.active:
            stack = _stack()
            stack.append(self)
            self.depth = len(stack)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if not self.active:  # one rank: it agrees with itself
            if isinstance(exc, Exception) and not isinstance(exc, self.passthrough):
                self.error = exc
                self.failure = Failure(0, _describe(exc), _type_name(exc))
                return True
            return False
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()
        if isinstance(exc, RankFailure):  # agreed at a gate (or at an inner section's exit)
            if exc.depth == self.depth:
                self.failure = exc.failure
                return True
            return False  # an outer section's failure: unwinds on
        if exc is not None and isinstance(exc, self.passthrough):
            return False
        if exc is not None:
            self.error = exc
        unwind = self._agree(_EXIT, exc)
        if unwind is None:
            return False
        depth, failure = unwind
        if depth < self.depth:
            raise RankFailure(depth, failure) from exc
        self.failure = failure
        # this rank's own error is suppressed like the others' RankFailure; a Ctrl-C or an exit still goes on
        return exc is None or isinstance(exc, Exception)

    def _agree(self, site: str, own: BaseException | None) -> tuple[int, Failure] | None:
        """One agreement of every rank at ``site`` (``own``: this rank raised); None: go on, else where to unwind to
        and the failure every rank now knows."""
        import torch

        from rl_guards.tensors.collectives import _device  # the collectives' own rule (imported late: it imports us)

        dist = torch.distributed
        code = _site(f"{site}@{self.depth}")  # the same collective in another section is another site
        failing = _BIG - self.depth if own is not None else 0
        rank = dist.get_rank()
        values = [failing, code, -code, _BIG - self.depth]
        _state.agreeing = True
        try:
            tensor = torch.tensor(values, dtype=torch.long, device=_device(self.device, self.group))
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)
            failed, top, negative_bottom, outermost = (int(v) for v in tensor.tolist())
            if not failed and top == -negative_bottom:
                return None
            mine = (rank, _describe(own), _type_name(own), f"{self.name}: {site}")
            parts: list[Any] = [None] * dist.get_world_size(group=self.group)
            dist.all_gather_object(parts, mine, group=self.group)
        finally:
            _state.agreeing = False
        failed_parts = [p for p in parts if p is not None and p[1]]
        if failed_parts:
            first = min(failed_parts)
            failure = Failure(first[0], first[1], first[2])
            depth = min(_BIG - failed, _BIG - outermost) if failed else _BIG - outermost
        else:  # no rank raised, yet they reached different collectives: a decision that differed between ranks
            where = "; ".join(f"rank {p[0]} at {p[3]}" for p in parts if p is not None)
            failure = Failure(-1, f"the ranks reached different collectives ({where})")
            depth = _BIG - outermost
        return depth, failure


def _type_name(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    return exc.error_type if isinstance(exc, Reported) else type(exc).__name__


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, Reported):
        return str(exc)
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ is not None else []
    at = f" (at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno} in {where[0].name})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def gate(kind: str) -> None:
    """Before a collective: agree with every rank of the innermost section (no-op outside a section, and inside an
    agreement's own collectives). Raises :class:`RankFailure` when some rank failed or is elsewhere."""
    stack = _stack()
    if not stack or getattr(_state, "agreeing", False):
        return
    section = stack[-1]
    unwind = section._agree(kind, None)
    if unwind is not None:
        raise RankFailure(*unwind)


@contextmanager
def gated_torch() -> Iterator[None]:
    """While inside: every collective this thread starts through ``torch.distributed`` (the trainer's code, which
    rl_guards does not own) is gated like rl_guards' own. Other threads call through as before."""
    if not several():
        yield
        return
    import torch

    dist = torch.distributed
    originals = {name: getattr(dist, name) for name in TORCH_COLLECTIVES if callable(getattr(dist, name, None))}
    owner = threading.get_ident()

    def gated(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == owner:
                gate(f"torch.distributed.{name}")
            return original(*args, **kwargs)

        return call

    for name, original in originals.items():
        setattr(dist, name, gated(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


__all__ = ["TORCH_COLLECTIVES", "Failure", "RankFailure", "Reported", "Section", "gate", "gated_torch", "several"]
