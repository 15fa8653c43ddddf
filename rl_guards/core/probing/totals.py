"""The weighted total of a row's functions (pure): the degenerate completions it pays as much as its best right
answer, naming the functions that pay them, and whether it pays wrong answers more in every form it tells apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rl_guards.core.probing.calls import NOT_ITS_TASK, SCORED, FunctionProbe
from rl_guards.core.probing.rules import EPS, TotalHack, format_matters, total_hacks
from rl_guards.core.probing.variants import BASE, HACKABLE, PADDING, REFERENCE_ALONE, Pair, Variant


def weighted_totals(
    fns: Mapping[int, FunctionProbe],
    reads: Mapping[int, bool],
    real: tuple[Sequence[str], Mapping[int, Sequence[float | None]]],
    markup: bool,
    shared: Sequence[Pair],
    hacks: Sequence[Variant],
    fallback: Mapping[int, float],
    count: int,
) -> tuple[list[TotalHack], list[str], bool, bool]:
    """The degenerate completions the weighted total pays as much as its best right answer, those it judged, and
    whether it is inverted (pays a wrong answer more in every form it tells apart) and tells any form apart."""
    weights = [0.0] * count
    for f, fn in fns.items():
        if f < count:
            weights[f] = fn.plan.weight
    scored = {f: fn.scores for f, fn in fns.items() if fn.state == SCORED}
    if not scored:
        return [], [], False, False

    def score_of(f: int, v: Variant) -> float:
        if f in scored:
            return scored[f].get(v) or 0.0
        if f in fns and fns[f].state == NOT_ITS_TASK:
            return 0.0  # None for this row: TRL counts it 0 in the sum
        return fallback.get(f, 0.0)

    def total(v: Variant) -> float:
        return sum(w * score_of(f, v) for f, w in enumerate(weights))

    candidates: list[tuple[float, dict[int, float]]] = []  # (total, each function's share) of right answers
    texts, paid = real
    sides = ("", "-block") if markup else ("",)
    for pair in shared:
        for side in sides:
            good = Variant(BASE, _text_of(fns, pair.form, "good" + side), pair.form, "good" + side)
            candidates.append((total(good), {f: score_of(f, good) for f in range(count)}))
    for i in range(len(texts) if not shared else 0):  # with a reference, its answers are the right ones
        shares = {f: (paid.get(f, [None] * len(texts))[i] or 0.0) for f in range(count)}
        value = sum(weights[f] * shares[f] for f in range(count))
        candidates.append((value, shares))
    if not candidates:
        return [], [], False, False
    best_total, best = max(candidates, key=lambda c: c[0])
    matters = format_matters(scored, shared, hacks)
    # Padding (more text of a kind a shaping term counts) is judged against the best right answer whatever else the
    # total pays; the other degenerate completions only where the total tells right from wrong written alike (the
    # same form, block or not): else what it pays them says nothing about answers (a format term alone pays every
    # well-formed text the same).
    informative = any(abs(g) > EPS for g in _same_shape_gaps(fns, shared, total, markup))
    judged = [v.side for v in hacks if (v.side in PADDING or informative) and (v.side != REFERENCE_ALONE or matters)]
    found = total_hacks(
        [v for v in hacks if v.probe == HACKABLE and v.side in judged],
        scored,
        weights,
        best,
        reads=reads,
        fallback={**fallback, **{f: 0.0 for f, fn in fns.items() if fn.state == NOT_ITS_TASK}},
        format_matters=matters,
    )
    # a padding variant is blamed on a term that pays it more than the right answer, not on one that pays it as much
    found = [
        h
        for h in found
        if h.total >= best_total - EPS and h.payers and (h.variant not in PADDING or max(h.gains) > EPS)
    ]
    gaps = []
    for pair in shared:
        good = Variant(BASE, _text_of(fns, pair.form, "good"), pair.form, "good")
        bad = Variant(BASE, _text_of(fns, pair.form, "bad"), pair.form, "bad")
        gaps.append(total(good) - total(bad))
    told_any = any(abs(g) > EPS for g in gaps)
    inverted = told_any and all(g <= EPS for g in gaps)
    if inverted:  # it pays wrong answers more: what it pays a degenerate completion is not the question
        return [], [], True, told_any
    return found, judged, False, told_any


def _same_shape_gaps(
    fns: Mapping[int, FunctionProbe], shared: Sequence[Pair], total: Callable[[Variant], float], block: bool
) -> list[float]:
    gaps = []
    for pair in shared:
        for side in ("", "-block") if block else ("",):
            good = Variant(BASE, _text_of(fns, pair.form, "good" + side), pair.form, "good" + side)
            bad = Variant(BASE, _text_of(fns, pair.form, "bad" + side), pair.form, "bad" + side)
            gaps.append(total(good) - total(bad))
    return gaps


def _text_of(fns: Mapping[int, FunctionProbe], form: str, side: str) -> str:
    for fn in fns.values():
        for v in fn.scores:
            if v.probe == BASE and v.form == form and v.side == side:
                return v.text
    return ""


__all__ = ["weighted_totals"]
