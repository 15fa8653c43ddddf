"""The one probe procedure (pure): a row and the run's reward functions in, each function's verdict on the row out.

Every driver (the in-run guard, the offline audit, the Tinker and verl drivers) builds a :class:`RowView` per row and
a scorer that calls one function the way its framework does; :func:`run_rows` runs every row's procedure
(:func:`probe_row`) in lockstep, so that each pass makes one call per function over all the rows (a judge that costs
per call is called a few times per probe, not once per text), and a text asked for twice is scored once.

Per row, per function::

    pass A   the pairs' answers as they are (every form), the degenerate completions
    pass B   for the forms it tells apart: text before / after the answer, what the think block states; the answers
             of pass A again (a score that changes between calls is noise, or depends on what else is in the call)
    (unstable) the pair alone, twice: the same twice -> it depends on its batch (a group-relative term): every
             variant is scored again in a call of its own beside the group's real completions; else noise: not judged
    pass C   a cut found: narrowed between its two lengths, then reproduced with other neutral text (else dropped)

then :func:`~rl_guards.core.probing.rules.assess` per function and :func:`~rl_guards.core.probing.rules.total_hacks`
for the weighted total.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rl_guards.core.probing.forms import FORMS, final_answer, same_length_wrong, wrong_answers
from rl_guards.core.probing.rules import (
    EPS,
    Assessment,
    Finding,
    TotalHack,
    assess,
    format_matters,
    prefix_detail,
    suffix_detail,
    told,
    total_hacks,
)
from rl_guards.core.probing.variants import (
    BASE,
    HACKABLE,
    PADDING,
    PREFIX,
    REFERENCE_ALONE,
    SUFFIX,
    Pair,
    RowText,
    Shape,
    Variant,
    bases,
    cut_variants,
    cuts,
    hack_variants,
    narrow_variants,
    reference_pairs,
    split,
    thinking_variants,
)

SCORED = "scored"
NOT_ITS_TASK = "not_its_task"  # None for every variant: the function is another task's
RAISED = "raised"
STALLED = "stalled"
UNSTABLE = "unstable"  # the same text scored differently on two calls of its own: noise, not judged
CUT_FORMS = 2  # forms probed for cuts (one a function reads shows a slice as well as all of them)
GRID = 6  # lengths tried per narrowing round
NARROW_ROUNDS = 5  # narrowing rounds at most (a round divides the gap by GRID + 1)
NARROW_TO = 4  # characters: a cut this narrow is narrowed no further


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
class RowView:
    """What a probe needs of one row, framework-free.

    ``texts``: the group's real completions (the row's own first); ``scores[f]``: function ``f``'s scores of them
    (what the run paid); ``others``: other rows' references (the wrong answers come from them); ``longest``: the
    longest completion of the batch in characters (cuts beyond it cannot matter in this run).
    """

    key: Hashable
    group: Hashable
    shape: Shape = field(default_factory=Shape)
    reference: str | None = None
    others: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()
    scores: Mapping[int, Sequence[float | None]] = field(default_factory=dict)
    prompt_text: str = ""
    longest: int = 0
    forms: tuple[str, ...] = tuple(FORMS)
    task: str = ""


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


@dataclass(frozen=True)
class FunctionResult:
    """One function on one row."""

    state: str  # SCORED, NOT_ITS_TASK, RAISED, STALLED or UNSTABLE
    assessment: Assessment = field(default_factory=Assessment)
    detail: str = ""  # RAISED / STALLED: what happened, on which text
    context: bool = False  # its scores depend on a call's other texts: scored beside the group's completions


@dataclass(frozen=True)
class RowResult:
    """Every function's verdict on one row, the weighted total's, and the texts scored."""

    view: RowView
    functions: Mapping[int, FunctionResult]
    totals: tuple[TotalHack, ...] = ()
    total_inverted: bool = False  # the weighted total pays a wrong answer more in every form it tells apart
    total_told: bool = False  # ... and tells some form apart at all
    total_judged: tuple[str, ...] = ()  # the degenerate completions judged for the total (it tells answers apart)
    texts: int = 0


@dataclass
class _Fn:
    plan: FunctionPlan
    pairs: list[Pair]
    scores: dict[Variant, float | None] = field(default_factory=dict)
    state: str = SCORED
    detail: str = ""
    context: bool = False


def _answers(view: RowView) -> tuple[str | None, str | None, str | None]:
    """(right, wrong, control): the reference's final answer, another row's, and a second wrong one as long as the
    right one where there is one (the thinking probe's control)."""
    right = final_answer(view.reference)
    if right is None:
        return None, None, None
    finals = [a for a in (final_answer(o) for o in view.others) if a is not None]
    wrong = wrong_answers(right, finals, 2)
    if not wrong:
        return right, None, None
    control = same_length_wrong(right, wrong[:1]) or (wrong[1] if len(wrong) > 1 else None)
    return right, wrong[0], control


def _real_pair(view: RowView, fn: int, shape: Shape) -> Pair | None:
    """With no reference: the group's best and worst real answers by this function's own scores."""
    scored = [(s, i) for i, s in enumerate(view.scores.get(fn, ())) if s is not None and i < len(view.texts)]
    if len(scored) < 2:
        return None
    (best, b), (worst, w) = max(scored), min(scored)
    if best - worst <= EPS:
        return None
    good = split(view.texts[b], shape.markup, shape.prompt_opened)[1]
    bad = split(view.texts[w], shape.markup, shape.prompt_opened)[1]
    digits = "0123456789"
    swap = "".join(digits[(digits.index(c) + 1) % 10] if c in digits else c for c in good)
    return Pair("real", good, bad, swap=swap if swap != good else "")


def _ordered(forms: Sequence[str], preferred: str) -> list[str]:
    return sorted(forms, key=lambda f: (f != preferred, list(FORMS).index(f) if f in FORMS else len(FORMS)))


def probe_row(
    view: RowView, plans: Sequence[FunctionPlan], *, fallback: Mapping[int, float] | None = None, weights_of: int = 0
) -> Generator[list[Call], list[Reply], RowResult]:
    """The procedure on one row (see the module doc): yields the calls of each pass, receives their replies (one
    per call, in order), returns the row's result. ``fallback[f]``: what a function that is not probed (or fails)
    counts in the weighted total; ``weights_of``: the run's number of functions (default: the plans')."""
    shape = view.shape
    right, wrong, control = _answers(view)
    union = sorted({f for p in plans for f in (p.forms or view.forms)} | {"bare"}, key=list(FORMS).index)
    shared = reference_pairs(right, wrong, control or "", union) if right and wrong else []
    best_text = view.texts[0] if view.texts else None
    row_form = next((p.form for p in shared if best_text and p.good in best_text), "bare")
    thinking, _ = split(best_text, shape.markup, shape.prompt_opened) if best_text else (None, "")
    hacks = hack_variants(
        RowText(
            right,
            wrong,
            form=row_form,
            prompt_text=view.prompt_text,
            thinking=thinking,
            real_text=best_text,
            real_has_block=thinking is not None,
            longest=view.longest,
        ),
        shape,
    )
    fns: dict[int, _Fn] = {}
    for plan in plans:
        pairs = list(shared)
        if not pairs:
            real = _real_pair(view, plan.index, shape)
            pairs = [real] if real is not None else []
        fns[plan.index] = _Fn(plan, pairs)
    pass_a = {f: [v for p in fn.pairs for v in bases(p, shape)] + hacks for f, fn in fns.items()}
    yield from _score(fns, pass_a, view)
    for fn in fns.values():
        if fn.state == SCORED and all(s is None for s in fn.scores.values()):
            fn.state = NOT_ITS_TASK

    # pass B: what the first pass says each function can be judged on, and its answers again (stability)
    lengths = cuts(view.longest)
    pass_b: dict[int, list[Variant]] = {}
    for f, fn in fns.items():
        if fn.state != SCORED:
            continue
        by_form = {p.form: p for p in fn.pairs}
        gaps = {p.form: _base_gap(fn, p) for p in fn.pairs}
        told_forms = [form for form in _ordered(list(by_form), row_form) if abs(gaps[form]) > EPS]
        wanted: list[Variant] = []
        blind = [p for p in fn.pairs if not p.real and p.form not in told_forms and _scored(fn, p)]
        for form in told_forms[:CUT_FORMS] if fn.plan.check_prefix else ():
            wanted += cut_variants(by_form[form], shape, lengths)
        for form in told_forms if fn.plan.check_thinking else ():  # which form it finds in a block is its own
            other = next((by_form[f].bad for f in told_forms if f != form), None)
            wanted += thinking_variants(by_form[form], shape, cross=other, unread=blind[0].bad if blind else None)
        if fn.plan.check_thinking and blind:
            wanted += thinking_variants(blind[0], shape, alone=True)
        for form in told_forms:  # the answers again: a score that moves between calls is noise or its batch's
            wanted += [v for v in bases(by_form[form], shape) if v.side.startswith(("good", "bad"))]
        pass_b[f] = wanted
    first = {f: dict(fns[f].scores) for f in pass_b}
    for fn in fns.values():  # pass B asks for the answers again: scored afresh, not read from pass A
        for v in pass_b.get(fn.plan.index, []):
            if v.probe == BASE:
                fn.scores.pop(v, None)
    yield from _score(fns, pass_b, view)

    # a function whose answers scored differently on the two passes: its batch or noise?
    unstable = [f for f in pass_b if fns[f].state == SCORED and _changed(first[f], fns[f].scores)]
    if unstable:
        checks = {f: _stability_texts(fns[f]) for f in unstable}
        replies = yield [Call(f, texts, alone=True) for f in unstable for texts in (checks[f], checks[f])]
        for i, f in enumerate(unstable):
            a, b = replies[2 * i], replies[2 * i + 1]
            if isinstance(a, Failed) or isinstance(b, Failed) or list(a) != list(b):
                fns[f].state, fns[f].detail = UNSTABLE, "scored the same text differently on two calls"
            else:
                fns[f].context = True
        again = {f: list(first[f]) + pass_b[f] for f in unstable if fns[f].context}
        for f in again:
            fns[f].scores.clear()
        yield from _score(fns, again, view, context=True)

    results: dict[int, FunctionResult] = {}
    for f, fn in fns.items():
        if fn.state != SCORED:
            results[f] = FunctionResult(fn.state, detail=fn.detail, context=fn.context)
            continue
        real = [s for s in view.scores.get(f, ()) if s is not None]
        found = assess(
            fn.pairs,
            fn.scores,
            block=shape.block,
            real_best=max(real) if real and not shared else None,  # with a reference, its answers are the measure
            real_worst=min(real) if real and not shared else None,
            check_prefix=fn.plan.check_prefix,
            check_thinking=fn.plan.check_thinking,
        )
        results[f] = FunctionResult(SCORED, found, context=fn.context)

    # pass C: narrow each cut, and keep it only when other neutral text shows it too
    for probe in (PREFIX, SUFFIX):
        cut_of = {
            f: finding
            for f, r in results.items()
            for finding in r.assessment.findings
            if finding.probe == probe and finding.cut[1] - finding.cut[0] > 1
        }
        if not cut_of:
            continue
        narrowed = yield from _narrow(fns, cut_of, probe, view, shape)
        for f, finding in narrowed.items():
            old = results[f].assessment
            kept = tuple(x for x in old.findings if x.probe != probe) + ((finding,) if finding is not None else ())
            results[f] = replace(results[f], assessment=replace(old, findings=kept))

    totals, judged, inverted, told_any = _totals(
        fns, results, view, shared, hacks, fallback or {}, weights_of or len(plans)
    )
    texts = sum(len(fn.scores) for fn in fns.values())
    return RowResult(view, results, tuple(totals), inverted, told_any, tuple(judged), texts)


def _scored(fn: _Fn, pair: Pair) -> bool:
    return any(fn.scores.get(v) is not None for v in fn.scores if v.form == pair.form and v.probe == BASE)


def _base_gap(fn: _Fn, pair: Pair) -> float:
    """The pair's largest gap as it is (alone or after a one-line block)."""
    get = {v.side: s for v, s in fn.scores.items() if v.probe == BASE and v.form == pair.form}
    gaps = []
    for side in ("", "-block"):
        good, bad = get.get("good" + side), get.get("bad" + side)
        if good is not None and bad is not None:
            gaps.append(good - bad)
    return max(gaps, key=abs, default=0.0)


def _changed(before: Mapping[Variant, float | None], after: Mapping[Variant, float | None]) -> bool:
    return any(v.probe == BASE and v in after and after[v] != before.get(v) for v in after)


def _stability_texts(fn: _Fn) -> tuple[str, ...]:
    """Every answer as it is: scored twice in calls of their own, a noisy function disagrees with itself somewhere
    (for a coin flip per text, all agree with probability 2^-n), a batch-dependent one never."""
    return tuple(dict.fromkeys(v.text for v in fn.scores if v.probe == BASE))


def _score(
    fns: Mapping[int, _Fn], wanted: Mapping[int, Sequence[Variant]], view: RowView, *, context: bool = False
) -> Generator[list[Call], list[Reply], None]:
    """Ask for the texts of ``wanted`` not scored yet (one call per function; with ``context`` one call per text,
    beside the group's real completions) and record the replies; a failed call ends the function's probe."""
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
                calls.append(Call(f, (v.text, *view.texts), alone=True))
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


def _narrow(
    fns: Mapping[int, _Fn], found: Mapping[int, Finding], probe: str, view: RowView, shape: Shape
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
        yield from _score(fns, asks, view)
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


def _base_scores(fn: _Fn, pair: Pair, probe: str, shape: Shape) -> tuple[float, float]:
    side = "-block" if probe == SUFFIX and shape.block else ""
    get = {v.side: s for v, s in fn.scores.items() if v.probe == BASE and v.form == pair.form}
    return get.get("good" + side) or 0.0, get.get("bad" + side) or 0.0


def _chars(pair: Pair, shape: Shape, probe: str, k: int) -> int:
    """Characters of text before (PREFIX) or after (SUFFIX) the answer in the variant with ``k`` of neutral text."""
    if k <= 0:
        return 0
    variant = narrow_variants(pair, shape, probe, [k], "a")[0]
    return len(variant.text) - len(pair.good) if probe == PREFIX else k + 2


def _totals(
    fns: Mapping[int, _Fn],
    results: Mapping[int, FunctionResult],
    view: RowView,
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
    worst: list[float] = []
    sides = ("", "-block") if view.shape.markup is not None else ("",)
    for pair in shared:
        for side in sides:
            good = Variant(BASE, _text_of(fns, pair.form, "good" + side), pair.form, "good" + side)
            bad = Variant(BASE, _text_of(fns, pair.form, "bad" + side), pair.form, "bad" + side)
            candidates.append((total(good), {f: score_of(f, good) for f in range(count)}))
            worst.append(total(bad))
    for i in range(len(view.texts) if not shared else 0):  # with a reference, its answers are the right ones
        shares = {f: (view.scores.get(f, [None] * len(view.texts))[i] or 0.0) for f in range(count)}
        value = sum(weights[f] * shares[f] for f in range(count))
        candidates.append((value, shares))
        worst.append(value)
    if not candidates:
        return [], [], False, False
    best_total, best = max(candidates, key=lambda c: c[0])
    reads = {f: r.assessment.reads_answer for f, r in results.items()}
    matters = format_matters(scored, shared, hacks)
    # Padding (more text of a kind a shaping term counts) is judged against the best right answer whatever else the
    # total pays; the other degenerate completions only where the total tells right from wrong written alike (the
    # same form, block or not): else what it pays them says nothing about answers (a format term alone pays every
    # well-formed text the same).
    informative = any(abs(g) > EPS for g in _same_shape_gaps(fns, shared, total, view.shape.markup is not None))
    judged = [v.side for v in hacks if (v.side in PADDING or informative) and (v.side != REFERENCE_ALONE or matters)]
    found = total_hacks(
        [v for v in hacks if v.probe == HACKABLE and v.side in judged],
        scored,
        weights,
        best,
        -float("inf"),
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
    fns: Mapping[int, _Fn], shared: Sequence[Pair], total: Callable[[Variant], float], block: bool
) -> list[float]:
    gaps = []
    for pair in shared:
        for side in ("", "-block") if block else ("",):
            good = Variant(BASE, _text_of(fns, pair.form, "good" + side), pair.form, "good" + side)
            bad = Variant(BASE, _text_of(fns, pair.form, "bad" + side), pair.form, "bad" + side)
            gaps.append(total(good) - total(bad))
    return gaps


def _text_of(fns: Mapping[int, _Fn], form: str, side: str) -> str:
    for fn in fns.values():
        for v in fn.scores:
            if v.probe == BASE and v.form == form and v.side == side:
                return v.text
    return ""


Scorer = Callable[[int, Sequence[tuple[RowView, str]], bool], Sequence["float | None"]]


class ScoreFailed(Exception):
    """A scorer's call failed: ``state`` RAISED (the function raised) or STALLED (it ran past its deadline)."""

    def __init__(self, state: str, detail: str) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail


def run_rows(
    views: Sequence[RowView],
    plans: Sequence[FunctionPlan],
    score: Scorer,
    *,
    fallback: Mapping[Hashable, Mapping[int, float]] | None = None,
    weights_of: int = 0,
    may_continue: Callable[[list[Call]], bool] | None = None,
) -> list[RowResult | None]:
    """Every row's procedure in lockstep: per pass, one ``score(fn, [(view, text), ...], alone=False)`` call per
    function over all the rows' texts (each text once per row), and one per ``alone`` call. ``may_continue(calls)``
    is asked before each pass (a time budget): False stops the probe there (those rows get None). A merged call that
    fails is retried row by row, so one row's text does not cost the others their verdicts."""
    gens = [probe_row(v, plans, fallback=(fallback or {}).get(v.key), weights_of=weights_of) for v in views]
    results: list[RowResult | None] = [None] * len(views)
    pending: dict[int, list[Call]] = {}
    for i, gen in enumerate(gens):
        try:
            pending[i] = next(gen)
        except StopIteration as done:
            results[i] = done.value
    while pending:
        calls = [c for i in sorted(pending) for c in pending[i]]
        if may_continue is not None and not may_continue(calls):
            for i in pending:
                gens[i].close()
            break
        replies = _dispatch(pending, views, score)
        nxt: dict[int, list[Call]] = {}
        for i in sorted(pending):
            try:
                nxt[i] = gens[i].send(replies[i])
            except StopIteration as done:
                results[i] = done.value
        pending = nxt
    return results


def _dispatch(pending: Mapping[int, list[Call]], views: Sequence[RowView], score: Scorer) -> dict[int, list[Reply]]:
    """The replies to every row's calls: merged per function (each (row, text) once), ``alone`` calls one by one."""
    replies: dict[int, list[Reply | None]] = {i: [None] * len(calls) for i, calls in pending.items()}
    merged: dict[int, list[tuple[int, int]]] = {}
    for i, calls in pending.items():
        for j, call in enumerate(calls):
            if call.alone:
                replies[i][j] = _call(score, call.fn, [(views[i], t) for t in call.texts], True)
            else:
                merged.setdefault(call.fn, []).append((i, j))
    for fn, where in merged.items():
        items: dict[tuple[int, str], int] = {}
        for i, j in where:
            for text in pending[i][j].texts:
                items.setdefault((i, text), len(items))
        reply = _call(score, fn, [(views[i], text) for i, text in items], False)
        if isinstance(reply, Failed) and reply.state == RAISED and len({i for i, _ in where}) > 1:
            for i, j in where:  # one row's text may be the cause: the others keep their verdicts
                replies[i][j] = _call(score, fn, [(views[i], t) for t in pending[i][j].texts], False)
            continue
        for i, j in where:
            replies[i][j] = reply if isinstance(reply, Failed) else [reply[items[(i, t)]] for t in pending[i][j].texts]
    return {i: [r if r is not None else Failed(RAISED, "no reply") for r in rs] for i, rs in replies.items()}


def _call(score: Scorer, fn: int, items: list[tuple[RowView, str]], alone: bool) -> Reply:
    try:
        values = list(score(fn, items, alone))
    except ScoreFailed as failed:
        return Failed(failed.state, failed.detail)
    except Exception as exc:  # the scorer's own conversion failed: the function is left out, never the run
        return Failed(RAISED, f"{type(exc).__name__}: {exc}")
    if len(values) != len(items):
        return Failed(RAISED, f"returned {len(values)} scores for {len(items)} texts")
    return values


__all__ = [
    "NOT_ITS_TASK",
    "RAISED",
    "SCORED",
    "STALLED",
    "UNSTABLE",
    "Call",
    "Failed",
    "FunctionPlan",
    "FunctionResult",
    "RowResult",
    "RowView",
    "ScoreFailed",
    "Scorer",
    "probe_row",
    "run_rows",
]
