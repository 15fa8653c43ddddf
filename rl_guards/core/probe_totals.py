"""The run-level side of a probe (pure): every function's scores of one row's variants combined into the weighted
totals that decide whether a degenerate completion is earnable (:func:`rl_guards.core.probes.assess`'s ``totals``,
``best_total``, ``strict`` and ``format_matters``). Shared by every driver of the probes (the offline audit and
the in-run guard)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rl_guards.core.probes import EPS, HACKABLE, HACKS, REFERENCE_ALONE, Pair, ProbeFinding, Variant


def weighted_totals(
    variants: Sequence[Variant],
    scores: Mapping[int, Sequence[float | None]],
    weights: Sequence[float],
    fallback: Mapping[int, float] | None = None,
) -> dict[str, float]:
    """Each variant's weighted total: ``scores[f][j]`` for the functions that scored it (None counts 0); a function
    not in ``scores`` (not probed, or it raised) counts ``fallback[f]`` (what it paid the worst real completion)."""
    out = {}
    for j, v in enumerate(variants):
        total = 0.0
        for f, w in enumerate(weights):
            value = scores[f][j] if f in scores else (fallback or {}).get(f, 0.0)
            total += w * (value or 0.0)
        out[v.label] = total
    return out


def best_total(real_best: float, pairs: Sequence[Pair], totals: Mapping[str, float]) -> float:
    """The best total a real or reference completion reached (a reference pair's right answer counts)."""
    best = real_best
    for pair in pairs:
        if pair.name.startswith("reference"):
            best = max(best, totals.get(f"{pair.name}:good@0", best))
    return best


def informative(pairs: Sequence[Pair], totals: Mapping[str, float]) -> bool:
    """Whether the run's total pays a right answer more than a wrong one on this row (else ``assess(strict=True)``:
    "as much as the best" says nothing where nobody is right yet)."""
    return any(totals.get(f"{p.name}:good@0", 0.0) > totals.get(f"{p.name}:bad@0", 0.0) + EPS for p in pairs)


def format_matters(variants: Sequence[Variant], scores: Mapping[int, Sequence[float | None]]) -> bool:
    """Some function pays the bare reference answer less than the same answer after a think block."""
    labels = [v.label for v in variants]
    if REFERENCE_ALONE not in labels or "reference:good@0" not in labels:
        return False
    alone, formed = labels.index(REFERENCE_ALONE), labels.index("reference:good@0")
    return any((s[alone] or 0.0) < (s[formed] or 0.0) for s in scores.values())


def total_hacks(
    variants: Sequence[Variant], totals: Mapping[str, float], best: float, worst: float, *, format_matters: bool
) -> dict[str, ProbeFinding | None]:
    """Per degenerate variant judged on this row: a finding when the weighted total pays it as much as the best
    completion (None: judged, not paid); nothing is judged when the totals do not tell completions apart."""
    if best <= worst + EPS:
        return {}
    out: dict[str, ProbeFinding | None] = {}
    for v in variants:
        if v.probe != HACKABLE or v.label not in HACKS or (v.label == REFERENCE_ALONE and not format_matters):
            continue
        paid = totals[v.label] >= best - EPS
        out[v.label] = (
            ProbeFinding(HACKABLE, f"the weighted total pays the degenerate completion '{v.label}' "
                         f"{totals[v.label]:g}, as much as the best answer ({best:g})", variant=v.label)
            if paid
            else None
        )
    return out


__all__ = ["best_total", "format_matters", "informative", "total_hacks", "weighted_totals"]
