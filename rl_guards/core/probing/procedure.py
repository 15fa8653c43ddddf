"""The one probe procedure (pure): a row and the run's reward functions in, each function's verdict on the row out.

Every driver (the in-run guard, the offline audit, the Tinker and verl drivers) builds a :class:`RowView` per row and
a scorer that calls one function the way its framework does; :func:`~rl_guards.core.probing.runner.run_rows` runs
every row's procedure (:func:`probe_row`) in lockstep, so that each pass makes one call per function over all the rows
(a judge that costs per call is called a few times per probe, not once per text), and a text asked for twice is
scored once.

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

from collections.abc import Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rl_guards.core.probing.calls import (
    NOT_ITS_TASK,
    SCORED,
    UNSTABLE,
    Call,
    Failed,
    FunctionPlan,
    FunctionProbe,
    Reply,
    ask,
)
from rl_guards.core.probing.forms import FORMS, final_answer, same_length_wrong, wrong_answers
from rl_guards.core.probing.narrowing import narrow
from rl_guards.core.probing.rules import EPS, Assessment, Finding, TotalHack, assess
from rl_guards.core.probing.totals import weighted_totals
from rl_guards.core.probing.variants import (
    BASE,
    PREFIX,
    SUFFIX,
    Pair,
    RowText,
    Shape,
    Variant,
    bases,
    cut_variants,
    cuts,
    filler,
    hack_variants,
    reference_pairs,
    shaped,
    split,
    thinking_variants,
)

CUT_FORMS = 2  # forms probed for cuts (one a function reads shows a slice as well as all of them)


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
    fns: dict[int, FunctionProbe] = {}
    for plan in plans:
        pairs = list(shared)
        if not pairs:
            real = _real_pair(view, plan.index, shape)
            pairs = [real] if real is not None else []
        fns[plan.index] = FunctionProbe(plan, pairs)
    pass_a = {f: [v for p in fn.pairs for v in bases(p, shape)] + hacks for f, fn in fns.items()}
    yield from ask(fns, pass_a, view.texts)
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
        # every answer again (a few texts): a score that moves between calls is noise, or depends on its batch; a
        # coin-flip scorer agrees with itself on all of them with probability 2^-n
        wanted += [v for p in fn.pairs for v in bases(p, shape) if v.side.startswith(("good", "bad"))]
        pass_b[f] = wanted
    first = {f: dict(fns[f].scores) for f in pass_b}
    for fn in fns.values():  # pass B asks for the answers again: scored afresh, not read from pass A
        for v in pass_b.get(fn.plan.index, []):
            if v.probe == BASE:
                fn.scores.pop(v, None)
    yield from ask(fns, pass_b, view.texts)

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
        yield from ask(fns, again, view.texts, context=True)

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
        narrowed = yield from narrow(fns, cut_of, probe, shape)
        for f, finding in narrowed.items():
            old = results[f].assessment
            kept = tuple(x for x in old.findings if x.probe != probe) + ((finding,) if finding is not None else ())
            results[f] = replace(results[f], assessment=replace(old, findings=kept))

    for f, r in results.items():  # each cut's reach in characters of text (what a run's lengths compare with)
        if any(x.probe in (PREFIX, SUFFIX) for x in r.assessment.findings):
            pairs = {p.form: p for p in fns[f].pairs}
            found = tuple(_reach(x, pairs.get(x.form), shape) for x in r.assessment.findings)
            results[f] = replace(r, assessment=replace(r.assessment, findings=found))

    reads = {f: r.assessment.reads_answer for f, r in results.items()}
    totals, judged, inverted, told_any = weighted_totals(
        fns,
        reads,
        (view.texts, view.scores),
        view.shape.markup is not None,
        shared,
        hacks,
        fallback or {},
        weights_of or len(plans),
    )
    texts = sum(len(fn.scores) for fn in fns.values())
    return RowResult(view, results, tuple(totals), inverted, told_any, tuple(judged), texts)


def _scored(fn: FunctionProbe, pair: Pair) -> bool:
    return any(fn.scores.get(v) is not None for v in fn.scores if v.form == pair.form and v.probe == BASE)


def _base_gap(fn: FunctionProbe, pair: Pair) -> float:
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


def _stability_texts(fn: FunctionProbe) -> tuple[str, ...]:
    """Every answer as it is: scored twice in calls of their own, a noisy function disagrees with itself somewhere
    (for a coin flip per text, all agree with probability 2^-n), a batch-dependent one never."""
    return tuple(dict.fromkeys(v.text for v in fn.scores if v.probe == BASE))


def _reach(finding: Finding, pair: Pair | None, shape: Shape) -> Finding:
    """``finding`` with its reach: a prefix reader read the last text it told apart up to the answer's end (the
    whole of it); a suffix reader read the answer and the text after it."""
    if pair is None or finding.probe not in (PREFIX, SUFFIX):
        return finding
    if finding.probe == PREFIX:
        return replace(finding, reach=len(shaped(shape, filler(finding.cut[0]), pair.good)))
    return replace(finding, reach=len(pair.good) + 2 + finding.cut[0])


def noting_latent_cuts(result: RowResult) -> RowResult:
    """``result`` with each prefix / suffix cut no completion of the run reaches yet (``view.longest``) said so: a
    function that still read the answer with ``seen`` characters before (after) it reads every text of at most that
    length whole, so the cut has changed no score of this run so far; it will once completions grow past it (they
    usually do). Still a finding: the slice is in the code, and a run is cheaper to fix before it matters. A cut's
    ``reach`` is measured in the probe's texts (think block and answer form included), the same characters as
    ``longest``."""
    longest = result.view.longest
    if longest <= 0:
        return result
    note = (f"; no completion of this run is that long yet (the longest: {longest} characters), so no score has "
            "changed so far: it will once completions grow past it")  # fmt: skip
    functions = {}
    for f, fr in result.functions.items():
        found = fr.assessment.findings
        noted = tuple(
            replace(x, detail=x.detail + note) if x.probe in (PREFIX, SUFFIX) and x.reach >= longest else x
            for x in found
        )
        functions[f] = fr if noted == found else replace(fr, assessment=replace(fr.assessment, findings=noted))
    return replace(result, functions=functions)


__all__ = ["CUT_FORMS", "FunctionResult", "RowResult", "RowView", "noting_latent_cuts", "probe_row"]
