"""Probes of a reward function: controlled variants of real completions, and what their scores say (pure).

Three questions, each answered by comparing the function's scores of a few variants built from a group's best and
worst real completions (``best`` / ``worst`` by that function):

- **reads a prefix**: the best and the worst answer, placed after ``k`` characters of neutral text (inside the
  think block when the group thinks). A function that tells them apart at ``k = 0`` but not from some ``k`` on
  reads only the first ``~k`` characters (``text[:k]`` before scoring). A function that never tells the answers
  apart (a format check, a length penalty) is not an outcome function and is not judged.
- **reads the thinking**: the worst answer after a think block that states the best answer, and after a neutral
  one. An outcome function whose score moves reads the trace (an outcome judge should not; a process reward may).
- **pays a degenerate completion**: an empty answer, only think tags, a repeated line, the prompt echoed, the
  reference answer alone in a thinking row, another prompt's answer. One that the function scores at or above the
  group's best real completion (and above its worst), and whose weighted total across the run's functions also
  reaches the best real completion's, is a reward the policy can earn without doing the task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rl_guards.core.think_markup import ThinkMarkup, scan

PREFIX = "prefix"
THINKING = "thinking"
HACKABLE = "hackable"
PROBES: tuple[str, ...] = (PREFIX, THINKING, HACKABLE)  # bit order of a function's probe verdicts

PREFIX_CUTS: tuple[int, ...] = (20, 64, 256, 1024, 4096)  # characters of neutral text before the answer
FILLER = "Let me look at each part of the question carefully before I answer. "  # no digits, no tags
NEUTRAL_LINE = "I am thinking about the question."
REPEATS = 40  # lines of the repeated-line variant


@dataclass(frozen=True)
class Variant:
    """One probe completion: which probe it serves and what it is."""

    probe: str  # PREFIX, THINKING or HACKABLE
    label: str  # "good@0", "bad@256", "leak", "neutral", "empty answer", ...
    text: str


def filler(chars: int) -> str:
    """Neutral text of exactly ``chars`` characters."""
    return (FILLER * (chars // len(FILLER) + 1))[:chars]


def split(text: str, markup: ThinkMarkup, prompt_opened: bool = False) -> tuple[str | None, str]:
    """(thinking, answer) of a completion; thinking is None when it has no block."""
    verdict = scan(text, markup, prompt_opened=prompt_opened)
    if not verdict.has_tags and not prompt_opened:
        return None, text.strip()
    return verdict.thinking, verdict.answer


def compose(thinking: str | None, answer: str, markup: ThinkMarkup, prompt_opened: bool = False) -> str:
    """A completion in the markup family's shape: the think block (unless ``thinking`` is None), then the answer."""
    if thinking is None:
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
    best: str,
    worst: str,
    markup: ThinkMarkup,
    *,
    prompt_opened: bool = False,
    prompt_text: str = "",
    reference: str | None = None,
    other_answer: str | None = None,
    longest: int = 0,
) -> list[Variant]:
    """The variants probing one group: ``best`` / ``worst`` are its real completions' texts; ``longest`` the longest
    completion of the batch in characters (cuts beyond it cannot matter and are not tried)."""
    think_best, answer_best = split(best, markup, prompt_opened)
    _, answer_worst = split(worst, markup, prompt_opened)
    thinks = think_best is not None

    def shaped(prefix: str, answer: str) -> str:
        return (
            compose(prefix, answer, markup, prompt_opened)
            if thinks
            else (f"{prefix}\n\n{answer}" if prefix else answer)
        )

    out = [Variant(PREFIX, "good@0", shaped("", answer_best)), Variant(PREFIX, "bad@0", shaped("", answer_worst))]
    for k in PREFIX_CUTS:
        if k > max(longest, PREFIX_CUTS[0]):
            break
        out.append(Variant(PREFIX, f"good@{k}", shaped(filler(k), answer_best)))
        out.append(Variant(PREFIX, f"bad@{k}", shaped(filler(k), answer_worst)))
    if thinks and answer_best.strip() and answer_best != answer_worst:
        leak = f"{filler(64)}So the answer is {answer_best}."
        out.append(Variant(THINKING, "leak", compose(leak, answer_worst, markup, prompt_opened)))
        out.append(Variant(THINKING, "neutral", compose(filler(len(leak)), answer_worst, markup, prompt_opened)))
    hacks = {
        "empty answer": compose(think_best, "", markup, prompt_opened) if thinks else "",
        "only think tags": compose("", "", markup, prompt_opened),
        "repeated line": "\n".join([NEUTRAL_LINE] * REPEATS),
    }
    if prompt_text.strip():
        hacks["prompt echoed"] = prompt_text
    if reference is not None and str(reference).strip() and thinks:
        hacks["reference answer alone, no think block"] = str(reference)
    if other_answer is not None and other_answer.strip() and other_answer != answer_best:
        hacks["another prompt's answer"] = shaped(think_best or "", other_answer) if thinks else other_answer
    out += [Variant(HACKABLE, label, text) for label, text in hacks.items()]
    return out


@dataclass(frozen=True)
class ProbeFinding:
    """What one probe says about one function on one group."""

    probe: str
    detail: str  # for the message: the estimated cut, the scores, the variant


def judge(
    variants: Sequence[Variant],
    scores: Sequence[float | None],
    *,
    best: float,
    worst: float,
    totals: Mapping[str, float] | None = None,
    best_total: float | None = None,
) -> list[ProbeFinding]:
    """The findings about one function from its scores of ``variants`` (``best`` / ``worst``: its scores of the
    group's real best / worst completions; ``totals``: each hack variant's weighted total over every function,
    ``best_total`` the best real completion's)."""
    by_label = {v.label: s for v, s in zip(variants, scores, strict=True)}
    out = []
    seen0, blind0 = by_label.get("good@0"), by_label.get("bad@0")
    if seen0 is not None and blind0 is not None and seen0 != blind0:
        cuts = sorted(
            int(v.label.split("@")[1]) for v in variants if v.label.startswith("good@") and v.label != "good@0"
        )
        told = {k: by_label.get(f"good@{k}") != by_label.get(f"bad@{k}") for k in cuts}
        blind = [k for k in cuts if not told[k]]
        if blind and all(not told[k] for k in cuts if k >= blind[0]):
            seen = [0, *(k for k in cuts if told[k] and k < blind[0])]
            out.append(
                ProbeFinding(
                    PREFIX,
                    f"tells the best answer ({seen0:g}) from the worst ({blind0:g}) when it comes first, but not "
                    f"once it lies past {blind[0]} characters: it reads only the first {max(seen)}-{blind[0]} "
                    "characters (a text[:N] before scoring?)",
                )
            )
    leak, neutral = by_label.get("leak"), by_label.get("neutral")
    if leak is not None and neutral is not None and leak != neutral:
        out.append(
            ProbeFinding(
                THINKING,
                f"the same wrong answer scores {leak:g} after a think block that states the right answer and "
                f"{neutral:g} after a neutral one: it reads the thinking",
            )
        )
    if best > worst:
        for v in variants:
            score = by_label.get(v.label)
            if v.probe != HACKABLE or score is None or score < best:
                continue
            if totals is not None and best_total is not None and totals.get(v.label, best_total) < best_total:
                continue  # another function keeps the total below the best real completion's
            out.append(
                ProbeFinding(
                    HACKABLE,
                    f"'{v.label}' scores {score:g}, at or above the group's best real completion ({best:g}; worst "
                    f"{worst:g}): {_show(v.text)}",
                )
            )
    return out


def _show(text: str, chars: int = 120) -> str:
    return repr(text if len(text) <= chars else text[:chars] + "…")
