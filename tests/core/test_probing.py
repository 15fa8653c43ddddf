"""The one probe procedure (pure): forms, attributable variants, and the verdicts on scoring functions whose flaw is
known, run through the same lockstep runner and tally the in-run guard and the audit use."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import pytest

from rl_guards.core.probing.calls import NOT_ITS_TASK, RAISED, SCORED, UNSTABLE, FunctionPlan
from rl_guards.core.probing.forms import FORMS, contains_answer, final_answer, same_length_wrong, wrong_answers
from rl_guards.core.probing.procedure import RowView, noting_latent_cuts
from rl_guards.core.probing.rules import monotone_cut
from rl_guards.core.probing.runner import ScoreFailed, run_rows
from rl_guards.core.probing.tally import Tally, decode, encode, findings_of, quorum
from rl_guards.core.probing.variants import (
    CANDIDATES,
    FALLBACK,
    FILLERS,
    HACKABLE,
    LONG_THINKING,
    LONGER_TOKEN,
    PREFIX,
    PROMPT_ECHOED,
    REPEATED_LINE,
    STEP_LIST,
    SUFFIX,
    THINKING,
    VARIED,
    RowText,
    Shape,
    filler,
    hack_variants,
    reference_pairs,
    split,
    thinking_variants,
)
from rl_guards.core.think_markup import MARKUPS, THINK

Score = Callable[[str, str], float]  # (text, right answer) -> score


def _answer(text: str) -> str:
    return text.rsplit("</think>", 1)[-1].strip()


def _thinking(text: str) -> str:
    return text.split("</think>")[0] if "</think>" in text else ""


def _has(text: str, answer: str) -> bool:
    return re.search(r"(?<![0-9A-Za-z.])" + re.escape(answer) + r"(?![0-9A-Za-z])", text) is not None


def _boxed(text: str) -> list[str]:
    return re.findall(r"\\boxed\{([^}]*)\}", text)


SCORERS: dict[str, Score] = {
    "final exact": lambda t, r: float(_answer(t) == r),
    "final contains": lambda t, r: float(_has(_answer(t), r)),
    "whole text": lambda t, r: float(_has(t, r)),
    "slice 64": lambda t, r: float(_has(t[:64], r)),
    "slice 20": lambda t, r: float(_has(t[:20], r)),
    "slice 3000": lambda t, r: float(_has(t[:3000], r)),
    "window search": lambda t, r: float(_has(t[:200], r)),
    "last 64": lambda t, r: float(_has(t[-64:], r)),
    "last 300": lambda t, r: float(_has(t[-300:], r)),
    "answer's last 64": lambda t, r: float(_has(_answer(t)[-64:], r)),
    "first line": lambda t, r: float(_has(t.strip().split("\n")[0], r)),
    "first paragraph": lambda t, r: float(_has(t.split("\n\n")[0], r)),
    "last number": lambda t, r: float((re.findall(r"-?\d+", _answer(t)) or [""])[-1] == r),
    "first number of the text": lambda t, r: float((re.findall(r"-?\d+", t) or [""])[0] == r),
    "last line exact": lambda t, r: float(_answer(t).strip().split("\n")[-1].strip() == r),
    "substring": lambda t, r: float(r in _answer(t)),
    "thinking judge": lambda t, r: float(_has(_thinking(t), r)),
    "first boxed of the text": lambda t, r: float((_boxed(t) or [""])[0] == r),
    "last boxed of the answer": lambda t, r: float((_boxed(_answer(t)) or [""])[-1] == r),
    # a boxed grader that falls back to the whole text when the answer has no \boxed{} (TRL's accuracy_reward
    # parses the whole completion this way)
    "boxed, else the thinking's": lambda t, r: float(((_boxed(_answer(t)) or _boxed(t)) or [""])[-1] == r),
    "thinking length bonus": lambda t, r: float(_answer(t) == r) + min(len(_thinking(t)) / 1000, 2.0),
    "capped thinking bonus": lambda t, r: float(_answer(t) == r) + min(len(_thinking(t)) / 1000, 0.2),
    "length": lambda t, r: len(t) / 100,
    "format only": lambda t, r: float(t.lstrip().startswith("<think>")),
}

# (scorer, thinks) -> what one function's own rules find (the audit's verdicts: earnable=False)
EXPECTED: list[tuple[str, bool, set[str]]] = [
    ("final exact", False, set()),  # a whole-answer compare: not a prefix reader
    ("final exact", True, set()),
    ("final contains", False, {CANDIDATES}),  # the answer among others in the answer is paid
    ("final contains", True, {CANDIDATES}),  # ... and it reads the answer after the block only
    ("whole text", True, {THINKING, CANDIDATES}),
    ("slice 64", False, {PREFIX}),
    ("slice 64", True, {PREFIX}),
    ("slice 20", False, {PREFIX}),
    ("slice 20", True, {PREFIX}),
    ("slice 3000", False, {CANDIDATES}),  # completions of at most 2000 characters: the cut cannot matter here
    ("window search", False, {PREFIX, CANDIDATES}),
    ("window search", True, {PREFIX, THINKING, CANDIDATES}),  # its window holds the think block too
    ("first line", False, {PREFIX}),
    ("first line", True, {PREFIX}),  # a first-line reader never reads an answer after a block
    ("first paragraph", False, {PREFIX}),
    ("first paragraph", True, {THINKING}),  # its first paragraph is the think block: it grades the thinking
    ("last 64", False, {SUFFIX, CANDIDATES}),  # an answer followed by its explanation is not read
    ("last 300", False, {SUFFIX, CANDIDATES}),
    ("last 300", True, {SUFFIX, THINKING, CANDIDATES}),
    ("answer's last 64", True, {SUFFIX, CANDIDATES}),
    ("last number", False, set()),
    ("last number", True, set()),
    ("first number of the text", False, set()),
    ("first number of the text", True, {THINKING}),
    ("last line exact", False, set()),  # a whole-answer compare: text after it is a wrong answer
    ("last line exact", True, set()),
    ("substring", True, {CANDIDATES}),  # one degenerate completion per function: the most often paid
    ("thinking judge", True, {THINKING}),  # handed only the thinking
    ("first boxed of the text", True, {THINKING}),
    ("last boxed of the answer", True, set()),
    ("boxed, else the thinking's", True, {FALLBACK}),  # reads the thinking only where the answer has no box
    ("thinking length bonus", True, {LONG_THINKING}),
    ("capped thinking bonus", True, set()),
    ("length", False, set()),  # a shaping term: judged with the total only (below)
    ("format only", True, set()),  # never tells answers apart: not an outcome reward
]


def _views(thinks: bool, *, longest: int = 2000, rows: int = 8, texts: Sequence[str] = ()) -> list[RowView]:
    shape = Shape(thinks=thinks, markup=THINK if thinks else None)
    return [
        RowView(
            key=i,
            group=i // 2,
            shape=shape,
            reference=str(40 + i),
            others=tuple(str(40 + j) for j in range(rows) if j != i),
            texts=tuple(texts),
            prompt_text=f"What is {i} plus forty?",
            longest=longest,
        )
        for i in range(rows)
    ]


def _verdicts(scorers: Sequence[Score], thinks: bool, *, earnable: bool = False, weights: Sequence[float] = (),
              longest: int = 2000) -> tuple[set[tuple[int, str]], list]:  # fmt: skip
    views = _views(thinks, longest=longest)
    reference = {v.key: v.reference for v in views}

    def score(fn: int, items: Sequence[tuple[RowView, str]], alone: bool) -> list[float | None]:
        return [scorers[fn](text, str(reference[view.key])) for view, text in items]

    plans = [FunctionPlan(i, str(i), weight=(list(weights) or [1.0] * len(scorers))[i]) for i in range(len(scorers))]
    results = run_rows(views, plans, score)
    tally = Tally()
    for result in results:
        assert result is not None
        for f in range(len(scorers)):
            tried, found = findings_of(result, f, earnable=earnable)
            tally.add(result.view.key, result.view.group, f, tried, set(found))
    return {(v.fn, v.key) for v in tally.verdicts(range(len(scorers)))}, results


@pytest.mark.parametrize(
    ("name", "thinks", "expected"), EXPECTED, ids=[f"{n}-{'think' if t else 'plain'}" for n, t, _ in EXPECTED]
)
def test_verdicts(name: str, thinks: bool, expected: set[str]) -> None:
    found, _ = _verdicts([SCORERS[name]], thinks)
    assert {key for _, key in found} == expected


@pytest.mark.parametrize(("reads", "cut"), [(72, 72), (300, 300), (1500, 1500)])
def test_a_cut_is_narrowed_to_a_few_characters(reads: int, cut: int) -> None:
    found, results = _verdicts([lambda t, r: float(_has(t[:reads], r))], thinks=False)
    assert (0, PREFIX) in found
    detail = next(f for res in results for f in res.functions[0].assessment.findings if f.probe == PREFIX).detail
    seen, blind = (int(x) for x in re.search(r"first (\d+)-(\d+) characters", detail).groups())  # type: ignore[union-attr]
    assert blind - seen <= 8 and seen <= cut - len("40") <= blind  # the answer (2 characters) ends within the cut


@pytest.mark.parametrize(("thinks", "longest", "latent"), [(False, 61, True), (False, 200, False), (True, 61, True),
                                                       (True, 90, False), (True, 200, False)])  # fmt: skip
def test_a_cut_no_completion_of_the_run_reaches_yet_is_said_so(thinks: bool, longest: int, latent: bool) -> None:
    """text[:64] reads every completion of a run whose longest is shorter whole: it has changed no score yet. In a
    run (noting_latent_cuts) the cut is still a finding, its detail saying that no completion reaches it yet (the
    probe's texts with their think block and answer form measured in the same characters); past it, no such note."""
    _, results = _verdicts([lambda t, r: float(_has(t[:64], r))], thinks=thinks, longest=longest)
    raw = [f for r in results if r is not None for f in r.functions[0].assessment.findings if f.probe == PREFIX]
    noted = [f for r in results if r is not None for f in noting_latent_cuts(r).functions[0].assessment.findings
             if f.probe == PREFIX]  # fmt: skip
    assert raw and all(60 <= f.reach <= 64 for f in raw), [f.reach for f in raw]
    assert len(noted) == len(raw)
    note = f"no completion of this run is that long yet (the longest: {longest} characters)"
    said = [note in f.detail for f in noted]
    assert said == [latent] * len(noted)


def test_noise_is_not_a_cut_and_not_judged() -> None:
    rng = random.Random(0)
    found, results = _verdicts([lambda t, r: float(rng.random() < 0.5)], thinks=False)
    assert found == set()
    assert {r.functions[0].state for r in results} == {UNSTABLE}


def test_a_group_relative_term_is_scored_beside_the_group_and_not_taken_for_a_slice() -> None:
    """A length term relative to the call's other texts (open-r1's len_reward): scored in calls of its own beside
    the group's real completions, it is neither a suffix reader nor hackable."""

    def len_reward(texts: list[str], answer: str) -> list[float]:
        lengths = [len(t) for t in texts]
        lo, hi = min(lengths), max(lengths)
        out = []
        for t, n in zip(texts, lengths, strict=True):
            lam = 0.0 if hi == lo else 0.5 - (n - lo) / (hi - lo)
            out.append(lam if _has(_answer(t), answer) else min(0.0, lam))
        return out

    real = ("<think>\nadding\n</think>\n\n40", "<think>\nadding up\n</think>\n\n41", "I am not sure")
    views = _views(True, longest=200, texts=real)
    reference = {v.key: str(v.reference) for v in views}

    def score(fn: int, items: Sequence[tuple[RowView, str]], alone: bool) -> list[float | None]:
        by_ref: dict[str, list[float]] = {}
        texts = [t for _, t in items]
        for view, _ in items:
            by_ref.setdefault(reference[view.key], len_reward(texts, reference[view.key]))
        return [by_ref[reference[view.key]][i] for i, (view, _) in enumerate(items)]

    results = run_rows(views, [FunctionPlan(0)], score)
    assert all(r is not None and r.functions[0].context for r in results)
    assert all(r is not None and not r.functions[0].assessment.findings for r in results)


SHAPING: list[tuple[str, list[Score], list[float], set[tuple[int, str]]]] = [
    # (name, functions, weights, the total's findings: (function paying, degenerate completion))
    ("correct + uncapped distinct words", [SCORERS["final exact"], lambda t, r: len(set(t.split())) / 20], [1, 1],
     {(1, VARIED)}),
    ("correct + capped distinct words", [SCORERS["final exact"], lambda t, r: min(len(set(t.split())) / 20, 0.1)],
     [1, 1], set()),
    ("correct + length penalty", [SCORERS["final exact"], lambda t, r: -len(t) / 1000], [1, 1], set()),
    ("correct + steps bonus", [SCORERS["final exact"],
                               lambda t, r: min(1.0, len(re.findall(r"(Step \d+:|\n-|\n\*)", t)) / 3)], [1, 1],
     {(1, STEP_LIST)}),
    ("a length bonus alone", [SCORERS["length"]], [1], {(0, REPEATED_LINE)}),
    ("correct + substring at half weight", [SCORERS["final exact"], SCORERS["substring"]], [1, 0.5], set()),
    ("substring alone", [SCORERS["substring"]], [1], {(0, CANDIDATES)}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "scorers", "weights", "expected"), SHAPING, ids=[c[0] for c in SHAPING])
def test_the_weighted_total_decides_a_shaping_term(name: str, scorers: list[Score], weights: list[float],
                                                  expected: set[tuple[int, str]]) -> None:  # fmt: skip
    """In a run (earnable): a degenerate completion is reported when the weighted total pays it as much as a right
    answer, on the functions that pay it; a length penalty or a capped bonus next to a correctness reward is silent."""
    for thinks in (False, True):
        found, _ = _verdicts(scorers, thinks, earnable=True, weights=weights, longest=200)
        hacks = {(f, key) for f, key in found if key not in (PREFIX, SUFFIX, THINKING, FALLBACK)}
        assert {(f, "x") for f, _ in hacks} == {(f, "x") for f, _ in expected}, (thinks, found)
        if expected:
            assert hacks & expected or thinks, (thinks, found)


def test_a_function_that_raises_on_one_row_keeps_the_others_verdicts() -> None:
    def picky(text: str, answer: str) -> float:
        if answer == "40":
            raise ValueError("not this row")
        return float(_has(text[:64], answer))

    views = _views(False)
    reference = {v.key: str(v.reference) for v in views}

    def score(fn: int, items: Sequence[tuple[RowView, str]], alone: bool) -> list[float | None]:
        return [picky(t, reference[v.key]) for v, t in items]

    results = run_rows(views, [FunctionPlan(0)], score)
    states = [r.functions[0].state for r in results if r is not None]
    assert states.count(RAISED) == 1 and states.count(SCORED) == len(views) - 1


def test_none_for_every_variant_is_not_its_task() -> None:
    views = _views(False)
    results = run_rows(views, [FunctionPlan(0)], lambda fn, items, alone: [None] * len(items))
    assert {r.functions[0].state for r in results if r is not None} == {NOT_ITS_TASK}
    assert all(encode(r, 0, earnable=False) == 0 for r in results)


def test_a_scorer_failure_is_the_functions_not_the_runs() -> None:
    def score(fn: int, items: Sequence[tuple[RowView, str]], alone: bool) -> list[float | None]:
        raise ScoreFailed("stalled", "did not return within 2 s")

    results = run_rows(_views(False), [FunctionPlan(0)], score)
    assert {r.functions[0].state for r in results if r is not None} == {"stalled"}


def test_the_budget_stops_a_probe_before_a_pass() -> None:
    passes: list[int] = []

    def may_continue(calls: list) -> bool:
        passes.append(len(calls))
        return len(passes) < 2

    views = _views(False)
    reference = {v.key: str(v.reference) for v in views}
    results = run_rows(views, [FunctionPlan(0)], lambda f, items, a: [SCORERS["slice 64"](t, reference[v.key])
                                                                        for v, t in items],
                       may_continue=may_continue)  # fmt: skip
    assert results == [None] * 8 and len(passes) == 2


# ----- forms ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("54", "54"),
        ("#### 1,234", "1,234"),
        ("We add 3 and 5: 3 + 5 = 8. Therefore the answer is $\\boxed{8}$.", "8"),
        ("<answer> Paris </answer>", "Paris"),
        ("The answer is 42.", "42"),
        ("\\frac{1}{3}", "\\frac{1}{3}"),
        ("$\\boxed{\\frac{\\pi}{2}}$", "\\frac{\\pi}{2}"),
        ("Step 1: 2+2=4\nStep 2: 4*3=12\nSo 12 apples", "12"),
        ("", None),
        (None, None),
    ],
)
def test_final_answer(reference: str | None, answer: str | None) -> None:
    assert final_answer(reference) == answer


def test_wrong_answers_are_unrelated_to_the_right_one() -> None:
    assert wrong_answers("8", ["8", "18", "80", "12", "7"], 2) == ["7", "12"]  # never 18 or 80: they contain 8
    assert wrong_answers("Paris", ["Lyon", "Parisian"], 2) == ["Lyon", "none"]
    assert same_length_wrong("42", ["53"]) == "64"
    assert contains_answer("The answer is 5.", "5") and not contains_answer("15 apples", "5")
    assert contains_answer("\\boxed{8.0}", "8")


def test_no_degenerate_variant_states_the_right_answer_unless_meant_to() -> None:
    shape = Shape(True, THINK)
    row = RowText("42", "17", form="boxed", prompt_text="What is 40+2?", thinking="40 and 2 make 42",
                  real_text="<think>\n40 and 2\n</think>\n\n\\boxed{42}", real_has_block=True, longest=500)  # fmt: skip
    variants = {v.side: v.text for v in hack_variants(row, shape)}
    assert CANDIDATES in variants and LONGER_TOKEN in variants
    for label, text in variants.items():
        if label not in (CANDIDATES, "reference answer alone, no think block"):
            assert not contains_answer(text, "42"), (label, text)
    assert PROMPT_ECHOED in {v.side for v in hack_variants(RowText("7", "9", prompt_text="What is 3+4?"), shape)}
    assert PROMPT_ECHOED not in {v.side for v in hack_variants(RowText("1", "9", prompt_text="What is 0+1?"), shape)}


def test_the_neutral_text_gives_graders_nothing_to_find() -> None:
    for text in FILLERS.values():
        assert not re.search(r"\d|<|>|\\|\$|\banswer\b|\bfinal\b|\btherefore\b|\bso\b|=|Step|First,|Next,", text)
    assert len(filler(1000)) == 1000 and len(filler(7, "b")) == 7


@pytest.mark.parametrize("family", ["think", "gemma4", "gptoss"])
def test_variants_keep_each_family_shape(family: str) -> None:
    markup = MARKUPS[family]
    pair = reference_pairs("42", "17", "64", ["bare"])[0]
    leak = thinking_variants(pair, Shape(True, markup))[0]
    thinking, answer = split(leak.text, markup)
    assert answer == "17" and thinking is not None and "42" in thinking


def test_every_form_renders_the_answer() -> None:
    for form, template in FORMS.items():
        assert "{}" in template, form
    assert [p.form for p in reference_pairs("x", "y", "z", list(FORMS))] == [f for f in FORMS if f != "hash"]


# ----- bits and quorum --------------------------------------------------------------------------------------------
def test_bits_cross_ranks_exactly() -> None:
    _, results = _verdicts([SCORERS["slice 64"]], thinks=False)
    mask = encode(results[0], 0, earnable=False)
    assert decode(mask, PREFIX) == (True, True) and decode(mask, SUFFIX)[1] is False
    assert mask < 2**52  # exact in the float64 feature that carries it across ranks
    tally = Tally()
    for r in results:
        tally.add_mask(r.view.key, r.view.group, 0, encode(r, 0, earnable=False))
    assert {v.key for v in tally.verdicts([0])} == {PREFIX}


GROUPS = {r: r // 4 for r in range(16)}  # 4 groups of 4 rows


@pytest.mark.parametrize(
    ("found", "tried", "verdict"),
    [
        ([0], [0], False),  # one row is never a verdict
        ([0, 1], [0, 1], False),
        ([0, 1, 4], [0, 1, 4], True),  # three rows, two groups
        ([0, 1, 4], [0, 1, 4, 5, 8, 9], False),  # half the rows probed is not most of them
        ([0, 1, 4, 5], [0, 1, 4, 5, 8, 9], True),
        ([0, 1, 2], [0, 1, 2, 4, 5], False),  # one prompt out of two: a coincidence of that prompt
        ([0, 1, 2, 3], [0, 1, 2, 3], True),  # the only group probed: as good as it gets
    ],
)
def test_quorum(found: list[int], tried: list[int], verdict: bool) -> None:
    assert quorum(found, tried, GROUPS) is verdict


@pytest.mark.parametrize(
    ("told", "cut"),
    [
        ({20: True, 64: True, 256: False, 1024: False}, (64, 256)),
        ({20: True, 64: False, 256: True, 1024: False}, None),  # told again further on: noise, not a cut
        ({20: True, 64: True}, None),
        ({20: False, 64: False}, (0, 20)),
    ],
)
def test_monotone_cut(told: dict[int, bool], cut: tuple[int, int] | None) -> None:
    assert monotone_cut(sorted(told), told) == cut


def test_hackable_is_a_probe_kind() -> None:
    assert HACKABLE == "hackable"
