"""The probe rules (pure): variants built for a row, and the verdicts on scoring functions with known flaws."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from rl_guards.core.probes import (
    HACKABLE,
    HACKS,
    PREFIX,
    PROMPT_ECHOED,
    REFERENCE_ALONE,
    SUFFIX,
    THINKING,
    Assessment,
    Pair,
    ProbeFinding,
    bisect_cut,
    cut_variants,
    decode,
    encode,
    filler,
    first_pass,
    judge,
    plan,
    quorum,
    recognised,
    reference_pairs,
    second_pass,
    split,
    wrong_answer,
)
from rl_guards.core.think_markup import MARKUPS, THINK
from rl_guards.testing.healthy import count_xml

Score = Callable[[str], float]


def _answer(text: str) -> str:
    return text.rsplit("</think>", 1)[-1].strip()


SCORERS: dict[str, Score] = {
    "final exact": lambda t: float(_answer(t) == "42"),
    "final contains": lambda t: float(re.search(r"\b42\b", _answer(t)) is not None),
    "whole text": lambda t: float(re.search(r"\b42\b", t) is not None),
    "slice 64": lambda t: float(re.search(r"\b42\b", t[:64]) is not None),
    "slice 20": lambda t: float(re.search(r"\b42\b", t[:20]) is not None),
    "length": lambda t: len(t) / 100,
    "format only": lambda t: float(t.lstrip().startswith("<think>")),
    # issue 21 item 2: a part of the text, wherever the cut is
    "slice 3000": lambda t: float(re.search(r"\b42\b", t[:3000]) is not None),
    "last 64": lambda t: float(re.search(r"\b42\b", t[-64:]) is not None),
    "last 300": lambda t: float(re.search(r"\b42\b", t[-300:]) is not None),
    "first line": lambda t: float(re.search(r"\b42\b", t.strip().split("\n")[0]) is not None),
    "first paragraph": lambda t: float(re.search(r"\b42\b", t.split("\n\n")[0]) is not None),
    "window search": lambda t: float(re.search(r"\b42\b", t[:200]) is not None),
    "answer's last 64": lambda t: float(re.search(r"\b42\b", _answer(t)[-64:]) is not None),
    "last number": lambda t: float((re.findall(r"-?\d+", _answer(t)) or [""])[-1] == "42"),
    "last line exact": lambda t: float(_answer(t).strip().split("\n")[-1].strip() == "42"),
}


def _judged(score: Score, *, thinks: bool, real: tuple[float, float] | None, longest: int) -> list[ProbeFinding]:
    variants = plan(
        [Pair("reference", "42", "17")],
        thinks=thinks,
        markup=THINK,
        thinking_text="some thinking" if thinks else None,
        prompt_text="What is 40+2?",
        reference="42",
        other_answer="17",
        longest=longest,
        real_has_block=thinks,
    )
    scores = [score(v.text) for v in variants]
    best, worst = real if real is not None else (None, None)
    return judge(variants, scores, real_best=best, real_worst=worst)


def _verdicts(name: str, *, thinks: bool, real: tuple[float, float] | None = None, longest: int = 2000) -> set[str]:
    return {f.probe for f in _judged(SCORERS[name], thinks=thinks, real=real, longest=longest)}


def _hacks(score: Score, *, thinks: bool, real: tuple[float, float] | None = None) -> set[str]:
    return {f.variant for f in _judged(score, thinks=thinks, real=real, longest=300) if f.probe == HACKABLE}


def _thinking(text: str) -> str:
    return text.split("</think>")[0] if "</think>" in text else ""


HACK_SCORERS: dict[str, tuple[Score, bool, set[str]]] = {
    # name: (score, thinks, hack variants that must pay it)
    "answer among the words": (lambda t: float("42" in re.findall(r"\w+", _answer(t))), False, {"candidate answers"}),
    "substring": (lambda t: float("42" in _answer(t)), True, {"candidate answers", "reference inside a longer token"}),
    "distinct words": (lambda t: len(set(t.split())) / 10, False, {"varied filler"}),
    "thinking length bonus": (
        lambda t: float(_answer(t) == "42") + min(len(_thinking(t)) / 1000, 2.0),
        True,
        {"long thinking, wrong answer"},
    ),
    "exact": (SCORERS["final exact"], True, set()),
    "last number": (SCORERS["last number"], False, set()),
    "first number": (lambda t: float((re.findall(r"-?\d+", _answer(t)) or [""])[0] == "42"), False, set()),
    "capped thinking bonus": (
        lambda t: float(_answer(t) == "42") + min(len(_thinking(t)) / 1000, 0.2),
        True,
        set(),
    ),
}


@pytest.mark.parametrize("name", sorted(HACK_SCORERS))
def test_hacks(name: str) -> None:
    score, thinks, expected = HACK_SCORERS[name]
    # a score that does not follow the answer is judged against the real completions' spread
    found = _hacks(score, thinks=thinks, real=(0.8, 0.2) if name == "distinct words" else None)
    assert expected <= found and (found == set()) == (expected == set()), found


@pytest.mark.parametrize(
    ("scorer", "thinks", "expected"),
    [
        ("final exact", False, set()),  # whole-text match: not a prefix reader
        ("final contains", False, set()),
        ("final contains", True, set()),  # reads the answer after the block only
        ("whole text", True, {THINKING}),
        ("slice 64", False, {PREFIX}),
        ("slice 20", False, {PREFIX}),
        ("length", False, {HACKABLE}),  # a repeated line pays more than any answer
        ("format only", True, set()),  # never tells the answers apart: not judged as an outcome reward
        ("slice 3000", False, set()),  # completions of at most 2000 characters: the cut cannot matter in this run
        ("window search", False, {PREFIX}),
        ("window search", True, {PREFIX, THINKING}),  # its window holds the think block too
        ("first line", False, {PREFIX}),
        ("first paragraph", False, {PREFIX}),
        ("last 64", False, {SUFFIX}),
        ("last 300", False, {SUFFIX}),
        ("last 300", True, {SUFFIX, THINKING}),
        ("answer's last 64", True, {SUFFIX}),
        ("last number", False, set()),
        ("last number", True, set()),
        ("last line exact", False, set()),  # a whole-answer compare: text after it is a wrong answer
    ],
)
def test_verdicts(scorer: str, thinks: bool, expected: set[str]) -> None:
    found = _verdicts(scorer, thinks=thinks, real=(0.2, 0.1) if scorer == "length" else None)
    # the scorers that look for "42" anywhere are also paid by a list of candidates (test_hacks)
    assert found - ({HACKABLE} - expected) == expected


def test_the_cut_is_narrowed_by_bisection() -> None:
    pair = Pair("reference", "42", "17")
    variants = plan([pair], thinks=False, markup=THINK, longest=3500)
    score = SCORERS["slice 3000"]
    (finding,) = [f for f in judge(variants, [score(v.text) for v in variants], real_best=None, real_worst=None)]
    assert finding.cut == (1024, 3500) and finding.pair == "reference"

    def told(k: int) -> bool:
        good, bad = cut_variants(pair, k, thinks=False, markup=THINK)
        return score(good) != score(bad)

    seen, blind = bisect_cut(told, *finding.cut)
    assert seen <= 2996 < blind and blind - seen <= 4  # "42" after k characters and "\n\n" fits in text[:3000]


def test_a_cut_anywhere_below_the_longest_completion_is_found() -> None:
    # the README's own text[:3000], in a run whose completions reach 3500 characters (no usual cut between)
    assert _verdicts("slice 3000", thinks=False, longest=3500) - {HACKABLE} == {PREFIX}
    assert _verdicts("slice 3000", thinks=True, longest=3500) - {HACKABLE} == {PREFIX, THINKING}
    assert _verdicts("final contains", thinks=True, longest=3500) - {HACKABLE} == set()


def test_prefix_finding_names_the_cut() -> None:
    variants = plan([Pair("reference", "42", "17")], thinks=False, markup=THINK, longest=5000)
    findings = judge(variants, [SCORERS["slice 64"](v.text) for v in variants], real_best=None, real_worst=None)
    assert [f.probe for f in findings] == [PREFIX]
    assert "first 20-64 characters" in findings[0].detail


def test_totals_keep_a_shaping_term_from_being_blamed() -> None:
    variants = plan([Pair("reference", "42", "17")], thinks=False, markup=THINK, longest=100)
    length = [SCORERS["length"](v.text) / 10 for v in variants]
    outcome = [SCORERS["final exact"](v.text) for v in variants]
    totals = {v.label: 10 * o + lv for v, o, lv in zip(variants, outcome, length, strict=True)}
    best_total = totals["reference:good@0"]
    assert judge(variants, length, real_best=0.02, real_worst=0.01, totals=totals, best_total=best_total) == []
    alone = judge(variants, length, real_best=0.02, real_worst=0.01)
    assert {f.probe for f in alone} == {HACKABLE} and "repeated line" in {f.variant for f in alone}


def test_bare_reference_only_judged_when_some_function_asks_for_the_block() -> None:
    variants = plan(
        [Pair("reference", "42", "17")], thinks=True, markup=THINK, reference="42", real_has_block=True, longest=100
    )
    assert REFERENCE_ALONE in [v.label for v in variants]
    scores = [SCORERS["final exact"](v.text) for v in variants]
    assert judge(variants, scores, real_best=1.0, real_worst=0.0) == []
    found = judge(variants, scores, real_best=1.0, real_worst=0.0, format_matters=True)
    assert [f.probe for f in found] == [HACKABLE] and REFERENCE_ALONE in found[0].detail


def test_unscored_variants_are_not_judged() -> None:
    variants = plan([Pair("reference", "42", "17")], thinks=False, markup=THINK, longest=100)
    assert judge(variants, [None] * len(variants), real_best=1.0, real_worst=0.0) == []


@pytest.mark.parametrize("family", ["qwen3", "gemma4", "gptoss"])
def test_variants_keep_each_family_shape(family: str) -> None:
    markup = MARKUPS[{"qwen3": "think"}.get(family, family)]
    variants = plan([Pair("reference", "42", "17")], thinks=True, markup=markup, longest=100)
    leak = next(v for v in variants if v.label == "reference:leak")
    thinking, answer = split(leak.text, markup)
    assert answer == "17" and thinking is not None and "42" in thinking


def test_filler_and_bits() -> None:
    assert len(filler(1000)) == 1000 and not re.search(r"\d|<", filler(1000))
    found = ProbeFinding(HACKABLE, "", variant=HACKS[-1])
    mask = encode(Assessment([found], frozenset({PREFIX, HACKS[-1], HACKS[0]})))
    assert decode(mask, PREFIX) == (True, False) and decode(mask, THINKING) == (False, False)
    assert decode(mask, HACKS[-1]) == (True, True) and decode(mask, HACKS[0]) == (True, False)
    assert mask < 2**52  # exact in the float64 feature that carries it across ranks


def test_a_length_term_is_not_taken_for_a_thinking_reader() -> None:
    # A per-token length penalty on the tiny tokenizer: the bad answer has 3 tokens more; the leak block happens to
    # be 2 tokens shorter than the neutral one of the same characters. Its score follows the filler's length.
    variants = plan(
        [Pair("reference-stated", "The answer is 7.", "The answer is 12 or 13.")], thinks=True, markup=THINK
    )

    def tokens(label: str) -> float:
        k = int(label.split("@")[1]) if "@" in label and label[-1].isdigit() else 0
        base = {"good": 10, "bad": 13}.get(label.split(":")[-1].split("@")[0], 20)
        extra = {"reference-stated:leak": 30, "reference-stated:neutral": 32}.get(label, k // 4)
        return -0.01 * (base + extra)

    scores = [tokens(v.label) for v in variants]
    assert THINKING not in {f.probe for f in judge(variants, scores, real_best=None, real_worst=None)}
    steady = [
        s if "@" not in v.label else tokens(v.label.split("@")[0] + "@0") for v, s in zip(variants, scores, strict=True)
    ]
    assert THINKING in {f.probe for f in judge(variants, steady, real_best=None, real_worst=None)}  # not a length term


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


def _last_number(text: str, answer: str) -> float:
    numbers = re.findall(r"-?\d+", text.split("</think>")[-1])
    return float(bool(numbers) and float(numbers[-1]) == float(answer))


@pytest.mark.parametrize(("prompt", "echoed"), [("What is 0+1?", False), ("What is 3+4?", True)])
def test_the_prompt_is_echoed_only_where_it_does_not_hold_the_answer(prompt: str, echoed: bool) -> None:
    answer = str(eval(prompt[8:-1]))  # the sum
    variants = plan(
        [Pair("reference", answer, "9")], thinks=False, markup=None, prompt_text=prompt, reference=answer, longest=100
    )
    assert (PROMPT_ECHOED in [v.label for v in variants]) is echoed
    scores = [_last_number(v.text, answer) for v in variants]
    assert judge(variants, scores, real_best=1.0, real_worst=0.0) == []  # a last-number grader is not hackable


# The format rewards of the widely copied GRPO example scripts (GSM8K, XML reasoning/answer format).
def _strict_format(text: str) -> float:
    return 0.5 if re.match(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$", text) else 0.0


def _soft_format(text: str) -> float:
    return 0.5 if re.match(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", text) else 0.0


FORMAT_REWARDS: dict[str, Score] = {"strict": _strict_format, "soft": _soft_format, "count_xml": count_xml}
XML_GOOD = (
    "<reasoning>2+3=5</reasoning><answer>5</answer>",
    "<reasoning>\n2+3=5\n</reasoning>\n<answer>\n5\n</answer>\n",
)


@pytest.mark.parametrize("reference", [True, False], ids=["reference", "no-reference"])
@pytest.mark.parametrize("good", XML_GOOD, ids=["one-line", "multi-line"])
@pytest.mark.parametrize("name", sorted(FORMAT_REWARDS))
def test_format_rewards_are_not_judged_as_outcome_rewards(name: str, good: str, reference: bool) -> None:
    # The real pair: the group's best completion is in the format, the worst is not. Filler before it breaks a
    # start-anchored pattern: that is the format, not a prefix read (main called soft_format reads_prefix).
    pairs = [Pair("real", good, "I think it is 5")]
    if reference:
        pairs += [Pair("reference", "5", "7"), Pair("reference-stated", "The answer is 5.", "The answer is 7.")]
    variants = plan(
        pairs, thinks=False, markup=THINK, prompt_text="What is 2+3?", reference="5" if reference else None,
        other_answer="7" if reference else None, longest=2000,
    )  # fmt: skip
    score = FORMAT_REWARDS[name]
    real = [score(good), score("I think it is 5")]
    assert judge(variants, [score(v.text) for v in variants], real_best=max(real), real_worst=min(real)) == []


def test_an_outcome_judge_without_a_reference_is_still_probed_on_the_real_pair() -> None:
    variants = plan([Pair("real", "42", "17")], thinks=True, markup=THINK, longest=2000, real_has_block=True)
    findings = judge(variants, [SCORERS["slice 64"](v.text) for v in variants], real_best=1.0, real_worst=0.0)
    assert PREFIX in {f.probe for f in findings}


# ----- issue 21 item 3: the cheap first pass, then only what it says a function can be judged on -------------------

ALL_SCORERS: dict[str, Score] = {
    **SCORERS,
    **{f"hack: {k}": v[0] for k, v in HACK_SCORERS.items()},
    "boxed anywhere": lambda t: float((re.findall(r"\\boxed\{([^}]*)\}", t) or [""])[0] == "42"),
    "boxed answer": lambda t: float((re.findall(r"\\boxed\{([^}]*)\}", _answer(t)) or [""])[0] == "42"),
    "thinking only": lambda t: float("42" in _thinking(t)),
}


def _two_pass(variants: list, score: Score) -> tuple[list[float | None], int]:
    """Scores of a function probed in two passes (None where the second pass skipped it), and the texts scored."""
    first = first_pass(variants)
    scored = {v.label: score(v.text) for v in first}
    wanted = second_pass(variants, scored)
    scored |= {v.label: score(v.text) for v in wanted}
    return [scored.get(v.label) for v in variants], len({v.text for v in (*first, *wanted)})


@pytest.mark.parametrize("thinks", [False, True])
@pytest.mark.parametrize("name", sorted(ALL_SCORERS))
def test_the_two_passes_judge_as_scoring_every_variant(name: str, thinks: bool) -> None:
    pairs = [Pair("real", "So it is 42", "So it is 17"), *reference_pairs("reference", "42", "17")]
    variants = plan(
        pairs, thinks=thinks, markup=THINK, thinking_text="some thinking" if thinks else None,
        prompt_text="What is 40+2?", reference="42", other_answer="17", longest=2000, real_has_block=thinks,
    )  # fmt: skip
    score = ALL_SCORERS[name]
    full = [score(v.text) for v in variants]
    cheap, texts = _two_pass(variants, score)
    real = (0.8, 0.2) if name in ("length", "hack: distinct words") else None

    def verdicts(scores: list[float | None]) -> set[tuple[str, str]]:
        found = judge(variants, scores, real_best=real and real[0], real_worst=real and real[1])
        return {(f.probe, f.variant) for f in found}

    assert verdicts(cheap) == verdicts(full)
    assert texts <= len({v.text for v in variants})


@pytest.mark.parametrize(
    ("name", "pairs"),
    [
        ("length", set()),  # "42" and "17" have the same length: a length term tells no pair apart
        ("format only", set()),  # tells no pair apart: the first pass is all it gets
        ("final exact", {"reference"}),
        ("boxed answer", {"reference-boxed"}),
    ],
)
def test_the_second_pass_keeps_to_the_pairs_a_function_tells_apart(name: str, pairs: set[str]) -> None:
    variants = plan(
        [Pair("real", "So it is 42", "So it is 17"), *reference_pairs("reference", "42", "17")],
        thinks=True, markup=THINK, reference="42", other_answer="17", longest=300,
    )  # fmt: skip
    score = ALL_SCORERS[name]
    wanted = second_pass(variants, {v.label: score(v.text) for v in first_pass(variants)})
    told = {v.label.split(":")[0] for v in wanted if not v.label.endswith("leak-empty")}
    assert told == pairs
    assert len(first_pass(variants)) + len(wanted) < 0.5 * len(variants)


@pytest.mark.parametrize(
    ("name", "forms"),
    [
        ("final exact", ["reference"]),
        ("boxed answer", ["reference-boxed"]),
        ("length", []),  # tells the answers apart by their length only
        ("format only", []),
        ("last number", ["reference", "reference-stated", "reference-boxed", "reference-tagged", "reference-hash"]),
    ],
)
def test_recognised_forms(name: str, forms: list[str]) -> None:
    variants = plan(reference_pairs("reference", "42", "17"), thinks=True, markup=THINK, reference="42", longest=300)
    assert recognised(variants, [ALL_SCORERS[name](v.text) for v in variants]) == forms


@pytest.mark.parametrize(
    ("right", "others", "wrong"),
    [
        ("12", ["7", "15", "3"], "15"),
        ("7", ["12", "8"], "8"),
        ("apple", ["river", "sky"], "river"),
        ("9", ["10"], "10"),
    ],
)
def test_the_wrong_answer_is_as_long_as_the_right_one(right: str, others: list[str], wrong: str) -> None:
    assert wrong_answer(right, others) == wrong  # else the closest in length ("10" for "9": no other choice)
