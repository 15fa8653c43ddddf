"""What a function's scores of a row's variants say (pure): one function at a time, and the weighted total.

Told apart: a pair's right answer scores above its wrong one (``gap``). Each rule asks whether the score moves the
way the one change its variants make predicts:

- **prefix** (``reads_prefix``): the answer alone is told apart, and so are the answers after up to ``k`` characters
  of neutral text, but not from some length on, for every longer one (a ``text[:N]``, the first line, a pattern
  anchored at the start); and the answers are still told apart with text *after* them (else the function compares
  the whole text, as an exact match does: not a read of a prefix).
- **suffix** (``reads_suffix``): told apart with a little text after the answer, not with more, for every longer one;
  and text before the answer changes nothing (``text[-N:]``).
- **thinking** (``reads_thinking``): the same wrong answer scores at least half the pair's gap higher after a block
  stating the right answer than after one stating another wrong answer of the same length (a length term scores
  both alike); for a function that tells no answer apart, a block stating the right answer with nothing after it
  against one stating a wrong one (a judge handed the thinking alone).
- **hackable**, for a function that reads the answer: a degenerate completion scored at least its best right answer
  and above its worst wrong one. A function that does not read the answer (a format, length or shaping term) is
  judged by the weighted total only (:func:`total_hacks`): whether padding beats a right answer depends on the
  other terms' weights, never on one term alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rl_guards.core.probing.variants import (
    BASE,
    FALLBACK,
    HACKABLE,
    PREFIX,
    REFERENCE_ALONE,
    SUFFIX,
    TAIL,
    THINKING,
    Pair,
    Variant,
)

TOLD = 0.5  # a pair counts as told apart at a length when its gap keeps at least this share of the uncut gap
EPS = 1e-9

Scores = Mapping[Variant, "float | None"]


@dataclass(frozen=True)
class Finding:
    """What one rule says about one function on one row."""

    probe: str  # PREFIX, SUFFIX, THINKING, FALLBACK or HACKABLE
    detail: str  # for the message: the scores, the cut, the variant
    variant: str = ""  # HACKABLE: the degenerate variant's label
    form: str = ""  # the pair's form that showed it
    cut: tuple[int, int] = (0, 0)  # PREFIX / SUFFIX: (last length told apart, first not), in ``k``
    gap: float = 0.0  # the pair's gap where the answer is read (a narrowed cut keeps half of it)
    reach: int = 0  # PREFIX / SUFFIX: characters of text a reader that still told the answers apart has read

    @property
    def key(self) -> str:
        """The tally key: the probe, or a hack variant's label."""
        return self.variant if self.probe == HACKABLE else self.probe


@dataclass(frozen=True)
class Assessment:
    """One function on one row: its findings, what could be judged (the quorum's denominators), what it reads."""

    findings: tuple[Finding, ...] = ()
    tried: frozenset[str] = frozenset()  # PREFIX / SUFFIX / THINKING where judged, and hack labels judged
    reads_answer: bool = False
    told: tuple[str, ...] = ()  # the forms whose answers it tells apart (learned: later probes keep to them)
    best: float | None = None  # its best right-answer score (the totals' attribution)


@dataclass
class _PairScores:
    """One pair's scores, looked up by (probe, side, k)."""

    pair: Pair
    by: dict[tuple[str, str, int], float | None] = field(default_factory=dict)

    def get(self, probe: str, side: str, k: int = 0) -> float | None:
        return self.by.get((probe, side, k))

    def gap(self, probe: str, k: int = 0, suffix: str = "") -> float | None:
        good, bad = self.get(probe, "good" + suffix, k), self.get(probe, "bad" + suffix, k)
        return None if good is None or bad is None else good - bad

    def lengths(self, probe: str) -> list[int]:
        found = {k for (p, side, k) in self.by if p == probe and side == "good"}
        return sorted(k for k in found if self.gap(probe, k) is not None)


def _by_pair(pairs: Sequence[Pair], scores: Scores) -> dict[str, _PairScores]:
    out = {p.form: _PairScores(p) for p in pairs}
    for v, s in scores.items():
        if v.form in out:
            out[v.form].by[(v.probe, v.side, v.k)] = s
    return out


def told(gap: float | None, reference: float) -> bool:
    """A gap that keeps at least ``TOLD`` of ``reference`` (same sign)."""
    return gap is not None and abs(reference) > EPS and gap * (1 if reference > 0 else -1) >= TOLD * abs(reference)


def monotone_cut(lengths: Sequence[int], told_at: Mapping[int, bool]) -> tuple[int, int] | None:
    """(last length told apart, first not) when the answer is told apart below some length and at none from it on;
    None when it is told apart everywhere, or the pattern is not a cut (told again further on: noise)."""
    blind = [k for k in lengths if not told_at[k]]
    if not blind or any(told_at[k] for k in lengths if k > blind[0]):
        return None
    return max([0, *(k for k in lengths if k < blind[0])]), blind[0]


def _prefix(ps: _PairScores, shape_block: bool) -> Finding | None:
    g0 = ps.gap(BASE, 0)
    if g0 is None or abs(g0) <= EPS:
        return None
    tail = ps.gap(TAIL) if shape_block else ps.gap(SUFFIX, max(ps.lengths(SUFFIX), default=0))
    if not told(tail, g0):
        return None  # text after the answer changes the verdict too: it compares the whole text
    lengths = ps.lengths(PREFIX)
    cut = monotone_cut(lengths, {k: told(ps.gap(PREFIX, k), g0) for k in lengths}) if lengths else None
    if cut is None:
        return None
    good, bad = ps.get(BASE, "good"), ps.get(BASE, "bad")
    return Finding(PREFIX, prefix_detail(good or 0.0, bad or 0.0, *cut), form=ps.pair.form, cut=cut, gap=g0)


def prefix_detail(good: float, bad: float, seen: int, blind: int) -> str:
    """The message of a prefix finding (``seen``/``blind``: characters of text before the answer)."""
    return (
        f"tells the right answer ({good:g}) from a wrong one ({bad:g}) when the answer comes first, but not once "
        f"{blind} characters come before it: it reads only the first {seen}-{blind} characters (a text[:N] before "
        "scoring, only the first line or paragraph, or a pattern anchored at the start)"
    )


def suffix_detail(good: float, bad: float, seen: int, blind: int) -> str:
    """The message of a suffix finding (``seen``/``blind``: characters of text after the answer)."""
    return (
        f"tells the right answer ({good:g}) from a wrong one ({bad:g}) with {seen} characters after it, but not with "
        f"{blind}: it reads only the end of the text (a text[-N:] before scoring)"
    )


def _suffix(ps: _PairScores, shape_block: bool) -> Finding | None:
    suffix = "-block" if shape_block else ""
    g0 = ps.gap(BASE, 0, suffix)
    if g0 is None or abs(g0) <= EPS:
        return None
    before = ps.lengths(PREFIX)
    if any(not told(ps.gap(PREFIX, k), g0) for k in before):
        return None  # text before the answer matters too: not a read of the end only
    lengths = ps.lengths(SUFFIX)
    at = {k: told(ps.gap(SUFFIX, k), g0) for k in lengths}
    if not lengths or not at[lengths[0]]:
        return None  # blind at once: a whole-text match, not a slice of the end
    cut = monotone_cut(lengths, at)
    if cut is None:
        return None
    good, bad = ps.get(BASE, "good" + suffix), ps.get(BASE, "bad" + suffix)
    return Finding(SUFFIX, suffix_detail(good or 0.0, bad or 0.0, *cut), form=ps.pair.form, cut=cut, gap=g0)


def _thinking(ps: _PairScores) -> Finding | None:
    """A read of the thinking: the same wrong answer paid more after a block stating the right one (``THINKING``);
    failing that, only when the answer after the block is in a form the function does not read (``FALLBACK``: it
    falls back to the thinking where the answer has none)."""
    g0 = ps.gap(BASE, 0, "-block")
    if g0 is None or abs(g0) <= EPS:  # it never reads an answer after a block (a judge of the thinking alone)
        g0 = ps.gap(BASE, 0)
    if g0 is None or abs(g0) <= EPS:
        return None
    cases = (  # the same form after the block; another form it reads, but ranks below the block's; one it does not
        (THINKING, "", ""),
        (FALLBACK, "-cross", " (written in another form it reads, which it ranks lower)"),
        (FALLBACK, "-fallback", " (written in a form it does not read)"),
    )
    for probe, suffix, how in cases:
        leak, control = ps.get(THINKING, "leak" + suffix), ps.get(THINKING, "control" + suffix)
        if leak is None or control is None or not told(leak - control, g0):
            continue
        what = (
            "it reads the thinking, not only the answer"
            if probe == THINKING
            else "when the answer after the block is not in the form it looks for first, it grades the thinking "
            "instead (a fallback: the thinking is scored only for completions without an answer in that form)"
        )
        return Finding(
            probe,
            f"scores the same wrong answer{how} {leak:g} after a think block that states the right one and "
            f"{control:g} after one that states another wrong answer of the same length ({ps.pair.form} form in the "
            f"block; right answer {ps.get(BASE, 'good-block'):g}, wrong {ps.get(BASE, 'bad-block'):g}): {what}",
            form=ps.pair.form,
            gap=g0,
        )
    return None


def _thinking_alone(ps: _PairScores) -> Finding | None:
    right, wrong = ps.get(THINKING, "leak-alone"), ps.get(THINKING, "control-alone")
    if right is None or wrong is None or right - wrong <= max(EPS, TOLD * max(abs(right), abs(wrong))):
        return None
    return Finding(
        THINKING,
        f"scores a think block that states the right answer {right:g} and one that states a wrong one {wrong:g} "
        f"({ps.pair.form} form, no answer after either), but the answers themselves alike: it grades the thinking, "
        "not the answer",
        form=ps.pair.form,
    )


def reads_answer(pairs: Sequence[Pair], scores: Scores) -> bool:
    """The function follows the answer: it tells a reference pair apart (any form, with or without a block), or
    with no reference, the real best answer from the same with its digits moved."""
    by = _by_pair(pairs, scores)
    references = [ps for ps in by.values() if not ps.pair.real]
    if references:
        return any(abs(ps.gap(BASE, 0, s) or 0.0) > EPS for ps in references for s in ("", "-block"))
    for ps in by.values():
        good, swap = ps.get(BASE, "good-block") or ps.get(BASE, "good"), ps.get(BASE, "swap")
        if good is not None and swap is not None:
            return abs(good - swap) > EPS
    return False


def told_forms(pairs: Sequence[Pair], scores: Scores) -> list[str]:
    """The forms whose right and wrong answers the function tells apart (with or without a block)."""
    by = _by_pair(pairs, scores)
    return [f for f, ps in by.items() if any(abs(ps.gap(BASE, 0, s) or 0.0) > EPS for s in ("", "-block"))]


def assess(
    pairs: Sequence[Pair],
    scores: Scores,
    *,
    block: bool,
    real_best: float | None = None,
    real_worst: float | None = None,
    check_prefix: bool = True,
    check_thinking: bool = True,
) -> Assessment:
    """One function's findings on one row from its scores of the row's variants (absent: not scored)."""
    by = _by_pair(pairs, scores)
    answers = reads_answer(pairs, scores)
    forms = told_forms(pairs, scores)
    findings: list[Finding] = []
    tried: set[str] = set()

    def add(finding: Finding | None) -> None:
        if finding is not None and not any(f.probe == finding.probe for f in findings):
            findings.append(finding)

    for form, ps in by.items():
        if ps.pair.real and not answers:
            continue  # a format reward tells a real pair apart by its format
        if form in forms:
            if check_prefix and (ps.lengths(PREFIX) or ps.lengths(SUFFIX)):
                tried.update((PREFIX, SUFFIX))
                add(_prefix(ps, block))
                add(_suffix(ps, block))
            if check_thinking and ps.get(THINKING, "leak") is not None:
                tried.add(THINKING)
                if ps.get(THINKING, "leak-fallback") is not None:
                    tried.add(FALLBACK)
                found = _thinking(ps)
                if found is not None and not any(f.probe in (THINKING, FALLBACK) for f in findings):
                    findings.append(found)
        elif check_thinking and ps.get(THINKING, "leak-alone") is not None:
            tried.add(THINKING)
            add(_thinking_alone(ps))
    if any(f.probe == THINKING for f in findings):
        # told apart alone but never after a block, and it reads what the block says: the "prefix" it reads is the
        # thinking (a judge handed the thinking alone), not a cut of the text
        blind_after_block = {f for f, ps in by.items() if abs(ps.gap(BASE, 0, "-block") or 0.0) <= EPS}
        findings = [f for f in findings if not (f.probe == PREFIX and f.form in blind_after_block)]
    best, worst = real_best, real_worst
    for ps in by.values():
        if ps.pair.real:
            continue
        for side in ("", "-block"):
            good, bad = ps.get(BASE, "good" + side), ps.get(BASE, "bad" + side)
            if good is not None and bad is not None and abs(good - bad) > EPS:
                best = good if best is None else max(best, good)
                worst = bad if worst is None else min(worst, bad)
    if answers and best is not None and worst is not None and best - worst > EPS:
        # with a reference the best is a known right answer: a degenerate completion paid as much is hackable; with
        # none, nobody in the group may be right yet: it must be paid strictly more
        margin = -EPS if any(not ps.pair.real for ps in by.values()) else EPS
        for v, score in scores.items():
            if v.probe != HACKABLE or score is None or v.side == REFERENCE_ALONE:
                continue
            tried.add(v.side)
            if score >= best + margin and score > worst + EPS:
                add_hack = Finding(
                    HACKABLE,
                    f"pays the degenerate completion '{v.side}' {score:g}, as much as its best right answer "
                    f"({best:g}; a wrong one {worst:g}): {show(v.text)}",
                    variant=v.side,
                )
                if not any(f.variant == v.side for f in findings):
                    findings.append(add_hack)
    return Assessment(tuple(findings), frozenset(tried), answers, tuple(forms), best)


@dataclass(frozen=True)
class TotalHack:
    """A degenerate completion the weighted total pays as much as the best right answer, and who pays it."""

    variant: str
    total: float
    best_total: float
    # the functions paying it at least their share of the best answer (a term not reading the answer: strictly
    # more), and by how much (weighted)
    payers: tuple[int, ...]
    gains: tuple[float, ...]


def total_hacks(
    hacks: Sequence[Variant],
    scores: Mapping[int, Scores],
    weights: Sequence[float],
    best: Mapping[int, float],
    *,
    reads: Mapping[int, bool],
    fallback: Mapping[int, float] | None = None,
    format_matters: bool = False,
) -> list[TotalHack]:
    """The degenerate completions the weighted total pays at least as much as its best right answer.

    ``best[f]``: function ``f``'s score of the completion whose total is best (its share of the best total);
    ``fallback[f]``: the score counted for a function that did not score the variants (not probed, or it raised);
    ``format_matters``: some function pays the bare reference answer less than the same answer after a block (only
    then is the bare answer judged: a run that pays no format does not ask for the block).
    """
    best_total = sum(w * best.get(f, 0.0) for f, w in enumerate(weights))
    out = []
    for v in hacks:
        if v.side == REFERENCE_ALONE and not format_matters:
            continue
        values = []
        for f in range(len(weights)):
            score = scores[f].get(v) if f in scores else (fallback or {}).get(f, 0.0)
            values.append(score or 0.0)
        total = sum(w * s for w, s in zip(weights, values, strict=True))
        if total < best_total - EPS:
            continue
        payers, gains = [], []
        for f, w in enumerate(weights):
            if f not in scores or w == 0:
                continue
            gain = w * (values[f] - best.get(f, 0.0))
            if gain > EPS or (reads.get(f, False) and gain >= -EPS):
                payers.append(f)
                gains.append(gain)
        out.append(TotalHack(v.side, total, best_total, tuple(payers), tuple(gains)))
    return out


def format_matters(scores: Mapping[int, Scores], pairs: Sequence[Pair], hacks: Sequence[Variant]) -> bool:
    """Some function pays the bare reference answer less than the same answer, in the same form, after a think
    block (only then does a completion without the block cost the run anything)."""
    alone = next((v for v in hacks if v.side == REFERENCE_ALONE), None)
    if alone is None:
        return False
    for fn_scores in scores.values():
        for v, s in fn_scores.items():
            if v.probe != BASE or v.side != "good-block" or s is None:
                continue
            if split_answer(v.text) == alone.text.strip() and (fn_scores.get(alone) or 0.0) < s:
                return True
    return False


def split_answer(text: str) -> str:
    """The text after the last think block's close (the whole text when there is none)."""
    return text.rsplit("</think>", 1)[-1].strip() if "</think>" in text else text.strip()


def show(text: str, chars: int = 120) -> str:
    return repr(text if len(text) <= chars else text[:chars] + "…")


__all__ = [
    "EPS",
    "TOLD",
    "Assessment",
    "Finding",
    "TotalHack",
    "assess",
    "format_matters",
    "monotone_cut",
    "prefix_detail",
    "reads_answer",
    "show",
    "suffix_detail",
    "told",
    "told_forms",
    "total_hacks",
]
