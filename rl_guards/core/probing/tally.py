"""From rows to verdicts (pure): one row proves nothing; a verdict needs a quorum of the rows a rule could judge.

Each function's result on a row packs into an integer (:func:`encode`, two bits per key: tried, found; exact in a
float64), so a driver with several ranks gathers one number per (row, function) like any other per-row feature, and
every rank adds the same rows to its :class:`Tally` and reaches the same verdicts.

Which hack bits are set depends on the driver's question. ``earnable=True`` (the in-run guard): a function is found
paying a degenerate completion when the run's weighted total pays it as much as the best right answer and the function
is one of those paying it (:class:`~rl_guards.core.probing.rules.TotalHack`) — what the policy can actually earn.
``earnable=False`` (the audit): each function's own rule (:func:`~rl_guards.core.probing.rules.assess`), whatever the
others pay; the total is judged on its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from rl_guards.core.probing.calls import NOT_ITS_TASK, RAISED, SCORED, STALLED, UNSTABLE
from rl_guards.core.probing.procedure import RowResult
from rl_guards.core.probing.rules import Finding
from rl_guards.core.probing.variants import FALLBACK, HACKABLE, HACKS, PREFIX, SUFFIX, THINKING

QUORUM = 3  # a verdict needs the finding on at least this many rows, and on most of the rows it was tried on
STATES = (SCORED, RAISED, STALLED, UNSTABLE, "context")
_KEYS: tuple[str, ...] = (*STATES, PREFIX, SUFFIX, THINKING, *HACKS, FALLBACK)  # 2 bits each: under 52 bits


def _bits(key: str) -> tuple[int, int]:
    index = _KEYS.index(key)
    return 1 << (2 * index), 1 << (2 * index + 1)


def findings_of(result: RowResult, fn: int, *, earnable: bool) -> tuple[set[str], dict[str, Finding]]:
    """(keys tried, findings by key) of function ``fn`` on a row (see the module doc for ``earnable``)."""
    r = result.functions.get(fn)
    if r is None or r.state != SCORED:
        return set(), {}
    tried = {k for k in r.assessment.tried if k not in HACKS}
    found = {f.key: f for f in r.assessment.findings if f.probe != HACKABLE}
    if not earnable:
        tried |= {k for k in r.assessment.tried if k in HACKS}
        found |= {f.key: f for f in r.assessment.findings if f.probe == HACKABLE}
        return tried, found
    tried |= set(result.total_judged)
    for hack in result.totals:
        if fn in hack.payers:
            gain = hack.gains[hack.payers.index(fn)]
            found[hack.variant] = Finding(
                HACKABLE,
                f"the run's weighted total pays the degenerate completion '{hack.variant}' {hack.total:g}, as much as "
                f"its best right answer ({hack.best_total:g}), and this function pays it {gain:+g} (weighted) more "
                "than its share of that answer",
                variant=hack.variant,
            )
    return tried, found


def encode(result: RowResult | None, fn: int, *, earnable: bool) -> int:
    """One function's result on one row as bits: its state, then (tried, found) per probe and hack variant; 0 for
    a row not probed or a function that returned None for every variant (another task's)."""
    if result is None or fn not in result.functions:
        return 0
    r = result.functions[fn]
    if r.state == NOT_ITS_TASK:
        return 0
    mask = _bits(r.state)[0]
    if r.context:
        mask |= _bits("context")[0]
    tried, found = findings_of(result, fn, earnable=earnable)
    for key in tried:
        mask |= _bits(key)[0]
    for key in found:
        mask |= _bits(key)[0] | _bits(key)[1]
    return mask


def decode(mask: int, key: str) -> tuple[bool, bool]:
    """(tried, found) of ``key`` in a mask from :func:`encode`; for a state the first says whether it is the state."""
    tried, found = _bits(key)
    return bool(mask & tried), bool(mask & found)


def quorum(found: Sequence[Hashable], tried: Sequence[Hashable], group_of: dict[Hashable, Hashable]) -> bool:
    """Whether rows ``found`` (of the rows ``tried``) make a verdict: at least ``QUORUM`` rows, most of those tried,
    and from two groups or more when the rows tried come from more than one (one prompt can be a coincidence)."""
    if len(found) < QUORUM or 2 * len(found) <= len(tried):
        return False
    groups_tried = {group_of[r] for r in tried}
    return len({group_of[r] for r in found}) >= min(2, len(groups_tried))


@dataclass(frozen=True)
class Verdict:
    """A finding that reached the quorum: function ``fn``, its key (a probe or a hack label), the rows."""

    fn: int
    key: str
    found: tuple[Hashable, ...]
    tried: tuple[Hashable, ...]

    @property
    def probe(self) -> str:
        return HACKABLE if self.key in HACKS else self.key


@dataclass
class Tally:
    """Rows added one by one (key, group, each function's (tried, found) keys); :meth:`verdicts` applies the quorum."""

    group_of: dict[Hashable, Hashable] = field(default_factory=dict)
    tried: dict[tuple[int, str], list[Hashable]] = field(default_factory=dict)
    found: dict[tuple[int, str], list[Hashable]] = field(default_factory=dict)

    def add(self, row: Hashable, group: Hashable, fn: int, tried: set[str], found: set[str]) -> None:
        self.group_of[row] = group
        for key in tried | found:
            self.tried.setdefault((fn, key), []).append(row)
        for key in found:
            self.found.setdefault((fn, key), []).append(row)

    def add_mask(self, row: Hashable, group: Hashable, fn: int, mask: int) -> None:
        keys = [k for k in _KEYS[len(STATES) :] if decode(mask, k)[0]]
        self.add(row, group, fn, set(keys), {k for k in keys if decode(mask, k)[1]})

    def verdicts(self, functions: Sequence[int]) -> list[Verdict]:
        """Per function: each of PREFIX, SUFFIX, THINKING that reached the quorum (FALLBACK where THINKING did not),
        and of the hack variants that did, the one found on the largest share of the rows it was tried on."""
        out = []
        for fn in functions:
            rows = {key: (self.found.get((fn, key), []), self.tried.get((fn, key), [])) for key in _KEYS}
            for key in (PREFIX, SUFFIX, THINKING, FALLBACK):
                found, tried = rows[key]
                if key == FALLBACK and any(v.fn == fn and v.key == THINKING for v in out):
                    continue
                if quorum(found, tried, self.group_of):
                    out.append(Verdict(fn, key, tuple(found), tuple(tried)))
            hacks = [h for h in HACKS if quorum(*rows[h], self.group_of)]
            for h in sorted(hacks, key=lambda h: (-len(rows[h][0]) / len(rows[h][1]), HACKS.index(h)))[:1]:
                out.append(Verdict(fn, h, tuple(rows[h][0]), tuple(rows[h][1])))
        return out


__all__ = ["QUORUM", "STATES", "Tally", "Verdict", "decode", "encode", "findings_of", "quorum"]
