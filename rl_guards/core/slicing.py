"""Detect strings cut short on their way somewhere (``text[:3000]``), from what is observable.

Three kinds of evidence, strongest first:

- **cut completion**: the completion text a reward function received is a strict prefix of the decoded
  completion tokens (decoded as TRL does, skipping special tokens). Proof of a cut between TRL's decode and
  the reward function. Needs the token ids and a decoder.
- **cut inside a text**: a watched text (e.g. a judge's input) contains the start of a completion and then
  stops matching it before the completion ends: the completion reached that call truncated.
- **length cap**: several distinct texts from one place share exactly one *round* length (a multiple of 100,
  128, 250 or 256), at least ``min_length`` long, and no text from that place is longer. Circumstantial:
  natural texts rarely line up on a round length, but nothing proves what they were before.

What cannot be seen: a cut inside a reward function that only uses the cut string internally (unless that call
is wrapped with :func:`rl_guards.rewards.slicing.watch_inputs`); a cut applied before the dataset reached the
trainer (prompts are only ever seen after it, so only the length-cap pattern hints at it); a cut at a
non-round or varying length (e.g. by tokens rather than characters).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

ROUND_MULTIPLES = (100, 128, 250, 256)
HEAD_CHARS = 32  # characters of a completion's start searched for inside a watched text


def is_round_length(n: int) -> bool:
    """True for lengths people type as caps: 500, 512, 1000, 1024, 1500, 2048, 3000, 4096, ..."""
    return n > 0 and any(n % m == 0 for m in ROUND_MULTIPLES)


@dataclass
class LengthCap:
    """Distinct texts from one place lined up on one round length."""

    where: str  # "completion", "prompt (user message)", "column 'context'", "input of judge", ...
    length: int  # characters
    count: int  # distinct texts of exactly this length
    total: int  # distinct texts from this place
    examples: list[str] = field(default_factory=list)  # tails of two of them

    def describe(self) -> str:
        tails = "; ".join(repr(e) for e in self.examples)
        return (
            f"{self.where}: {self.count} of {self.total} distinct texts are exactly {self.length} characters and none "
            f"is longer (ends: {tails})"
        )


def find_length_caps(
    texts: Sequence[str], where: str, *, min_repeats: int = 3, min_length: int = 64
) -> list[LengthCap]:
    """Round lengths shared by ``min_repeats`` or more distinct texts, with no longer text (see module doc)."""
    distinct = list(dict.fromkeys(t for t in texts if isinstance(t, str)))
    if not distinct:
        return []
    longest = max(len(t) for t in distinct)
    by_length: dict[int, list[str]] = defaultdict(list)
    for text in distinct:
        by_length[len(text)].append(text)
    caps = []
    for length, group in sorted(by_length.items()):
        if length >= min_length and length == longest and len(group) >= min_repeats and is_round_length(length):
            caps.append(LengthCap(where, length, len(group), len(distinct), [g[-40:] for g in group[:2]]))
    return caps


@dataclass
class CutText:
    """One text observed shorter than the text it came from."""

    row: int  # index of the completion it came from
    seen: int  # characters of the cut text (or of the completion's part inside it)
    full: int  # characters of the full text
    where: str
    seen_tail: str  # last characters before the cut
    lost_head: str  # first characters that were cut off


def find_cut_completions(completions: Sequence[str], decoded: Sequence[str]) -> list[CutText]:
    """Rows whose completion text is a strict prefix of its decoded tokens (non-whitespace lost)."""
    cuts = []
    for row, (text, full) in enumerate(zip(completions, decoded, strict=True)):
        if len(text) < len(full) and full.startswith(text) and full[len(text) :].strip():
            cuts.append(CutText(row, len(text), len(full), "completion", text[-40:], full[len(text) : len(text) + 40]))
    return cuts


def find_cut_inside(text: str, completions: Sequence[str], *, where: str, min_length: int = 64) -> CutText | None:
    """The completion ``text`` holds a cut copy of, or None.

    Candidates are completions of at least ``min_length`` characters whose first 32 characters occur in
    ``text``; the match runs from there as long as both agree. If some candidate is held whole (trailing
    whitespace aside), nothing was cut. Otherwise the candidate with the longest run is reported when that run
    is at least ``min_length`` (completions sharing an opening, common within a group, cannot fake a cut longer
    than the one that happened).
    """
    best: tuple[int, int, str] | None = None  # run, row, body
    for row, completion in enumerate(completions):
        body = completion.rstrip()
        if len(body) < max(min_length, HEAD_CHARS):
            continue
        pos = text.find(body[:HEAD_CHARS])
        while pos >= 0:
            run = _common_prefix(text, pos, body)
            if run >= len(body):
                return None
            if best is None or run > best[0]:
                best = (run, row, body)
            pos = text.find(body[:HEAD_CHARS], pos + 1)
    if best is None or best[0] < min_length:
        return None
    run, row, body = best
    return CutText(row, run, len(body), where, body[max(0, run - 40) : run], body[run : run + 40])


def _common_prefix(text: str, start: int, other: str) -> int:
    n = min(len(text) - start, len(other))
    i = 0
    # Compare in chunks first: judge inputs are long and mostly identical.
    step = 256
    while i + step <= n and text[start + i : start + i + step] == other[i : i + step]:
        i += step
    while i < n and text[start + i] == other[i]:
        i += 1
    return i
