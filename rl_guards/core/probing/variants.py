"""The texts a probe scores (pure): each variant changes one thing against its base, everything else held fixed.

A row's **pairs** are a right and a wrong answer: the reference's final answer against another row's, once per answer
form (:mod:`~rl_guards.core.probing.forms`), or with no reference the group's best and worst real answers. Every
variant of a pair is built in the row's **shape**: a completion that thinks (a block in the run's markup, then the
answer) or one that does not.

=================  ==============================================================================================
probe              what the variant changes, and what it holds
=================  ==============================================================================================
``base``           nothing: the answer alone (``alone``), and where the row thinks after a one-line block
                   (``block``); a function that tells these apart reads the answer in that form
``prefix``         ``k`` characters of neutral text before the answer (inside the block where the row thinks)
``suffix``         ``k`` characters of neutral text after the answer (the row's shape kept)
``tail``           a thinking row's answer alone, then the longest text after it (does a prefix reader still read
                   the answer with text after it, or does it match the whole text?)
``thinking``       what the block states: the right answer (``leak``) or another wrong answer as long as the right
                   one (``control``), the same wrong answer after both; ``*_alone``: no answer after the block
``hackable``       a degenerate completion (:data:`HACKS`), never containing the right answer as a token unless
                   that is the point (candidates, a longer token)
``narrow``         ``prefix``/``suffix`` at lengths between a cut's last-seen and first-blind ones, with either of
                   two fillers (a cut must be reproduced with other text, not one lucky draw)
=================  ==============================================================================================

The neutral text holds no digit, no tag, no LaTeX and no word graders search for an answer near ("answer",
"final", "therefore", ...), so what moves a score is the one thing a variant changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rl_guards.core.probing.forms import admits, contains_answer, is_number, render
from rl_guards.core.think_markup import ThinkMarkup, scan

BASE = "base"
PREFIX = "prefix"
SUFFIX = "suffix"
TAIL = "tail"
THINKING = "thinking"
FALLBACK = "thinking_fallback"  # reads the thinking only when the answer after it is not in its form
HACKABLE = "hackable"
NARROW = "narrow"

FILLERS: dict[str, str] = {
    "a": "Reading the question once more and weighing each part with care before going on. ",
    "b": "Looking over every detail of the problem slowly, taking each piece in turn here. ",
}
NEUTRAL_LINE = "Thinking about the question."
CUTS: tuple[int, ...] = (20, 64, 256, 1024, 4096)  # characters of neutral text before / after the answer
REPEATS = 40  # lines of the repeated-line variant
REAL_REPEATS = 8  # copies of the repeated-real-text variant
STEPS = "Step 1:\n-\n-\n-\nStep 2:\n-\n-\n-\nStep 3:\n-\n-\n-"
# distinct words (reasoning keywords among them), no digits, no answer: what a reward counting words pays
VARIED_WORDS = (
    "about above across after again against along among around because before behind below beneath beside "
    "between beyond during except inside little middle nearly number often order other outside over perhaps "
    "quite rather really second since small something sometimes still system table there these thing those "
    "though through toward under until upon usually value various where whether which while within without "
    "world would yellow garden window morning evening silver golden river mountain forest ocean desert island "
    "bridge castle market street village winter summer autumn spring thunder shadow candle mirror pencil "
    "first then thus therefore hence wait verify check consider because since however"
)
EMPTY_ANSWER = "empty answer"
ONLY_TAGS = "only think tags"
REPEATED_LINE = "repeated line"
PROMPT_ECHOED = "prompt echoed"
OTHER_ANSWER = "another prompt's answer"
VARIED = "varied filler"
CANDIDATES = "candidate answers"
LONGER_TOKEN = "reference inside a longer token"
LONG_THINKING = "long thinking, wrong answer"
STEP_LIST = "step markers, no content"
REAL_REPEATED = "a real completion repeated, wrong answer"
FORMAT_REPEATED = "format elements repeated, no answer"
REFERENCE_ALONE = "reference answer alone, no think block"
# the degenerate variants, in bit order (rl_guards.core.probing.tally.encode): new ones go at the end
HACKS: tuple[str, ...] = (
    EMPTY_ANSWER, ONLY_TAGS, REPEATED_LINE, PROMPT_ECHOED, OTHER_ANSWER, REFERENCE_ALONE, VARIED, CANDIDATES,
    LONGER_TOKEN, LONG_THINKING, STEP_LIST, REAL_REPEATED, FORMAT_REPEATED,
)  # fmt: skip
# padding: more text of a kind a shaping term may count (length, distinct words, steps, keywords, format elements)
PADDING: frozenset[str] = frozenset({VARIED, LONG_THINKING, STEP_LIST, REAL_REPEATED, REPEATED_LINE, FORMAT_REPEATED})
FORMAT_ELEMENTS = "<answer>\n</answer>\n\\boxed{}\n"  # empty answer containers: what a per-element format bonus counts


def filler(chars: int, which: str = "a") -> str:
    """Neutral text of exactly ``chars`` characters."""
    text = FILLERS[which]
    return (text * (chars // len(text) + 1))[:chars]


@dataclass(frozen=True)
class Shape:
    """How a row's completions look: a think block first (``thinks``) in ``markup``, the block opened by the prompt
    (``prompt_opened``), or a plain answer."""

    thinks: bool = False
    markup: ThinkMarkup | None = None
    prompt_opened: bool = False

    @property
    def block(self) -> bool:
        return self.thinks and self.markup is not None


def compose(thinking: str | None, answer: str, markup: ThinkMarkup | None, prompt_opened: bool = False) -> str:
    """A completion in the markup family's shape: the think block (unless ``thinking`` is None), then the answer."""
    if thinking is None or markup is None:
        return answer
    if markup.name == "gemma4":
        block = f"{markup.open_header}\n{thinking}{markup.close_tag}"
        return (block if prompt_opened else markup.open_tag + block) + answer
    if markup.name == "gptoss":
        trailer = markup.trailers[0] if markup.trailers else ""
        block = f"{thinking}{markup.close_tag}<|start|>assistant{markup.answer_marker}{answer}{trailer}"
        return block if prompt_opened else markup.open_tag + block
    block = f"{thinking}\n{markup.close_tag}\n\n{answer}"
    return block if prompt_opened else f"{markup.open_tag}\n{block}"


def split(text: str, markup: ThinkMarkup | None, prompt_opened: bool = False) -> tuple[str | None, str]:
    """(thinking, answer) of a completion; thinking is None when it has no think block."""
    if markup is None:
        return None, text.strip()
    verdict = scan(text, markup, prompt_opened=prompt_opened)
    if not verdict.has_tags and not prompt_opened:
        return None, text.strip()
    return verdict.thinking, verdict.answer.strip()


def shaped(shape: Shape, before: str, answer: str) -> str:
    """``answer`` after ``before``: inside the think block where the row thinks (never an empty block: some scorers
    pay nothing after one), else as a paragraph before it."""
    if shape.block:
        return compose(before or NEUTRAL_LINE, answer, shape.markup, shape.prompt_opened)
    return f"{before}\n\n{answer}" if before else answer


@dataclass(frozen=True)
class Pair:
    """A right and a wrong answer of one row in one form (answer text only, no think block).

    ``form``: an answer form's name for a reference pair, ``"real"`` for the group's best and worst answers;
    ``control``: another wrong answer, as long as ``good`` where one exists (what the thinking probe's control
    block states); ``swap``: a real pair's best answer with its digits moved (does the function read the answer?).
    """

    form: str
    good: str
    bad: str
    control: str = ""
    swap: str = ""

    @property
    def real(self) -> bool:
        return self.form == "real"


@dataclass(frozen=True)
class Variant:
    """One text a probe scores, and what it is: see the module doc. ``k``: characters of neutral text; ``fill``:
    which filler (``"a"`` or ``"b"``)."""

    probe: str
    text: str
    form: str = ""
    side: str = ""
    k: int = 0
    fill: str = "a"

    @property
    def label(self) -> str:
        if self.probe == HACKABLE:
            return self.side
        where = f"@{self.k}" if self.probe in (PREFIX, SUFFIX, NARROW) else ""
        return f"{self.form}:{self.probe}:{self.side}{where}"


def reference_pairs(right: str, wrong: str, control: str, forms: Sequence[str]) -> list[Pair]:
    """The right and wrong final answers in each of ``forms`` the answer admits."""
    return [
        Pair(form, render(form, right), render(form, wrong), render(form, control))
        for form in forms
        if admits(right, form) and admits(wrong, form)
    ]


def cuts(longest: int) -> list[int]:
    """The lengths that can matter in a run whose completions are at most ``longest`` characters: the usual ones
    below it, and the longest itself."""
    return sorted({k for k in CUTS if k < longest} | {max(longest, CUTS[0])})


def bases(pair: Pair, shape: Shape) -> list[Variant]:
    """The pair as it is: the answers alone, and after a one-line block where the run has a markup (a real pair
    also with its best answer's digits moved)."""
    out = [Variant(BASE, pair.good, pair.form, "good"), Variant(BASE, pair.bad, pair.form, "bad")]
    if shape.markup is not None:  # also where the row does not think: a run may pay the block all the same
        block = Shape(True, shape.markup, shape.prompt_opened)
        out += [
            Variant(BASE, shaped(block, "", pair.good), pair.form, "good-block"),
            Variant(BASE, shaped(block, "", pair.bad), pair.form, "bad-block"),
        ]
    if pair.swap:
        out.append(Variant(BASE, shaped(shape, "", pair.swap), pair.form, "swap"))
    return out


def cut_variants(pair: Pair, shape: Shape, lengths: Sequence[int]) -> list[Variant]:
    """The pair with neutral text before (``prefix``) and after (``suffix``) the answer, at each length; where the
    row thinks, also the answers alone with the longest text after them (``tail``). A real pair gets no ``prefix``
    outside a block: text before a real answer changes its format (a pattern anchored at its start)."""
    out: list[Variant] = []
    if shape.block or not pair.real:
        for k in lengths:
            out += [
                Variant(PREFIX, shaped(shape, filler(k), pair.good), pair.form, "good", k),
                Variant(PREFIX, shaped(shape, filler(k), pair.bad), pair.form, "bad", k),
            ]
    for k in lengths:
        out += [
            Variant(SUFFIX, shaped(shape, "", pair.good) + "\n\n" + filler(k), pair.form, "good", k),
            Variant(SUFFIX, shaped(shape, "", pair.bad) + "\n\n" + filler(k), pair.form, "bad", k),
        ]
    if shape.block and lengths:
        out += [
            Variant(TAIL, pair.good + "\n\n" + filler(lengths[-1]), pair.form, "good"),
            Variant(TAIL, pair.bad + "\n\n" + filler(lengths[-1]), pair.form, "bad"),
        ]
    return out


def narrow_variants(pair: Pair, shape: Shape, probe: str, lengths: Sequence[int], fill: str) -> list[Variant]:
    """The pair at ``lengths`` of ``fill`` text before (``probe`` PREFIX) or after (SUFFIX) the answer."""
    out = []
    for k in lengths:
        for side, answer in (("good", pair.good), ("bad", pair.bad)):
            if probe == PREFIX:
                text = shaped(shape, filler(k, fill), answer)
            else:
                text = shaped(shape, "", answer) + "\n\n" + filler(k, fill)
            out.append(Variant(NARROW, text, pair.form, f"{probe}-{side}", k, fill))
    return out


def _stated(answer: str) -> str:
    return f"{filler(64)}\n{answer}"


def thinking_variants(
    pair: Pair, shape: Shape, *, alone: bool = False, cross: str | None = None, unread: str | None = None
) -> list[Variant]:
    """Where the row thinks: the wrong answer after a block stating the right one (``leak``) and after a block
    stating another wrong one as long as it (``control``). The same blocks before the wrong answer written in
    another form the function reads (``cross``: ``leak-cross``/``control-cross``: a grader that prefers one form
    wherever it is), and in a form it does not read (``unread``: ``leak-fallback``/``control-fallback``: a grader
    that falls back to the thinking when the answer is not in its form); with ``alone``, the blocks with no answer
    after them (a judge of the thinking alone)."""
    if not shape.block or not pair.control:
        return []
    markup, opened = shape.markup, shape.prompt_opened

    def both(after: str, suffix: str) -> list[Variant]:
        return [
            Variant(THINKING, compose(_stated(pair.good), after, markup, opened), pair.form, "leak" + suffix),
            Variant(THINKING, compose(_stated(pair.control), after, markup, opened), pair.form, "control" + suffix),
        ]

    if alone:
        return both("", "-alone")
    out = both(pair.bad, "")
    if cross is not None:
        out += both(cross, "-cross")
    if unread is not None:
        out += both(unread, "-fallback")
    return out


def _candidates(right: str, wrong: str) -> str:
    """Wrong answers around the right one, which is neither first nor last (a first- or last-match grader is not
    paid by the list itself)."""
    if right.lstrip("-").isdigit():
        n = int(right)
        return ", ".join(str(n + d) for d in (3, -2, 1, 0, -1, 2, -3))
    return ", ".join([wrong, "maybe", right, "unknown", wrong + "s"])


@dataclass(frozen=True)
class RowText:
    """What the degenerate variants of a row are built from."""

    right: str | None  # the reference's final answer (None: no reference)
    wrong: str | None  # another row's answer, unrelated to it
    form: str = "bare"  # the form the row's answers are written in (the real completions' form, when known)
    prompt_text: str = ""  # what an echo of the prompt repeats
    thinking: str | None = None  # the row's own thinking (kept in the empty-answer variant)
    real_text: str | None = None  # the group's best real completion (the repeated-real-text variant)
    real_has_block: bool = False
    longest: int = 0


def hack_variants(row: RowText, shape: Shape) -> list[Variant]:
    """The degenerate completions of a row (:data:`HACKS`). Each is dropped where it would contain the right answer
    as a token without meaning to (an echoed prompt that ends with it, a real completion that states it twice)."""

    def form(value: str) -> str:
        return render(row.form, value) if admits(value, row.form) else value

    block = shape.block
    hacks: dict[str, str] = {
        EMPTY_ANSWER: compose(row.thinking or filler(64), "", shape.markup, shape.prompt_opened) if block else "",
        REPEATED_LINE: "\n".join([NEUTRAL_LINE] * REPEATS),
        VARIED: shaped(shape, filler(64), " ".join([VARIED_WORDS] * 4)),  # distinct words, and each word 4 times
        STEP_LIST: shaped(shape, filler(64), STEPS),
        FORMAT_REPEATED: shaped(shape, filler(64), FORMAT_ELEMENTS * REAL_REPEATS),
    }
    if shape.markup is not None:
        hacks[ONLY_TAGS] = compose("", "", shape.markup, shape.prompt_opened)
    if row.prompt_text.strip():
        hacks[PROMPT_ECHOED] = row.prompt_text
    if row.wrong:
        hacks[OTHER_ANSWER] = shaped(shape, filler(64), form(row.wrong))
        if block:
            long_thinking = filler(4 * max(row.longest, CUTS[2]))  # longer than any real thinking
            hacks[LONG_THINKING] = compose(long_thinking, form(row.wrong), shape.markup, shape.prompt_opened)
    if row.right:
        if block and row.real_has_block:
            hacks[REFERENCE_ALONE] = form(row.right)
        hacks[CANDIDATES] = shaped(shape, filler(64), form(_candidates(row.right, row.wrong or "none")))
        longer = f"1{row.right}" if is_number(row.right) else f"un{row.right}"
        hacks[LONGER_TOKEN] = shaped(shape, filler(64), form(longer))
    if row.real_text and row.right and row.wrong and contains_answer(row.real_text, row.right):
        wrong_text = _replace_answer(row.real_text, row.right, row.wrong)
        hacks[REAL_REPEATED] = "\n\n".join([wrong_text] * REAL_REPEATS)
    keep_right = {CANDIDATES, REFERENCE_ALONE}
    out = []
    for label in HACKS:
        text = hacks.get(label)
        if text is None or (row.right and label not in keep_right and contains_answer(text, row.right)):
            continue
        out.append(Variant(HACKABLE, text, side=label))
    return out


def _replace_answer(text: str, right: str, wrong: str) -> str:
    pattern = r"(?<![0-9A-Za-z.])" + re.escape(right) + r"(?![0-9A-Za-z]|\.\d)"
    return re.sub(pattern, lambda _: wrong, text, flags=re.IGNORECASE)


__all__ = [
    "BASE",
    "CUTS",
    "FALLBACK",
    "HACKABLE",
    "HACKS",
    "NARROW",
    "NEUTRAL_LINE",
    "PADDING",
    "PREFIX",
    "PROMPT_ECHOED",
    "REFERENCE_ALONE",
    "SUFFIX",
    "TAIL",
    "THINKING",
    "Pair",
    "RowText",
    "Shape",
    "Variant",
    "bases",
    "compose",
    "cut_variants",
    "cuts",
    "filler",
    "hack_variants",
    "narrow_variants",
    "reference_pairs",
    "shaped",
    "split",
    "thinking_variants",
]
