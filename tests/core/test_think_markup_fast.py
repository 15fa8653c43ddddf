"""The str.find scanner against the reference scanner (main 0d407ed): identical verdicts on every input.

``tests/core/_think_markup_reference.py`` is a frozen copy of the scanner before the rewrite. Every field of every
verdict (kind, anomalies, answer, thinking, tag counts on text and ids, has_tags, prompt_opened) must be equal,
for all three markup families and custom ones, with and without a prompt-opened block and token ids, on
hand-picked adversarial texts, a seeded random corpus and hypothesis examples. Strings of each CPython width
(1, 2, 4 bytes a character) are covered on purpose: ``str.find`` and the regex engine run a different loop per width.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

import _think_markup_reference as ref
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rl_guards.core import think_markup as tm

NAME_MARKUPS = [tm.THINK, tm.ThinkMarkup("<reasoning>", "</reasoning>", name="reasoning")]
MARKUPS = [
    *NAME_MARKUPS,
    tm.GEMMA4,
    tm.GPTOSS,
    tm.ThinkMarkup("[[", "[[[", name="overlapping"),
    tm.ThinkMarkup("<a|", "<a|<a|!", name="prefixed"),  # a tag that is a prefix of the other
]
_REF_MARKUPS = {id(m): ref.ThinkMarkup(**vars(m)) for m in MARKUPS}


def _fields(verdict: Any) -> dict[str, Any]:
    """Every dataclass field by attribute (a verdict may hold its answer and thinking as spans until read)."""
    return {f.name: getattr(verdict, f.name) for f in dataclasses.fields(verdict)}


def assert_same(text: str, markup: tm.ThinkMarkup, **kwargs: Any) -> None:
    """The new and the reference scanner agree on every verdict field (and on strip_thinking)."""
    new = tm.scan(text, markup, **kwargs)
    old = ref.scan(text, _REF_MARKUPS[id(markup)], **kwargs)
    assert type(new) is tm.MarkupVerdict
    assert _fields(new) == _fields(old), (text, markup.name, kwargs)
    if "token_ids" not in kwargs:
        po = kwargs.get("prompt_opened", False)
        assert tm.strip_thinking(text, markup, prompt_opened=po) == old.answer


def assert_same_all_ways(text: str, markup: tm.ThinkMarkup, ids: list[int] | None = None) -> None:
    for prompt_opened in (False, True):
        assert_same(text, markup, prompt_opened=prompt_opened)
        if ids is not None:
            assert_same(text, markup, prompt_opened=prompt_opened, token_ids=ids, open_id=1, close_id=2)


# ----- pieces: exact tags, near misses in every case/space variant, cut tags, wide characters ----------------
def _case_variants(word: str, rng: random.Random) -> str:
    folds = {"i": "iIİı", "k": "kKK", "s": "sSſ"}
    return "".join(rng.choice(folds.get(c.lower(), c.lower() + c.upper())) for c in word)


def _near_misses(name: str, rng: random.Random) -> list[str]:
    out = []
    for _ in range(12):
        blanks = ["", " ", "\t", "  ", "   ", "    ", " \t "]
        slash = rng.choice(["", "/"])
        word = _case_variants(name, rng) if rng.random() < 0.6 else name
        tail = rng.choice(["", ">", " >", "\t>", "    >", "ing>", "ING", "er>", "_x>", "/>", " about", "\n", "x", "3"])
        out.append(f"<{rng.choice(blanks)}{slash}{rng.choice(blanks)}{word}{tail}")
    return out


def _pieces(markup: tm.ThinkMarkup, rng: random.Random) -> list[str]:
    o, c = markup.open_tag, markup.close_tag
    pieces = [o, c, o, c, o + "\n", "\n" + c + "\n\n", f"{o}\n\n{c}\n\n"]
    pieces += [o[:k] for k in range(1, len(o))] + [c[:k] for k in range(1, len(c))]  # cut tags
    pieces += [tm.THINK.open_tag, tm.THINK.close_tag, tm.GEMMA4.open_tag, tm.GEMMA4.close_tag]
    pieces += [tm.GPTOSS.open_tag, tm.GPTOSS.close_tag, tm.GPTOSS.answer_marker, "<|return|>", "<|call|>"]
    pieces += ["<|start|>assistant", "thought", "thought\n", "<", "<<", "< ", "</", "/", ">", " ", "\n", "\t", "\r\n"]
    pieces += ["a", "answer", "x < 3", "a<b", "<=", "<br>", "</div>", "if (i < n)", "think", "thinking", "THINK"]
    pieces += ["思考", "答案", "🤔", "\ud800", "\udfff", "é", "\u3000", "\xa0", "\x1c", "\x00", "İ", "ı", "K"]
    if markup.tag_name:
        pieces += _near_misses(markup.tag_name, rng)
    return pieces


def _random_text(rng: random.Random, markup: tm.ThinkMarkup, pieces: list[str]) -> str:
    shape = rng.random()
    if shape < 0.1:  # long filler around a few tags: exercises the str.find hops over long spans
        filler = rng.choice(["word " * rng.randint(1, 400), "思考 " * rng.randint(1, 200), "🤔 " * rng.randint(1, 50)])
        return rng.choice(["", " ", "\n"]).join(rng.choice([filler, *pieces]) for _ in range(rng.randint(1, 6)))
    if shape < 0.15:  # many "<" that are not tags, then tags: the compiled-pattern path
        code = "if (a < b && c <= d) x <<= 1; " * rng.randint(1, 30)
        parts = [code, rng.choice(pieces), code, rng.choice(pieces), rng.choice(pieces)]
        rng.shuffle(parts)
        return "".join(parts)
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))


@pytest.mark.parametrize("markup", MARKUPS, ids=[m.name for m in MARKUPS])
def test_random_corpus_matches_reference(markup: tm.ThinkMarkup) -> None:
    rng = random.Random(f"scanner-{markup.name}")
    pieces = _pieces(markup, rng)
    for _ in range(3000):
        text = _random_text(rng, markup, pieces)
        ids = [rng.choice([0, 0, 0, 1, 2]) for _ in range(rng.randint(0, 12))] if rng.random() < 0.3 else None
        assert_same_all_ways(text, markup, ids)


ADVERSARIAL = [
    "",
    " ",
    "<",
    "<<<<",
    "<" * 1000,
    "< " * 500 + "think",
    "<think" * 300,
    "<think>" * 300,
    "</think>" * 300,
    "<THINK" * 300,
    "<think>" + "x" * 5000,
    "<think>" + " " * 5000,
    "x" * 5000 + "</think>",
    "<think><think>a</think>b",
    "<think>a</think>b<think>c</think>d</thi",
    "<think>a</think></think></think>",
    "a</think",
    "a</think>",
    "a<think",
    "a<think>",
    "a<thi",
    "a<th",
    "<think>a</thinking>b",
    "<think>a</THINK>b",
    "<  /  think>a",
    "<    think>",
    "<\t/\tthink>",
    "<thİnk>a</think>b",
    "<thınk>a",
    "<thinK>a",
    "<think_x>a</think>b",
    "<think about it>",
    "<think/>",
    "<think\n",
    "</think\n",
    "x < think",
    "x<think>思考</think>答案🤔",
    "<think>\ud800</think>\udfff",
    "\u3000<think>\xa0</think>\x1canswer\x1c",
    "if (a < b) { c <<= 2; } <think>a</think>b <tag> x <= y",
    "<think>a</think>b" * 200,
    "<|channel>thought\n<channel|>x",
    "<|channel>thought<|channel>thought\nx<channel|>y<|chan",
    "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>42<|return|> <|return|>",
    "<|channel|>final<|message|>42<|call|>\n<|return|>",
    "[[[[[[[x[[y",
]


@pytest.mark.parametrize("markup", MARKUPS, ids=[m.name for m in MARKUPS])
@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_texts_match_reference(markup: tm.ThinkMarkup, text: str) -> None:
    for widen in ("", "é", "思", "🤔"):  # the same text stored 1, 2 and 4 bytes a character
        assert_same_all_ways(text + widen, markup, ids=[1, 0, 2, 0])
        assert_same_all_ways(widen + text, markup, ids=[0, 2])


# ----- hypothesis ----------------------------------------------------------------------------------------------
_NEAR = st.builds(
    lambda pre, slash, mid, word, tail: f"<{pre}{slash}{mid}{word}{tail}",
    st.sampled_from(["", " ", "\t", "   ", "    "]),
    st.sampled_from(["", "/"]),
    st.sampled_from(["", " ", "\t\t", "    "]),
    st.text(alphabet="tThHiIİınNkKK", min_size=3, max_size=6),
    st.sampled_from(["", ">", " >", "ing>", "er", "_", "/>", "\n", " x"]),
)
_FIXED = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<thi",
        "</think",
        "<|channel>",
        "<channel|>",
        "<|end|>",
        tm.GPTOSS.open_tag,
        tm.GPTOSS.answer_marker,
        "<|return|>",
        "<reasoning>",
        "</reasoning>",
        "<REASONING>",
        "[[",
        "[[[",
        "thought",
        "x < 3",
        "<=",
        "<",
        " ",
        "\n",
        "a",
        "答",
        "🤔",
        "\ud800",
        "\u3000",
    ]
)
TEXTS = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="<>/ \tthinkTHINKİıKa\n思🤔|", max_size=60),
    st.lists(st.one_of(_FIXED, _NEAR, st.text(max_size=4)), max_size=20).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(
    text=TEXTS,
    markup=st.sampled_from(MARKUPS),
    prompt_opened=st.booleans(),
    ids=st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=20)),
)
@example(text="<thınk>", markup=tm.THINK, prompt_opened=False, ids=None)
@example(text="a</think>b<THİNK", markup=tm.THINK, prompt_opened=True, ids=[2, 1])
def test_hypothesis_matches_reference(
    text: str, markup: tm.ThinkMarkup, prompt_opened: bool, ids: list[int] | None
) -> None:
    if ids is None:
        assert_same(text, markup, prompt_opened=prompt_opened)
    else:
        assert_same(text, markup, prompt_opened=prompt_opened, token_ids=ids, open_id=1, close_id=2)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(["<think>", "</think>", "<think", "<", "a", " ", "思", "🤔"]), max_size=400))
def test_hypothesis_long_texts_match_reference(parts: list[str]) -> None:
    text = "".join(parts)
    assert_same(text, tm.THINK)
    assert_same(text, tm.THINK, prompt_opened=True)


# ----- the cost model: what crosses the text ----------------------------------------------------------------
def _c_calls(fn: Any) -> list[str]:
    """Names of the C functions ``fn()`` calls (sys.setprofile ``c_call`` events)."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            names.append(getattr(arg, "__qualname__", getattr(arg, "__name__", repr(arg))))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


@pytest.mark.parametrize(
    "text",
    [
        "<think>\n" + "reasoning " * 2000 + "\n</think>\n\n" + "answer " * 500,
        "plain answer without markup " * 500,
        "思考 🤔 " * 3000,
    ],
    ids=["well_formed", "plain", "wide"],
)
def test_tags_only_text_crosses_no_regex(text: str) -> None:
    """A completion whose only ``<`` are its tags is scanned by ``str.find`` hops: no regex runs over it.

    One anchored ``Pattern.match`` per ``<`` classifies it (a few characters read), and at most one search for the
    first non-space character after each tag (is the block / the answer empty: reads whitespace only); nothing walks
    the text. (The 0d407ed scanner ran a case-insensitive ``finditer`` over every text: 0.1-0.3 GB/s.)
    """
    calls = _c_calls(lambda: tm.scan(text))
    patterns = [c for c in calls if c.startswith("Pattern.")]
    assert set(patterns) <= {"Pattern.match", "Pattern.search"}, calls
    assert patterns.count("Pattern.match") <= text.count("<"), calls
    assert patterns.count("Pattern.search") <= text.count("<"), calls
    assert calls.count("str.find") <= 4, calls


def _trace_events(text: str) -> int:
    """Python-level trace events (calls, lines, returns) of one :func:`scan`."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return trace

    sys.settrace(trace)
    try:
        tm.scan(text)
    finally:
        sys.settrace(None)
    return count


def test_python_work_does_not_grow_with_characters() -> None:
    """Text without ``<`` costs no Python step: a 1,000x longer text between the same tags, same Python work."""
    for shape in ("<think>{}</think>{}", "{}</think>{} x < 3 and y <= 4", "<think>{}<think>{}</think><THINK"):
        short = shape.format("reasoning " * 10, "answer " * 10)
        long = shape.format("reasoning " * 10_000, "answer " * 10_000)
        assert _trace_events(long) == _trace_events(short), shape


def test_python_work_per_lt_is_bounded() -> None:
    """Many ``<`` that are not tags: a few are checked one by one, then one compiled pattern takes the rest in C."""
    n = 200_000
    assert _trace_events("<" * n) < n // 20
    assert _trace_events("if (a < b) x <<= 1; " * (n // 20)) < n // 20


def test_candidate_pattern_is_a_superset_of_the_near_miss_pattern() -> None:
    """Every start the reference near-miss regex matches, the cheaper candidate pattern matches too."""
    rng = random.Random(7)
    exact = tm._near_miss_regex("think")
    candidate = tm._candidate_regex("think")
    for _ in range(5000):
        text = "".join(
            rng.choice(["<", " ", "\t", "/", "t", "T", "h", "i", "İ", "ı", "n", "k", "K", "x"]) for _ in range(12)
        )
        starts = {m.start() for m in exact.finditer(text)}
        assert starts <= {m.start() for m in candidate.finditer(text)}, text
        assert starts == {s for s in range(len(text)) if exact.match(text, s)}, text


# ----- the hop loop's edges: budget, dense "<", the ASCII rest without the name's last letter ----------------------
_EDGE_PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<THINK>",
        "</thi",
        "<thi",
        "< think>",
        "x < 3 ",
        "a <= b ",
        "y << 2; ",
        "<tag> ",
        "k",
        "K",
        "\u212a",  # Kelvin sign: folds to "k" in the candidate pattern, not ASCII
        "ı",
        "\ud800",
        "思",
        "🤔",
        " ",
        "\n",
        "word " * 60,  # 300 characters: sparse "<" stay hops, dense ones go to the rest path
        "if (a[1] < b && c <= d) { x = y << 2; } // <tag>\n" * 3,
    ]
)


@settings(max_examples=1500, deadline=None)
@given(parts=st.lists(_EDGE_PIECES, max_size=30), prompt_opened=st.booleans())
@example(parts=[], prompt_opened=False)
@example(parts=["<think>"], prompt_opened=False)
@example(parts=["</think>"], prompt_opened=True)
@example(parts=["<think>", "x < 3 ", "</think>", "x < 3 ", "a <= b ", "y << 2; ", "</thi"], prompt_opened=False)
@example(parts=["<think>", "</think>", "y << 2; ", "y << 2; ", "\u212a", "< think>"], prompt_opened=False)
def test_hypothesis_hop_edges_match_reference(parts: list[str], prompt_opened: bool) -> None:
    """Tags at the start and end, cut tags, case variants, dense and sparse "<", ASCII and wide rests."""
    text = "".join(parts)
    for markup in NAME_MARKUPS:
        assert_same(text, markup, prompt_opened=prompt_opened)
