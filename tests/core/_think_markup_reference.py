"""Reference copy of ``rl_guards/core/think_markup.py`` at main 0d407ed (before the str.find scanner rewrite).

Frozen on purpose: tests/core/test_think_markup_fast.py checks the current scanner against it verdict by verdict.
Do not edit it to follow the live module; a behaviour change there must show up as a differential failure.

Original docstring: think-markup scanner: is a completion ``<think>…</think>answer``, a plain answer, or malformed?

Pure Python (no torch / transformers), linear time: tags are located with ``str.find`` and near-miss tags with
one bounded regex, then a small state machine walks the tag events once.

Model of a completion (``prompt_opened=False``)::

    [whitespace] <think> thinking </think> [whitespace] answer

With ``prompt_opened=True`` the rendered prompt already ends inside an open block (the template prefilled
``<think>``), so the completion is ``thinking </think> answer``.

Anomaly codes (sorted, unique, in :attr:`MarkupVerdict.anomalies`):

==================== ====================================================================================
code                 meaning
==================== ====================================================================================
``unclosed_open``    a block is still open at the end (incl. a prompt-opened block never closed)
``stray_close``      a close tag while no block is open (the text since the previous tag is taken as
                     thinking whose open tag is missing, as DeepSeek's ``split('</think>')[-1]`` does)
``nested_open``      an open tag inside an open block (blocks do not nest: the next close ends it)
``double_open``      the first generated open tag inside a prompt-opened block (``<think><think>``)
``multiple_blocks``  a block opens after an earlier one was closed (e.g. ``<think>a</think><think>b</think>``)
``tag_in_answer``    a tag after answer text began, answer text being visible (non-whitespace) text after a
                     closed block. Independent of ``multiple_blocks``: two blocks separated only by
                     whitespace are ``multiple_blocks`` alone; ``</think>x<think>`` is both.
``text_before_open`` visible text before the first open tag (``Sure! <think>…``)
``empty_answer``     the last block closed and no visible answer text follows
``partial_tag``      a near-miss tag: a truncated tag at the very end (``<thi``, ``</think``), or for
                     ``<name>``-style markups a case/space/suffix variant anywhere (``<THINK>``,
                     ``< think>``, ``</think`` without ``>``, ``<think >``, ``<thinking>``)
``empty_thinking``   a closed block with only whitespace inside (informational: not malformed)
``ids_text_mismatch`` tag counts on token ids differ from counts on the text (informational)
``tag_in_nonthinking`` any tag in a non-thinking row (added by :func:`anomalies_for_mode` only)
==================== ====================================================================================

``kind`` is ``"anomalous"`` when any :data:`MALFORMED` code is present, else ``"thinking"`` when one block was
opened (by the prompt or the completion) and closed with a visible answer after it, else ``"answer"``.

Token ids: with ``token_ids``, ``open_id`` and ``close_id`` the same state machine runs on the id sequence
(the ground truth when TRL's tool parsing moved the thinking out of the text, or when tags are special tokens
that ``skip_special_tokens`` removed); its tag-structure codes are merged in. Only single-token tags can be
counted on ids.

Families (:data:`MARKUPS`):

* ``think``: ``<think>…</think>`` (Qwen3, DeepSeek-R1, GLM-4.5, Nemotron, LFM2.5, ...).
* ``gemma4``: ``<|channel>thought\\n…<channel|>answer``. The header ``thought`` is dropped from
  :attr:`MarkupVerdict.thinking`. If the tokenizer marks the channel tokens special, TRL's decoded
  completions lack them: scan text decoded with special tokens kept, or pass token ids.
* ``gptoss``: harmony ``<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>
  answer<|return|>``. The analysis message is the block; the answer is the text after the last
  ``<|channel|>final<|message|>``, with ``<|return|>``/``<|call|>`` removed. Limits: every harmony token is
  special, so only text decoded with special tokens kept carries the markup; the open tag is three tokens, so
  ids cannot be counted; the ``commentary`` channel (tool calls, preambles) is not modelled, so a preamble
  ending in ``<|end|>`` reads as ``stray_close`` and several analysis messages around tool calls read as
  ``multiple_blocks``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = [
    "ALL_CODES",
    "DOUBLE_OPEN",
    "EMPTY_ANSWER",
    "EMPTY_THINKING",
    "GEMMA4",
    "GPTOSS",
    "IDS_TEXT_MISMATCH",
    "INFORMATIONAL",
    "MALFORMED",
    "MARKUPS",
    "MULTIPLE_BLOCKS",
    "NESTED_OPEN",
    "PARTIAL_TAG",
    "STRAY_CLOSE",
    "TAG_IN_ANSWER",
    "TAG_IN_NONTHINKING",
    "TEXT_BEFORE_OPEN",
    "THINK",
    "UNCLOSED_OPEN",
    "MarkupVerdict",
    "ThinkMarkup",
    "anomalies_for_mode",
    "markup_for_template",
    "prompt_opens_block",
    "scan",
    "strip_thinking",
]

UNCLOSED_OPEN = "unclosed_open"
STRAY_CLOSE = "stray_close"
NESTED_OPEN = "nested_open"
DOUBLE_OPEN = "double_open"
MULTIPLE_BLOCKS = "multiple_blocks"
TAG_IN_ANSWER = "tag_in_answer"
TEXT_BEFORE_OPEN = "text_before_open"
EMPTY_ANSWER = "empty_answer"
PARTIAL_TAG = "partial_tag"
EMPTY_THINKING = "empty_thinking"
IDS_TEXT_MISMATCH = "ids_text_mismatch"
TAG_IN_NONTHINKING = "tag_in_nonthinking"

MALFORMED: frozenset[str] = frozenset(
    {
        UNCLOSED_OPEN,
        STRAY_CLOSE,
        NESTED_OPEN,
        DOUBLE_OPEN,
        MULTIPLE_BLOCKS,
        TAG_IN_ANSWER,
        TEXT_BEFORE_OPEN,
        EMPTY_ANSWER,
        PARTIAL_TAG,
    }
)
"""Codes that make a verdict ``anomalous``: the markup itself is broken."""

INFORMATIONAL: frozenset[str] = frozenset({EMPTY_THINKING, IDS_TEXT_MISMATCH})
"""Codes reported in ``anomalies`` that do not make a verdict anomalous on their own."""

ALL_CODES: tuple[str, ...] = tuple(sorted(MALFORMED | INFORMATIONAL | {TAG_IN_NONTHINKING}))

_MIN_PARTIAL = 4  # shortest tag prefix at the end of a text counted as a truncated tag ("<thi", "</th")
_NONSPACE = re.compile(r"\S")
_XML_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9_]*)>")


@dataclass(frozen=True)
class ThinkMarkup:
    """How one model family writes its reasoning block."""

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    name: str = "think"
    open_header: str = ""  # text a template writes right after the open tag ("thought" for gemma4)
    answer_marker: str = ""  # answer starts after the last occurrence of this marker (gptoss final channel)
    trailers: tuple[str, ...] = field(default=())  # end-of-message markers removed from the answer's end

    def __post_init__(self) -> None:
        if not self.open_tag or not self.close_tag or self.open_tag == self.close_tag:
            raise ValueError(
                f"ThinkMarkup needs two different non-empty tags, got {self.open_tag!r}/{self.close_tag!r}"
            )

    @property
    def tag_name(self) -> str | None:
        """``think`` for ``<think>``/``</think>``-style markups; None when the tags are not ``<name>``-shaped."""
        return _tag_name(self.open_tag, self.close_tag)


@lru_cache(maxsize=64)
def _tag_name(open_tag: str, close_tag: str) -> str | None:
    # Cached: scan() asks once per completion, and two regex matches cost more than the rest of a short scan.
    mo, mc = _XML_TAG.fullmatch(open_tag), _XML_TAG.fullmatch(close_tag)
    if mo and mc and open_tag == f"<{mo.group(1)}>" and close_tag == f"</{mo.group(1)}>":
        return mo.group(1)
    return None


THINK = ThinkMarkup()
GEMMA4 = ThinkMarkup(open_tag="<|channel>", close_tag="<channel|>", name="gemma4", open_header="thought")
GPTOSS = ThinkMarkup(
    open_tag="<|channel|>analysis<|message|>",
    close_tag="<|end|>",
    name="gptoss",
    answer_marker="<|channel|>final<|message|>",
    trailers=("<|return|>", "<|call|>"),
)
MARKUPS: dict[str, ThinkMarkup] = {"think": THINK, "gemma4": GEMMA4, "gptoss": GPTOSS}


@dataclass(frozen=True)
class MarkupVerdict:
    """What :func:`scan` found in one completion."""

    kind: str  # "answer" (no markup), "thinking" (one well-formed block + answer), "anomalous"
    anomalies: tuple[str, ...]  # sorted unique codes (MALFORMED and INFORMATIONAL)
    answer: str  # final answer, thinking removed as well as the scanner can, stripped
    thinking: str  # block contents joined by newlines, stripped
    open_count: int  # exact open tags in the text
    close_count: int  # exact close tags in the text
    has_tags: bool  # any exact tag in the text, or a tag id in token_ids
    prompt_opened: bool = False
    id_open_count: int | None = None  # open tags on token ids (None when ids were not given)
    id_close_count: int | None = None

    @property
    def is_anomalous(self) -> bool:
        return self.kind == "anomalous"


# ----- scanning ---------------------------------------------------------------------------------------------
def _tag_events(text: str, markup: ThinkMarkup) -> tuple[list[tuple[int, int, bool]], bool]:
    """Sorted, non-overlapping ``(start, end, is_open)`` of every exact tag, and whether a near-miss tag occurs.

    ``<name>``-style markups take one regex pass that finds exact and near-miss tags alike; others use
    ``str.find`` per tag (near misses are not defined for them).
    """
    name = markup.tag_name
    if name is not None:
        open_tag, close_tag = markup.open_tag, markup.close_tag
        events: list[tuple[int, int, bool]] = []
        near = False
        for m in _near_miss_regex(name).finditer(text):
            s = m.start()
            if text.startswith(open_tag, s):
                events.append((s, s + len(open_tag), True))
            elif text.startswith(close_tag, s):
                events.append((s, s + len(close_tag), False))
            elif not near:
                near = _is_near_miss(text, s, m.end(), name)
        return events, near
    events = []
    for tag, is_open in ((markup.open_tag, True), (markup.close_tag, False)):
        n = len(tag)
        i = text.find(tag)
        while i >= 0:
            events.append((i, i + n, is_open))
            i = text.find(tag, i + n)
    if not events:
        return events, False
    events.sort()
    kept = [events[0]]
    for ev in events[1:]:
        if ev[0] >= kept[-1][1]:
            kept.append(ev)
        elif ev[1] - ev[0] > kept[-1][1] - kept[-1][0]:  # overlapping tags: keep the longer one
            kept[-1] = ev
    return kept, False


@dataclass
class _Walk:
    codes: set[str]
    blocks: int  # blocks opened, prompt-opened included
    closed: int
    inside: bool
    answer_parts: list[tuple[int, int]]
    think_parts: list[tuple[int, int]]
    after_last_close: int  # index into answer_parts of the first part after the last close


def _walk(
    events: Sequence[tuple[int, int, bool]], length: int, prompt_opened: bool, text: str | None, header: str = ""
) -> _Walk:
    """Run the block state machine. ``text=None`` (token ids) skips the codes that need visible text."""

    def visible(a: int, b: int) -> bool:
        return text is not None and a < b and _NONSPACE.search(text, a, b) is not None

    def visible_thinking(a: int, b: int) -> bool:
        if not header or not visible(a, b):
            return False if header else visible(a, b)
        seg = text[a:b].strip()  # type: ignore[index]
        return bool(seg[len(header) :].strip()) if seg.startswith(header) else True

    codes: set[str] = set()
    inside = prompt_opened
    blocks = 1 if prompt_opened else 0
    closed = 0
    generated_open_in_block = False
    block_visible = False
    answer_started = False  # visible text after a closed block
    preamble = False  # visible text before any tag
    answer_parts: list[tuple[int, int]] = []
    think_parts: list[tuple[int, int]] = []
    after_last_close = 0
    cursor = 0
    for start, end, is_open in events:
        if inside:
            think_parts.append((cursor, start))
            block_visible = block_visible or visible_thinking(cursor, start)
            if is_open:
                if prompt_opened and closed == 0 and not generated_open_in_block:
                    codes.add(DOUBLE_OPEN)
                else:
                    codes.add(NESTED_OPEN)
                generated_open_in_block = True
            else:
                inside = False
                closed += 1
                after_last_close = len(answer_parts)
                if text is not None and not block_visible:
                    codes.add(EMPTY_THINKING)
        else:
            gap_visible = visible(cursor, start)
            if gap_visible:
                if closed:
                    answer_started = True
                else:
                    preamble = True
            if is_open:
                answer_parts.append((cursor, start))
                if answer_started:
                    codes.add(TAG_IN_ANSWER)
                if preamble and not closed:
                    codes.add(TEXT_BEFORE_OPEN)
                if blocks:
                    codes.add(MULTIPLE_BLOCKS)
                blocks += 1
                inside = True
                generated_open_in_block = True
                block_visible = False
            else:
                codes.add(STRAY_CLOSE)
                if answer_started:
                    codes.add(TAG_IN_ANSWER)
                # A close with no open: the text since the previous tag was thinking with a missing open tag.
                think_parts.append((cursor, start))
                blocks += 1
                closed += 1
                after_last_close = len(answer_parts)
                answer_started = False
                preamble = False
        cursor = end
    if inside:
        think_parts.append((cursor, length))
        codes.add(UNCLOSED_OPEN)
    else:
        answer_parts.append((cursor, length))
    return _Walk(codes, blocks, closed, inside, answer_parts, think_parts, after_last_close)


def _cut_tag_at_end(text: str, markup: ThinkMarkup) -> int:
    """Length of a truncated tag ending the text (a proper prefix of ``_MIN_PARTIAL``+ characters), else 0."""
    n = len(text)
    best = 0
    for tag in (markup.open_tag, markup.close_tag):
        if text.endswith(tag):
            return 0
        # Candidates start at an occurrence of the tag's first character within the last len(tag)-1 characters.
        i = text.find(tag[0], max(0, n - len(tag) + 1))
        while 0 <= i <= n - _MIN_PARTIAL:
            if n - i > best and tag.startswith(text[i:]):
                best = n - i
                break
            i = text.find(tag[0], i + 1)
    return best


def _is_near_miss(text: str, s: int, e: int, name: str) -> bool:
    """``text[s:e]`` is ``<``, blanks, ``/``, blanks, the name in any case, and not an exact tag: is it a tag?"""
    n = len(text)
    j = e
    if text[j : j + 3].lower() == "ing":
        j += 3
    k = j
    while k < n and k - j < 3 and text[k] in " \t":
        k += 1
    if k >= n or text[k] == ">":
        return True  # <THINK>, < think>, <think >, <thinking>, or a tag cut by the end of the text
    spaced = e - s != len(name) + 1 + (text[s + 1 : s + 2] == "/")
    # "</think" + newline, "<think/>", "<think about it": unspaced and not another word (<thinker>, <think_x>)
    return not spaced and j < n and not (text[j].isalnum() or text[j] == "_")


@lru_cache(maxsize=16)
def _near_miss_regex(name: str) -> re.Pattern[str]:
    # "<", optional blanks, optional "/", optional blanks, the tag name; bounded quantifiers: no backtracking.
    return re.compile(r"<[ \t]{0,3}/?[ \t]{0,3}" + re.escape(name), re.IGNORECASE)


def _id_events(token_ids: Sequence[int], open_id: int, close_id: int) -> list[tuple[int, int, bool]]:
    # list.index scans in C: a completion has thousands of ids and a handful of tags.
    ids = token_ids if isinstance(token_ids, list) else list(token_ids)
    events: list[tuple[int, int, bool]] = []
    for tag, is_open in ((open_id, True), (close_id, False)):
        i = -1
        while True:
            try:
                i = ids.index(tag, i + 1)
            except ValueError:
                break
            events.append((i, i + 1, is_open))
    events.sort()
    return events


def _clean_answer(text: str, parts: list[tuple[int, int]], markup: ThinkMarkup, cut: int = 0) -> str:
    """Join the answer parts; drop a tag cut by the end of the text (``cut`` chars), framing, and trailers."""
    if cut and parts and parts[-1][1] == len(text):
        parts = [*parts[:-1], (parts[-1][0], len(text) - cut)]
    answer = "\n".join(piece for a, b in parts if a < b and (piece := text[a:b].strip()))
    if markup.answer_marker:
        k = answer.rfind(markup.answer_marker)
        if k >= 0:
            answer = answer[k + len(markup.answer_marker) :]
    answer = answer.strip()
    if not markup.trailers:
        return answer
    # Trailers may repeat ("<|return|><|return|>"): move an end index rather than slice, so this stays linear.
    end = len(answer)
    changed = True
    while changed and end:
        changed = False
        for trailer in markup.trailers:
            if trailer and answer.endswith(trailer, 0, end):
                end = _rstrip_end(answer, end - len(trailer))
                changed = True
    return answer[:end]


def _rstrip_end(text: str, end: int) -> int:
    """The end index of ``text[:end].rstrip()``, without copying."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end


def _clean_thinking(text: str, parts: list[tuple[int, int]], markup: ThinkMarkup) -> str:
    pieces = []
    for a, b in parts:
        piece = text[a:b].strip()
        if markup.open_header and piece.startswith(markup.open_header):
            piece = piece[len(markup.open_header) :].strip()
        if piece:
            pieces.append(piece)
    return "\n".join(pieces)


def scan(
    text: str,
    markup: ThinkMarkup = THINK,
    *,
    prompt_opened: bool = False,
    token_ids: Sequence[int] | None = None,
    open_id: int | None = None,
    close_id: int | None = None,
) -> MarkupVerdict:
    """Classify one completion's think markup. Never raises on any ``str``; linear in ``len(text)``."""
    if not isinstance(text, str):
        raise TypeError(f"scan() needs a str, got {type(text).__name__}")
    events, near_miss = _tag_events(text, markup)
    open_count = sum(1 for e in events if e[2])
    close_count = len(events) - open_count
    walk = _walk(events, len(text), prompt_opened, text, markup.open_header)
    codes = walk.codes
    cut = _cut_tag_at_end(text, markup)
    answer = _clean_answer(text, walk.answer_parts, markup, cut)
    thinking = _clean_thinking(text, walk.think_parts, markup)
    if walk.closed and not walk.inside:
        last = walk.answer_parts[walk.after_last_close :]
        if not (answer if walk.after_last_close == 0 else _clean_answer(text, last, markup, cut)):
            codes.add(EMPTY_ANSWER)
    if near_miss or cut:
        codes.add(PARTIAL_TAG)

    id_open = id_close = None
    blocks, closed, inside = walk.blocks, walk.closed, walk.inside
    if token_ids is not None and open_id is not None and close_id is not None and open_id != close_id:
        id_events = _id_events(token_ids, open_id, close_id)
        id_open = sum(1 for e in id_events if e[2])
        id_close = len(id_events) - id_open
        id_walk = _walk(id_events, len(token_ids), prompt_opened, None)
        if (id_open, id_close) != (open_count, close_count):
            codes.add(IDS_TEXT_MISMATCH)
            if not events and id_events:
                # The text lost its tags (tool parsing moved the thinking out, or the tags are special tokens
                # that were skipped): the ids are the ground truth for the block structure.
                codes -= MALFORMED - {PARTIAL_TAG}
                blocks, closed, inside = id_walk.blocks, id_walk.closed, id_walk.inside
                answer, thinking = _clean_answer(text, [(0, len(text))], markup, cut), ""
        codes |= id_walk.codes

    anomalies = tuple(sorted(codes))
    if codes & MALFORMED:
        kind = "anomalous"
    elif blocks == 1 and closed == 1 and not inside:
        kind = "thinking"
    else:
        kind = "answer"
    has_tags = bool(events) or bool(id_open) or bool(id_close)
    return MarkupVerdict(
        kind=kind,
        anomalies=anomalies,
        answer=answer,
        thinking=thinking,
        open_count=open_count,
        close_count=close_count,
        has_tags=has_tags,
        prompt_opened=prompt_opened,
        id_open_count=id_open,
        id_close_count=id_close,
    )


def strip_thinking(text: str, markup: ThinkMarkup = THINK, *, prompt_opened: bool = False) -> str:
    """The final answer only (what a blind judge should see)."""
    return scan(text, markup, prompt_opened=prompt_opened).answer


def anomalies_for_mode(verdict: MarkupVerdict, thinking: bool) -> tuple[str, ...]:
    """Codes that are wrong for the row's mode.

    Thinking rows: the :data:`MALFORMED` codes. Non-thinking rows: any tag is wrong, so ``tag_in_nonthinking``
    (when the completion holds an exact tag, a tag id, or a near-miss tag) plus the malformed codes.
    """
    wrong = {c for c in verdict.anomalies if c in MALFORMED}
    if not thinking and (verdict.has_tags or PARTIAL_TAG in verdict.anomalies):
        wrong.add(TAG_IN_NONTHINKING)
    return tuple(sorted(wrong))


# ----- templates and prompts --------------------------------------------------------------------------------
def markup_for_template(template_text: str | None) -> ThinkMarkup:
    """Guess the markup family from a chat template string (``think`` when nothing else matches)."""
    if not template_text:
        return THINK
    if "<|channel|>analysis" in template_text or "<|channel|>final" in template_text:
        return GPTOSS
    if "<|channel>" in template_text and "<channel|>" in template_text:
        return GEMMA4
    return THINK


def prompt_opens_block(prompt_text: str, markup: ThinkMarkup = THINK) -> bool:
    """True when a rendered prompt ends inside an open block (the template prefilled the open tag).

    Only the end counts: the last open tag must come after the last close tag and be followed by nothing but
    whitespace (and the markup's ``open_header``), so a literal ``<think>`` in a user message does not count.
    """
    tail = prompt_text.rstrip()
    last_open = tail.rfind(markup.open_tag)
    if last_open < 0 or tail.rfind(markup.close_tag) > last_open:
        return False
    rest = tail[last_open + len(markup.open_tag) :].strip()
    return rest == "" or (bool(markup.open_header) and rest == markup.open_header)


def prompts_open_block(
    prompt_ids: Sequence[Sequence[int]], decode: Callable[[list[int]], str] | None, markup: ThinkMarkup = THINK
) -> list[bool]:
    """Per prompt (token ids): :func:`prompt_opens_block` on its decoded tail; each distinct tail decoded once.

    Only the last 32 tokens are decoded: a template's prefill sits at the very end. Without a decoder: all False.
    """
    if decode is None:
        return [False] * len(prompt_ids)
    cache: dict[tuple[int, ...], bool] = {}
    out = []
    for ids in prompt_ids:
        tail = tuple(ids[-32:])
        if tail not in cache:
            cache[tail] = bool(tail) and prompt_opens_block(decode(list(tail)), markup)
        out.append(cache[tail])
    return out
