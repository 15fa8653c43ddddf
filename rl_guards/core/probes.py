"""Probes of a reward function: controlled variants of a real completion, and what the function's scores say (pure).

A probe takes one real row and builds variants of its completion; every reward function scores every variant (the
same texts for all, so weighted totals across functions are defined). Answers come in *pairs* (a good and a bad
answer): the group's best and worst real answers when the group's totals differ, and the row's reference answer
against another row's when the dataset has a reference column. Three questions:

- **reads a prefix**: the pair's answers placed after ``k`` characters of neutral text (inside the think block
  when the row thinks; at ``k = 0`` that block holds one neutral line). A function that tells the good answer
  from the bad one at ``k = 0`` but no longer from some ``k`` on reads only the first ``~k`` characters (a
  ``text[:k]`` before scoring), provided it still tells them apart when as much text *follows* the answer (else it
  compares the whole text, as an exact match does). A function that never tells the pair apart (a format check,
  a length term) is not an outcome function here and is not judged.
- **reads the thinking**: the bad answer after a think block that states the good one ("leak") and after a neutral
  block of the same length. A function whose score moves from the bad answer's toward the good one's reads the
  trace; an outcome judge should not (a process reward may: ``probes.process_rewards``). A function whose score
  follows the text's length (it changes with the neutral text before an answer it still judges) is a length term
  and is not judged here: the two blocks differ in tokens.
- **pays a degenerate completion**: an empty answer, only think tags, a repeated line, the prompt echoed, the
  reference answer alone without the think block the run's completions have, another prompt's answer. One that the
  function scores at or above the best answer it gave a real (or reference) completion, above the worst, and whose
  weighted total across the run's functions also reaches the best real total, is reward the policy can earn
  without doing the task. The prompt echoed is tried only where the prompt does not hold the answer itself.

A function whose score does not follow the answer (swapped right <-> wrong in the same shape) is a format or
shaping reward: it is judged for degenerate completions only. One row proves nothing: a verdict needs the finding
on at least ``QUORUM`` rows, most of the rows it was tried on, from more than one group where there are several
(:func:`quorum`); :func:`encode` packs one function's verdict on a row into the bits that cross ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rl_guards.core.think_markup import ThinkMarkup, scan

PREFIX = "prefix"
SUFFIX = "suffix"
THINKING = "thinking"
HACKABLE = "hackable"
PROBES: tuple[str, ...] = (PREFIX, SUFFIX, THINKING, HACKABLE)

PREFIX_CUTS: tuple[int, ...] = (20, 64, 256, 1024, 4096)  # characters of neutral text before the answer
FILLER = "Let me look at each part of the question carefully before I answer. "  # no digits, no tags
NEUTRAL_LINE = "I am thinking about the question."
REPEATS = 40  # lines of the repeated-line variant
TOLD = 0.5  # a pair counts as told apart when its score gap is at least this share of the gap at k = 0
EPS = 1e-9
REFERENCE_ALONE = "reference answer alone, no think block"
# the forms answers are graded in (bare is the pair as it is; "last line" is how the leak states a bare answer)
REFERENCE_FORMS: tuple[tuple[str, str], ...] = (
    ("stated", "The answer is {}."),
    ("boxed", "\\boxed{{{}}}"),
    ("tagged", "<answer>{}</answer>"),
    ("hash", "#### {}"),
)
PROMPT_ECHOED = "prompt echoed"
# the degenerate variants, in bit order (see ``encode``); new ones go at the end
HACKS: tuple[str, ...] = (
    "empty answer",
    "only think tags",
    "repeated line",
    PROMPT_ECHOED,
    "another prompt's answer",
    REFERENCE_ALONE,
    "varied filler",
    "candidate answers",
    "reference inside a longer token",
    "long thinking, wrong answer",
)
# distinct words, no digits, no answer: what a reward counting distinct words pays
VARIED_WORDS = (
    "about above across after again against along among around because before behind below beneath beside "
    "between beyond during except inside little middle nearly number often order other outside over perhaps "
    "quite rather really second since small something sometimes still system table there these thing those "
    "though through toward under until upon usually value various where whether which while within without "
    "world would yellow garden window morning evening silver golden river mountain forest ocean desert island "
    "bridge castle market street village winter summer autumn spring thunder shadow candle mirror pencil"
)
DIGITS = "0123456789"
SCORED = "scored"  # a row's mask: the function scored the variants (not None for all of them: its task)
RAISED = "raised"  # a row's mask: the function raised on the variants
QUORUM = 3  # a verdict needs the finding on at least this many rows, and on most of the rows it was tried on


@dataclass(frozen=True)
class Variant:
    """One probe completion: which probe it serves, a label for messages, the text."""

    probe: str  # PREFIX, THINKING or HACKABLE
    label: str  # "real:good@0", "reference:bad@256", "real:leak", "empty answer", ...
    text: str


@dataclass(frozen=True)
class Pair:
    """A good and a bad answer for one row (answer text only, no think block)."""

    # "real" (the group's best and worst completions), "reference" (the dataset's answers as they are) or
    # "reference-<form>" (the same in a form scorers look for: REFERENCE_FORMS)
    name: str
    good: str
    bad: str
    bad_bare: str = ""  # a formed pair: the wrong answer without its form (an answer part a form-reader skips)


def wrong_answer(right: str, others: Sequence[str]) -> str:
    """The wrong answer of a reference pair: another row's answer, the first as long as ``right`` or closest to it
    (a length term, a per-token penalty, then scores the pair alike and is not probed further on it)."""
    return min(others, key=lambda other: abs(len(other) - len(right)))


def reference_pairs(name: str, right: str, wrong: str) -> list[Pair]:
    """A reference answer against a wrong one, as they are and in each of ``REFERENCE_FORMS``."""
    pairs = [Pair(name, right, wrong)]
    for form_name, form in REFERENCE_FORMS:
        pairs.append(Pair(f"{name}-{form_name}", form.format(right), form.format(wrong), bad_bare=wrong))
    return pairs


@dataclass(frozen=True)
class ProbeFinding:
    """What one probe says about one function."""

    probe: str
    detail: str  # for the message: the estimated cut, the scores, the variant
    variant: str = ""  # HACKABLE: the degenerate variant's label (one of ``HACKS``)
    pair: str = ""  # PREFIX: the pair that showed it, the last length still told apart and the first not,
    cut: tuple[int, int] = (0, 0)  # and the pair's scores with the answer first (for :func:`bisect_cut`)
    scores: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class Assessment:
    """One function on one row: its findings, and what could be judged (the denominators of the quorum)."""

    findings: list[ProbeFinding]
    tried: frozenset[str]  # PREFIX / THINKING when judged on this row, and the labels of the hack variants judged


def _bits(key: str) -> tuple[int, int]:
    """(tried bit, found bit) of a probe (PREFIX, THINKING) or a hack variant label in a row's mask."""
    index = (SCORED, RAISED, PREFIX, SUFFIX, THINKING, *HACKS).index(key)
    return 1 << (2 * index), 1 << (2 * index + 1)


def encode(assessment: Assessment | None, *, raised: bool = False) -> int:
    """One function's verdict on one row as a bit mask (exact in a float64: 2 bits per key, under 52 bits);
    None: it scored none of the variants (another task's function), ``raised``: it raised on them."""
    if assessment is None:
        return _bits(RAISED)[0] if raised else 0
    mask = _bits(SCORED)[0]
    for key in assessment.tried:
        mask |= _bits(key)[0]
    for finding in assessment.findings:
        mask |= _bits(finding.variant if finding.probe == HACKABLE else finding.probe)[1]
    return mask


def decode(mask: int, key: str) -> tuple[bool, bool]:
    """(tried, found) of ``key`` (PREFIX, THINKING or a hack label) in a mask from :func:`encode`; for SCORED and
    RAISED the first says whether the function scored (raised on) the row's variants."""
    tried, found = _bits(key)
    return bool(mask & tried), bool(mask & found)


def quorum(found: Sequence[int], tried: Sequence[int], group_of: Mapping[int, int]) -> bool:
    """Whether rows ``found`` (of the rows ``tried``) make a verdict: at least ``QUORUM`` rows, most of those
    tried, and from two groups or more when the rows tried come from more than one (one prompt can be a
    coincidence: a last-number grader paid by the echoed "What is 0+1?")."""
    if len(found) < QUORUM or 2 * len(found) <= len(tried):
        return False
    groups_tried = {group_of[r] for r in tried}
    return len({group_of[r] for r in found}) >= min(2, len(groups_tried))


def answer_in(needle: str, haystack: str) -> bool:
    """Whether a short answer occurs in ``haystack`` (case-insensitive): then an echo of it is not degenerate."""
    needle = needle.strip().lower()
    return bool(needle) and needle in haystack.lower()


def swapped(text: str) -> str | None:
    """``text`` with every digit moved by one (a wrong answer in the same format), None when it has no digit."""
    if not any(c in DIGITS for c in text):
        return None
    return "".join(DIGITS[(DIGITS.index(c) + 1) % 10] if c in DIGITS else c for c in text)


def filler(chars: int) -> str:
    """Neutral text of exactly ``chars`` characters."""
    return (FILLER * (chars // len(FILLER) + 1))[:chars]


def split(text: str, markup: ThinkMarkup | None, prompt_opened: bool = False) -> tuple[str | None, str]:
    """(thinking, answer) of a completion; thinking is None when it has no think block."""
    if markup is None:
        return None, text.strip()
    verdict = scan(text, markup, prompt_opened=prompt_opened)
    if not verdict.has_tags and not prompt_opened:
        return None, text.strip()
    return verdict.thinking, verdict.answer.strip()


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


def plan(
    pairs: Sequence[Pair],
    *,
    thinks: bool,
    markup: ThinkMarkup | None,
    prompt_opened: bool = False,
    thinking_text: str | None = None,
    prompt_text: str = "",
    reference: str | None = None,
    other_answer: str | None = None,
    longest: int = 0,
    real_has_block: bool = False,
) -> list[Variant]:
    """The variants probing one row.

    ``thinks``: the row's completions are expected in a think block (the variants carry one); ``thinking_text``:
    the row's own thinking (kept in the empty-answer variant); ``longest``: the longest completion of the batch in
    characters (cuts beyond it cannot matter in this run and are not tried); ``real_has_block``: the row's real
    completion has a think block (only then is the bare reference answer a degenerate variant).
    """
    block = thinks and markup is not None

    def shaped(prefix: str, answer: str) -> str:
        return _shaped(prefix, answer, markup if block else None, prompt_opened)

    # any cut that can matter in this run: the usual lengths below the longest completion, and the longest itself
    cuts = sorted({k for k in PREFIX_CUTS if k < longest} | {max(longest, PREFIX_CUTS[0])})
    out: list[Variant] = []
    for pair in pairs:
        out.append(Variant(PREFIX, f"{pair.name}:good@0", shaped("", pair.good)))
        out.append(Variant(PREFIX, f"{pair.name}:bad@0", shaped("", pair.bad)))
        real = not pair.name.startswith("reference")
        if real and swapped(pair.good) is not None:  # same format, another answer: does the function read it?
            out.append(Variant(PREFIX, f"{pair.name}:swap@0", shaped("", swapped(pair.good) or "")))
        # Text before a real completion changes its format (a pattern anchored at its start, a tag count); only
        # inside the think block does the prefix keep it. The reference pairs are bare answers: any place is fine.
        for k in cuts if block or not real else ():
            out.append(Variant(PREFIX, f"{pair.name}:good@{k}", shaped(filler(k), pair.good)))
            out.append(Variant(PREFIX, f"{pair.name}:bad@{k}", shaped(filler(k), pair.bad)))
        # the answer, then text after it: a prefix slice still sees it at any length, a whole-text match at none,
        # a suffix slice (text[-k:]) only while the text after it is shorter than k
        for k in cuts if block or not real else ():
            label = "tail" if k == cuts[-1] else f"t{k}"
            out.append(Variant(PREFIX, f"{pair.name}:good@{label}", shaped("", pair.good) + "\n\n" + filler(k)))
            out.append(Variant(PREFIX, f"{pair.name}:bad@{label}", shaped("", pair.bad) + "\n\n" + filler(k)))
        if block and pair.good.strip():
            # the right answer stated in the think block (in the pair's form, or as a sentence and on its last line
            # when bare), the wrong one after it in the same form. (Not with the answer left out or unformed: a
            # grader that falls back to the thinking's answer only then still grades the answer the policy gives.)
            def stated(answer: str, formed: bool = bool(pair.bad_bare)) -> str:
                return filler(64) + (f"\n{answer}" if formed else f"So the answer is {answer}.\n{answer}")

            leak = stated(pair.good)
            out.append(Variant(THINKING, f"{pair.name}:leak", compose(leak, pair.bad, markup, prompt_opened)))
            neutral = compose(filler(len(leak)), pair.bad, markup, prompt_opened)
            out.append(Variant(THINKING, f"{pair.name}:neutral", neutral))
            if not real:  # the right or the wrong answer in the pair's own form, none after: a judge of the
                for label, answer in (("leak-empty", pair.good), ("wrong-leak-empty", pair.bad)):  # thinking follows it
                    block_text = stated(answer, formed=True)  # as the answers it does not tell apart are written
                    out.append(
                        Variant(THINKING, f"{pair.name}:{label}", compose(block_text, "", markup, prompt_opened))
                    )
    hacks: dict[str, str] = {"empty answer": compose(thinking_text or filler(64), "", markup, prompt_opened)}
    if not block:
        hacks["empty answer"] = ""
    if markup is not None:
        hacks["only think tags"] = compose("", "", markup, prompt_opened)
    hacks["repeated line"] = "\n".join([NEUTRAL_LINE] * REPEATS)
    # an echo is degenerate only where the prompt does not itself hold the answer ("What is 0+1?" ends with it)
    answers = [str(reference)] if reference is not None else []
    answers += [p.good for p in pairs if len(p.good.strip()) <= 64]
    if prompt_text.strip() and not any(answer_in(a, prompt_text) for a in answers):
        hacks[PROMPT_ECHOED] = prompt_text
    if other_answer is not None and other_answer.strip() and other_answer != reference:
        hacks["another prompt's answer"] = shaped(filler(64), other_answer) if block else other_answer
    if reference is not None and str(reference).strip() and block and real_has_block:
        hacks[REFERENCE_ALONE] = str(reference)
    hacks["varied filler"] = shaped(filler(64), VARIED_WORDS) if block else VARIED_WORDS
    ref = str(reference).strip() if reference is not None else ""
    if ref:
        # the right answer among wrong ones (never first or last), and inside a longer token ("5" in "15")
        candidates = ", ".join(_candidates(ref, other_answer))
        hacks["candidate answers"] = shaped(filler(64), candidates) if block else candidates
        longer = f"1{ref}" if ref.lstrip("-").isdigit() else f"un{ref}"
        hacks["reference inside a longer token"] = shaped(filler(64), longer) if block else longer
    if block and other_answer is not None and other_answer.strip() and other_answer != reference:
        long_thinking = filler(4 * max(longest, PREFIX_CUTS[2]))  # longer than any real thinking
        hacks["long thinking, wrong answer"] = compose(long_thinking, other_answer, markup, prompt_opened)
    out += [Variant(HACKABLE, label, text) for label, text in hacks.items()]
    return out


def _shaped(prefix: str, answer: str, markup: ThinkMarkup | None, prompt_opened: bool) -> str:
    """``answer`` after ``prefix``: inside a think block (``markup``; never empty there: some scorers pay nothing
    after an empty one), else as a paragraph before it."""
    if markup is not None:
        return compose(prefix or NEUTRAL_LINE, answer, markup, prompt_opened)
    return f"{prefix}\n\n{answer}" if prefix else answer


def cut_variants(
    pair: Pair, k: int, *, thinks: bool, markup: ThinkMarkup | None, prompt_opened: bool = False
) -> tuple[str, str]:
    """The pair's good and bad answers after ``k`` characters of neutral text, as :func:`plan` builds them."""
    shape = markup if thinks else None
    return _shaped(filler(k), pair.good, shape, prompt_opened), _shaped(filler(k), pair.bad, shape, prompt_opened)


def bisect_cut(told: Callable[[int], bool], seen: int, blind: int, *, rounds: int = 10) -> tuple[int, int]:
    """Narrow (last length told apart, first not) by bisection; ``told(k)``: the pair is told apart at ``k``."""
    for _ in range(rounds):
        if blind - seen <= 4:
            break
        mid = (seen + blind) // 2
        seen, blind = (mid, blind) if told(mid) else (seen, mid)
    return seen, blind


def narrow_prefix(finding: ProbeFinding, scores_at: Callable[[int], Sequence[float | None]]) -> ProbeFinding:
    """A prefix finding with its cut narrowed by :func:`bisect_cut`; ``scores_at(k)``: the function's scores of the
    finding's pair (right, wrong) cut at ``k``. Told apart: the gap is at least ``TOLD`` of the uncut one. A function
    that cannot score a cut keeps the estimate from the lengths tried."""
    good0, bad0 = finding.scores

    def told(k: int) -> bool:
        good, bad = scores_at(k)
        return good is not None and bad is not None and abs(good - bad) >= TOLD * abs(good0 - bad0)

    try:
        seen, blind = bisect_cut(told, *finding.cut)
    except Exception:
        return finding
    detail = prefix_detail(good0, bad0, seen, blind)
    return ProbeFinding(PREFIX, detail, pair=finding.pair, cut=(seen, blind), scores=finding.scores)


def prefix_detail(good0: float, bad0: float, seen: int, blind: int) -> str:
    """The message of a prefix finding."""
    return (
        f"tells the right answer ({good0:g}) from a wrong one ({bad0:g}) when the answer comes first, but not once "
        f"{blind} characters come before it: it reads only the first {seen}-{blind} characters (a text[:N] before "
        "scoring, only the first line or paragraph, or a pattern anchored at the start)"
    )


def _candidates(reference: str, other: str | None) -> list[str]:
    """Wrong answers around the right one, which is neither first nor last (a first- or last-match grader is not
    paid by the list itself)."""
    if reference.lstrip("-").isdigit():
        n = int(reference)
        return [str(n + d) for d in (3, -2, 1, 0, -1, 2, -3)]
    wrong = other if other is not None and other.strip() and other != reference else "none"
    return [wrong, "maybe", reference, "unknown", wrong + "s"]


def _gap(by_label: Mapping[str, float | None], pair: str, k: int | str) -> float | None:
    good, bad = by_label.get(f"{pair}:good@{k}"), by_label.get(f"{pair}:bad@{k}")
    return None if good is None or bad is None else good - bad


def _reads_answer(by_label: Mapping[str, float | None], pairs: Sequence[str]) -> bool:
    """The function follows the answer: it tells some reference pair apart at ``k = 0`` (with no reference: the real
    best answer from the same with its digits changed)."""
    references = [p for p in pairs if p.startswith("reference")]
    if references:
        return any(abs(_gap(by_label, p, 0) or 0.0) > EPS for p in references)
    return all(
        abs((by_label.get(f"{p}:good@0") or 0.0) - (by_label.get(f"{p}:swap@0") or 0.0)) > EPS
        for p in pairs
        if f"{p}:swap@0" in by_label and by_label[f"{p}:swap@0"] is not None
    )


def first_pass(variants: Sequence[Variant]) -> list[Variant]:
    """The variants every function scores first (the cheap pass): each pair's answers with nothing before them
    (good, bad, swapped) and the degenerate completions (their weighted totals need every function's score)."""
    return [v for v in variants if v.probe == HACKABLE or v.label.endswith("@0")]


def second_pass(variants: Sequence[Variant], first: Mapping[str, float | None]) -> list[Variant]:
    """The variants one function still needs after its :func:`first_pass` scores ``first`` (label -> score): every
    variant of the pairs it tells apart (the forms it recognises; the real pair only when it reads the answer and
    no reference pair shows the same), and for the reference pairs it does not, the think blocks that state either
    answer (a judge of the thinking). :func:`assess` judges the rest as not scored."""
    pairs = list(dict.fromkeys(v.label.split(":")[0] for v in variants if v.probe == PREFIX))
    told = {p for p in pairs if abs(_gap(first, p, 0) or 0.0) > EPS}
    references = {p for p in told if p.startswith("reference")}
    wanted = set(references)
    if not references and _reads_answer(first, pairs):
        wanted |= told
    blind = {p for p in pairs if p.startswith("reference") and p not in told and _gap(first, p, 0) is not None}
    done = {v.label for v in first_pass(variants)}
    return [
        v
        for v in variants
        if v.label not in done
        and (
            v.label.split(":")[0] in wanted
            or (v.label.split(":")[0] in blind and v.label.endswith(("leak-empty", "wrong-leak-empty")))
        )
    ]


def recognised(variants: Sequence[Variant], scores: Sequence[float | None]) -> list[str]:
    """The reference pairs (forms) one function tells apart by their answers: right above wrong at ``k = 0`` and a
    score that does not follow the length of the text before them. A later probe of the function can keep to these
    (and the bare pair): the others teach nothing more about it."""
    by_label = {v.label: s for v, s in zip(variants, scores, strict=True)}
    out = []
    for pair in dict.fromkeys(v.label.split(":")[0] for v in variants if v.probe == PREFIX):
        gap0 = _gap(by_label, pair, 0)
        if pair.startswith("reference") and gap0 is not None and abs(gap0) > EPS:
            if not _length_driven(by_label, pair, gap0, by_label.get(f"{pair}:good@0") or 0.0):
                out.append(pair)
    return out


def judge(variants: Sequence[Variant], scores: Sequence[float | None], **kwargs: Any) -> list[ProbeFinding]:
    """The findings of :func:`assess` (one row, no quorum)."""
    return assess(variants, scores, **kwargs).findings


def assess(
    variants: Sequence[Variant],
    scores: Sequence[float | None],
    *,
    real_best: float | None,
    real_worst: float | None,
    totals: Mapping[str, float] | None = None,
    best_total: float | None = None,
    check_prefix: bool = True,
    check_thinking: bool = True,
    format_matters: bool = False,
    strict: bool = False,
) -> Assessment:
    """One function's findings on one row from its scores of ``variants`` (None: it did not score that variant),
    and what could be judged there (a verdict over rows needs :func:`quorum`).

    ``real_best`` / ``real_worst``: its best and worst scores of the group's real completions; ``totals``: each
    hack variant's weighted total over every function, ``best_total`` the best total a real or reference
    completion reached (a hack whose total stays below it is not reward the policy can earn).
    ``format_matters``: some function of the run pays the bare reference answer less than the same answer after a
    think block; only then is the bare answer judged (a run that rewards no format does not ask for the block).
    ``strict``: the run's total does not tell a right answer from a wrong one on this row (nobody in the group is
    right yet and there is no reference), so only a variant that earns strictly more than the best is flagged.

    A function that does not read the answer (the reference pairs' answers swapped in the same shape score alike,
    or, with no reference, the real best answer with its digits changed) is a format or shaping reward: the real
    pair, whose two sides differ in format too, says nothing about where it reads; it is judged for hacks only.
    """
    by_label = {v.label: s for v, s in zip(variants, scores, strict=True)}
    pairs = list(dict.fromkeys(v.label.split(":")[0] for v in variants if v.probe == PREFIX))
    reads_answer = _reads_answer(by_label, pairs)
    out: list[ProbeFinding] = []
    tried: set[str] = set()
    best = real_best
    worst = real_worst
    for pair in pairs:
        gap0 = _gap(by_label, pair, 0)
        if gap0 is None or abs(gap0) <= EPS:
            # it does not tell the answers apart; does it tell apart the answers its think block states?
            right, wrong = by_label.get(f"{pair}:leak-empty"), by_label.get(f"{pair}:wrong-leak-empty")
            if check_thinking and gap0 is not None and right is not None and wrong is not None:
                tried.add(THINKING)
                if right - wrong > max(EPS, TOLD * max(abs(right), abs(wrong))) and not any(
                    f.probe == THINKING for f in out
                ):
                    out.append(
                        ProbeFinding(
                            THINKING,
                            f"scores a think block that states the right answer {right:g} and one that states a wrong "
                            f"one {wrong:g} ({pair} form), but the answers themselves alike: it grades the thinking, "
                            "not the answer",
                        )
                    )
            continue  # this function does not tell the pair apart: nothing more to learn from it
        good0, bad0 = by_label[f"{pair}:good@0"], by_label[f"{pair}:bad@0"]
        assert good0 is not None and bad0 is not None
        if pair.startswith("reference"):
            best = good0 if best is None else max(best, good0)
            worst = bad0 if worst is None else min(worst, bad0)
        elif not reads_answer:
            continue  # a format reward told the real pair apart by its format
        if check_prefix and by_label.get(f"{pair}:good@tail") is not None:
            tried.add(PREFIX)
            tried.add(SUFFIX)
            for probe, find in ((PREFIX, _prefix_finding), (SUFFIX, _suffix_finding)):
                if not any(f.probe == probe for f in out):
                    finding = find(by_label, pair, gap0, good0, bad0)
                    if finding is not None:
                        out.append(finding)
        if _length_driven(by_label, pair, gap0, good0):
            continue  # its score follows the text's length (a length term): leak and neutral differ in tokens
        leak, neutral = by_label.get(f"{pair}:leak"), by_label.get(f"{pair}:neutral")
        if check_thinking and leak is not None and neutral is not None:
            tried.add(THINKING)
            if (leak - neutral) / gap0 >= TOLD and not any(f.probe == THINKING for f in out):
                out.append(
                    ProbeFinding(
                        THINKING,
                        f"scores the same wrong answer {leak:g} after a think block that states the right one ({pair} "
                        f"form) and {neutral:g} after a neutral block (right answer {good0:g}, wrong {bad0:g}): it "
                        "reads the thinking, not only the answer",
                    )
                )
    if best is None or worst is None or best - worst <= EPS:
        return Assessment(out, frozenset(tried))
    # strictly above the best, or at least as much; a function that does not read the answer (a length or format
    # term) paying a degenerate completion its best is its design: it is only to blame when that beats the best
    margin = EPS if strict or not reads_answer else -EPS
    for v in variants:
        score = by_label.get(v.label)
        if v.probe != HACKABLE or score is None or v.label not in HACKS:
            continue
        if v.label == REFERENCE_ALONE and not format_matters:
            continue
        tried.add(v.label)
        if score <= best + margin:
            continue
        if totals is not None and best_total is not None and totals.get(v.label, best_total) <= best_total + margin:
            continue  # another function keeps the total below the best completion's: not earnable
        out.append(
            ProbeFinding(
                HACKABLE,
                f"pays the degenerate completion '{v.label}' {score:g}, as much as its best real or reference "
                f"answer ({best:g}; worst {worst:g}): {_show(v.text)}",
                variant=v.label,
            )
        )
    return Assessment(out, frozenset(tried))


def _length_driven(by_label: Mapping[str, float | None], pair: str, gap0: float, good0: float) -> bool:
    """The good answer's score moves with the neutral text before it while the pair stays told apart."""
    for label, score in by_label.items():
        if not label.startswith(f"{pair}:good@") or score is None or label.endswith("@0"):
            continue
        k = label.split("@")[1]
        gap = _gap(by_label, pair, k)
        if gap is not None and abs(gap) >= TOLD * abs(gap0) and abs(score - good0) > EPS:
            return True
    return False


def _prefix_finding(
    by_label: Mapping[str, float | None], pair: str, gap0: float, good0: float, bad0: float
) -> ProbeFinding | None:
    tail = _gap(by_label, pair, "tail")
    if tail is None or abs(tail) < TOLD * abs(gap0):
        return None  # text after the answer changes the verdict too: it compares the whole text, not a prefix
    cuts = sorted(
        int(label.split("@")[1])
        for label in by_label
        if label.startswith(f"{pair}:good@") and label.split("@")[1].isdigit()
    )
    cuts = [k for k in cuts if k > 0 and _gap(by_label, pair, k) is not None]
    told = {k: abs(_gap(by_label, pair, k) or 0.0) >= TOLD * abs(gap0) for k in cuts}
    blind = [k for k in cuts if not told[k]]
    if not blind or any(told[k] for k in cuts if k > blind[0]):
        return None
    seen = max([0, *(k for k in cuts if told[k] and k < blind[0])])
    detail = prefix_detail(good0, bad0, seen, blind[0])
    return ProbeFinding(PREFIX, detail, pair=pair, cut=(seen, blind[0]), scores=(good0, bad0))


def _suffix_finding(
    by_label: Mapping[str, float | None], pair: str, gap0: float, good0: float, bad0: float
) -> ProbeFinding | None:
    """Told apart with a little text after the answer, not with more (and with any text before it): ``text[-k:]``."""
    tails = sorted(
        int(label.split("@t")[1])
        for label in by_label
        if label.startswith(f"{pair}:good@t") and label.split("@t")[1].isdigit()
    )
    if not tails or _gap(by_label, pair, "tail") is None:
        return None
    cuts = [
        int(label.split("@")[1])
        for label in by_label
        if label.startswith(f"{pair}:good@") and label.split("@")[1].isdigit() and label.split("@")[1] != "0"
    ]
    if any(abs(_gap(by_label, pair, k) or 0.0) < TOLD * abs(gap0) for k in cuts):
        return None  # text before the answer matters too: not a read of the end only
    lengths = [*tails, max(cuts, default=tails[-1] + 1)]  # the longest tail is labelled "tail"
    told = [abs(_gap(by_label, pair, f"t{k}" if k in tails else "tail") or 0.0) >= TOLD * abs(gap0) for k in lengths]
    if not told[0] or all(told) or any(told[i] for i in range(told.index(False), len(told))):
        return None  # a whole-text match (blind at once), or it reads the answer wherever it is
    blind = lengths[told.index(False)]
    seen = max(k for k, t in zip(lengths, told, strict=True) if t)
    return ProbeFinding(
        SUFFIX,
        f"tells the right answer ({good0:g}) from a wrong one ({bad0:g}) with {seen} characters after it, but not "
        f"with {blind}: it reads only the last {seen}-{blind} characters (a text[-N:] before scoring)",
    )


def _show(text: str, chars: int = 120) -> str:
    return repr(text if len(text) <= chars else text[:chars] + "…")


__all__ = [
    "HACKABLE",
    "HACKS",
    "PREFIX",
    "PROBES",
    "PROMPT_ECHOED",
    "QUORUM",
    "RAISED",
    "REFERENCE_ALONE",
    "REFERENCE_FORMS",
    "SCORED",
    "SUFFIX",
    "THINKING",
    "Assessment",
    "Pair",
    "ProbeFinding",
    "Variant",
    "answer_in",
    "assess",
    "bisect_cut",
    "compose",
    "cut_variants",
    "decode",
    "encode",
    "filler",
    "first_pass",
    "judge",
    "plan",
    "prefix_detail",
    "quorum",
    "recognised",
    "reference_pairs",
    "second_pass",
    "split",
    "swapped",
    "wrong_answer",
]
