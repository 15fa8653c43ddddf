"""What a row's procedure asks a driver's scorer for, and each function's state through the probe (pure).

A row's procedure yields :class:`Call` lists and receives one :class:`Reply` per call (scores, or :class:`Failed`);
:func:`ask` is the one place that turns variants into calls and replies back into scores.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field

from rl_guards.core.probing.variants import Pair, Variant

SCORED = "scored"
NOT_ITS_TASK = "not_its_task"  # None for every variant: the function is another task's
RAISED = "raised"
STALLED = "stalled"
UNSTABLE = "unstable"  # the same text scored differently on two calls of its own: noise, not judged


@dataclass(frozen=True)
class FunctionPlan:
    """One reward function in a probe: which rules apply, and what earlier probes learned about it."""

    index: int
    name: str = ""
    weight: float = 1.0
    check_prefix: bool = True  # not for functions meant to read only the start or end
    check_thinking: bool = True  # not for process rewards
    forms: tuple[str, ...] | None = None  # forms it told apart before: a later probe keeps to them (None: all)


@dataclass(frozen=True)
class Call:
    """Texts for one function to score. ``alone``: in an invocation of their own (never merged with other rows')."""

    fn: int
    texts: tuple[str, ...]
    alone: bool = False


@dataclass(frozen=True)
class Failed:
    """A call that did not return scores: the function raised (``RAISED``) or ran past its deadline (``STALLED``)."""

    state: str
    detail: str = ""


Reply = Sequence["float | None"] | Failed


@dataclass
class FunctionProbe:
    """One function's probe of one row: its plan, its pairs, its scores so far, its state."""

    plan: FunctionPlan
    pairs: list[Pair]
    scores: dict[Variant, float | None] = field(default_factory=dict)
    state: str = SCORED
    detail: str = ""
    context: bool = False


def ask(
    fns: Mapping[int, FunctionProbe],
    wanted: Mapping[int, Sequence[Variant]],
    companions: Sequence[str] = (),
    *,
    context: bool = False,
) -> Generator[list[Call], list[Reply], None]:
    """Ask for the texts of ``wanted`` not scored yet (one call per function; with ``context``, or for a function
    scored in context, one call per text beside ``companions``, the group's real completions) and record the
    replies; a failed call ends the function's probe."""
    order: list[tuple[int, list[Variant]]] = []
    calls: list[Call] = []
    for f, variants in wanted.items():
        fn = fns[f]
        if fn.state != SCORED:
            continue
        todo = [v for v in dict.fromkeys(variants) if v not in fn.scores]
        if not todo:
            continue
        if context or fn.context:
            for v in todo:
                order.append((f, [v]))
                calls.append(Call(f, (v.text, *companions), alone=True))
        else:
            texts = tuple(dict.fromkeys(v.text for v in todo))
            order.append((f, todo))
            calls.append(Call(f, texts))
    if not calls:
        return
    replies = yield calls
    for (f, variants), call, reply in zip(order, calls, replies, strict=True):
        fn = fns[f]
        if fn.state != SCORED:
            continue
        if isinstance(reply, Failed):
            fn.state, fn.detail = reply.state, reply.detail
            continue
        by_text = dict(zip(call.texts, reply, strict=False))
        for v in variants:
            fn.scores[v] = by_text.get(v.text)


__all__ = [
    "NOT_ITS_TASK",
    "RAISED",
    "SCORED",
    "STALLED",
    "UNSTABLE",
    "Call",
    "Failed",
    "FunctionPlan",
    "FunctionProbe",
    "Reply",
    "ask",
]
