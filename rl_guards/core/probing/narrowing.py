"""A cut narrowed to a few characters, then reproduced with other neutral text (pure).

A prefix or suffix finding comes with the two probe lengths it falls between; grids of lengths between them narrow it
(each round divides the gap by ``GRID + 1``) until it is ``NARROW_TO`` characters wide, and the other filler must show
the cut at the two lengths it ends on (with a few characters' slack: where it falls can move with the text's last
word). A cut the other text does not show was one lucky draw of the first: dropped.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import replace

from rl_guards.core.probing.calls import SCORED, Call, FunctionProbe, Reply, ask
from rl_guards.core.probing.rules import Finding, prefix_detail, suffix_detail, told
from rl_guards.core.probing.variants import BASE, PREFIX, SUFFIX, Pair, Shape, Variant, narrow_variants

GRID = 6  # lengths tried per narrowing round
NARROW_ROUNDS = 5  # narrowing rounds at most
NARROW_TO = 4  # characters: a cut this narrow is narrowed no further


def narrow(
    fns: Mapping[int, FunctionProbe], found: Mapping[int, Finding], probe: str, shape: Shape
) -> Generator[list[Call], list[Reply], dict[int, Finding | None]]:
    """Each function's cut narrowed to a few characters (two grids between its lengths), then tried with the other
    neutral text at the two lengths it ends on: kept (narrowed) when that shows it too, else None."""
    state = {f: finding.cut for f, finding in found.items()}
    pairs = {f: next(p for p in fns[f].pairs if p.form == finding.form) for f, finding in found.items()}
    rounds = [("a", GRID)] * NARROW_ROUNDS + [("b", 0)]
    for fill, grid in rounds:
        asks: dict[int, list[Variant]] = {}
        for f, (seen, blind) in state.items():
            if fns[f].state != SCORED or (grid and blind - seen <= NARROW_TO):
                continue
            if grid:
                step = (blind - seen) / (grid + 1)
                lengths = sorted({round(seen + step * i) for i in range(1, grid + 1)} - {seen, blind})
            else:  # a few characters' slack: where the cut falls can move with the text's last word
                lengths = sorted({max(seen - _slack(blind), 0), blind + _slack(blind)} - {0})
            asks[f] = narrow_variants(pairs[f], shape, probe, lengths, fill)
        yield from ask(fns, asks)
        for f, variants in asks.items():
            if fns[f].state != SCORED:
                continue
            gap0 = found[f].gap
            at = {}
            for v in variants:
                good = fns[f].scores.get(v) if v.side.endswith("good") else None
                if good is None:
                    continue
                bad = next((fns[f].scores.get(w) for w in variants if w.k == v.k and w.side.endswith("bad")), None)
                at[v.k] = told(None if bad is None else good - bad, gap0)
            seen, blind = state[f]
            if grid:
                ks = sorted(at)
                told_ks = [k for k in ks if at[k]]
                blind_ks = [k for k in ks if not at[k]]
                new_seen = max([seen, *(k for k in told_ks if not blind_ks or k < blind_ks[0])])
                new_blind = min([blind, *(k for k in blind_ks if k > new_seen)])
                state[f] = (new_seen, new_blind)
            elif not (
                (seen - _slack(blind) <= 0 or at.get(seen - _slack(blind), False))
                and not at.get(blind + _slack(blind), True)
            ):
                state[f] = (-1, -1)  # the other text does not show it: not a cut
    out: dict[int, Finding | None] = {}
    for f, (seen, blind) in state.items():
        if seen < 0 or fns[f].state != SCORED:
            out[f] = None
            continue
        finding = found[f]
        pair = pairs[f]
        good, bad = _base_scores(fns[f], pair, probe, shape)
        chars = _chars(pair, shape, probe, seen), _chars(pair, shape, probe, blind)
        detail = prefix_detail(good, bad, *chars) if probe == PREFIX else suffix_detail(good, bad, *chars)
        out[f] = replace(finding, detail=detail, cut=(seen, blind))
    return out


def _slack(blind: int) -> int:
    return max(4, blind // 8)


def _base_scores(fn: FunctionProbe, pair: Pair, probe: str, shape: Shape) -> tuple[float, float]:
    side = "-block" if probe == SUFFIX and shape.block else ""
    get = {v.side: s for v, s in fn.scores.items() if v.probe == BASE and v.form == pair.form}
    return get.get("good" + side) or 0.0, get.get("bad" + side) or 0.0


def _chars(pair: Pair, shape: Shape, probe: str, k: int) -> int:
    """Characters of text before (PREFIX) or after (SUFFIX) the answer in the variant with ``k`` of neutral text."""
    if k <= 0:
        return 0
    variant = narrow_variants(pair, shape, probe, [k], "a")[0]
    return len(variant.text) - len(pair.good) if probe == PREFIX else k + 2


__all__ = ["GRID", "NARROW_ROUNDS", "NARROW_TO", "narrow"]
