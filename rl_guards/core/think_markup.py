"""Think-markup scanner: is a completion ``<think>…</think>answer``, a plain answer, or malformed?

Pure Python (no torch / transformers), linear time, and Python work per ``<``, not per character: the scan
hops from one ``<`` to the next with ``str.find`` (memchr) and checks each (exact tag, near-miss candidate, or
neither); past a budget of ``<`` that are not tags, or where they are dense (code), one compiled pattern walks the
rest in C, unless the rest is ASCII without the name's last letter. A small state machine then walks the tag events
once; the common shapes (no tag, one block) skip it.

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
from typing import Any

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

    # scan()'s common shapes leave ``answer`` and ``thinking`` as spans of the text (``_pieces``): most callers read
    # only the kind and codes, and copying the text into two new strings cost a quarter of a scan. Each is made on
    # its first read (the same string the eager path makes); eq, hash, repr, copy and pickle read them too.
    def __getattr__(self, name: str) -> Any:
        pieces = self.__dict__.get("_pieces")
        if pieces is None or name not in ("answer", "thinking"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = _piece(pieces, name)
        fields = self.__dict__
        fields[name] = value
        if "answer" in fields and "thinking" in fields:
            fields.pop("_pieces", None)  # (another thread may have made the other one)
        return value

    def __getstate__(self) -> dict[str, Any]:
        for name in ("answer", "thinking"):
            getattr(self, name)  # made from the spans, which are then dropped
        return dict(self.__dict__)


_Pieces = tuple[Any, ...]
"""A verdict's deferred ``answer``/``thinking``. Either one span each, ``(text, think_a, think_b, answer_a, answer_b,
before)`` (the common shapes), or the walk's parts, ``(text, think_parts, answer_parts, cut, markup)``."""


def _piece(pieces: _Pieces, name: str) -> str:
    """``answer`` or ``thinking`` of a verdict from scan()'s spans (see ``MarkupVerdict._pieces``)."""
    if len(pieces) == 5:
        text, think_parts, answer_parts, cut, markup = pieces
        if name == "thinking":
            return _clean_thinking(text, think_parts, markup)
        return _clean_answer(text, answer_parts, markup, cut)
    text, think_a, think_b, answer_a, answer_b, before = pieces
    if name == "thinking":
        return text[think_a:think_b].strip() if think_a < think_b else ""
    answer = text[answer_a:answer_b].strip() if answer_a < answer_b else ""
    if before:
        answer = f"{before}\n{answer}" if answer else before
    return answer


# ----- scanning ---------------------------------------------------------------------------------------------
# Cost model (CPython): a C-level pass over the text (str.find, a compiled pattern) costs 0.05-0.7 ns a
# character; a Python-level step costs 30-100 ns. So the text is crossed by C calls only, Python work is per tag
# or per "<", and the verdict is built from index pairs with one slice per answer/thinking piece.

_Event = tuple[int, int, bool]  # (start, end, is_open)

# "<" that are no tag checked one by one (two C calls, ~0.2 us) before one pattern pass (~0.6 ns a character, ~35 ns
# a "<") takes the rest: a budget that grows with the text, so neither way costs much more than the other. Dense
# "<" (code, HTML: three within _DENSE_SPAN characters) go to the pattern at once; a lone pair of close
# inequalities in prose does not (the pattern would walk the whole rest of the text).
_HOPS = 2
_HOP_SHIFT = 8
_DENSE_SPAN = 256


class _Plan:
    """Per-markup constants of a scan, computed once per :class:`ThinkMarkup` object."""

    __slots__ = (
        "candidate",
        "classify",
        "close_len",
        "close_tag",
        "cut_prefixes",
        "cut_span",
        "header",
        "markup",
        "name",
        "name_keys",
        "near_miss",
        "open_len",
        "open_tag",
        "plain",
        "quick",
        "tags",
    )

    def __init__(self, markup: ThinkMarkup) -> None:
        self.markup = markup
        self.open_tag, self.close_tag = markup.open_tag, markup.close_tag
        self.tags = (markup.open_tag, markup.close_tag)
        self.open_len, self.close_len = len(markup.open_tag), len(markup.close_tag)
        self.cut_span = max(self.open_len, self.close_len)  # a cut tag starts in the last cut_span - 1 characters
        cut = {tag[:k] for tag in self.tags for k in range(_MIN_PARTIAL, len(tag))}
        self.cut_prefixes = tuple(sorted(cut, key=len, reverse=True))
        self.header = markup.open_header
        self.name = markup.tag_name
        # plain: the answer is the text outside blocks, stripped (no answer marker, no trailers)
        self.plain = not markup.answer_marker and not markup.trailers
        # quick: scan()'s shortcuts apply (tags found by "<" hops, no header, plain)
        self.quick = self.name is not None and not self.header and self.plain
        self.near_miss = _near_miss_regex(self.name) if self.name is not None else None
        self.candidate = _candidate_regex(self.name) if self.name is not None else None
        self.classify = _classify_regex(self.name).match if self.name is not None else None
        # Both ASCII cases of the name's last character: in ASCII text every exact tag and candidate holds one (sre
        # folds an ASCII letter to its other ASCII case only; "ı", "K", "ſ" are not ASCII). One character, since
        # str.find runs memchr for a single character but ~1 ns a character for longer needles.
        last = self.name[-1] if self.name is not None else ""
        self.name_keys = tuple(dict.fromkeys((last.lower(), last.upper()))) if last else ()


_PLANS: dict[int, _Plan] = {}


def _plan(markup: ThinkMarkup) -> _Plan:
    # Keyed by id() with an identity check: hashing a frozen dataclass costs more than a short scan's Python work.
    plan = _PLANS.get(id(markup))
    if plan is None or plan.markup is not markup:
        if len(_PLANS) >= 64:
            _PLANS.clear()
        plan = _PLANS[id(markup)] = _Plan(markup)
    return plan


def _pattern_tag_events(text: str, pos: int, plan: _Plan, events: list[_Event], near: bool) -> bool:
    """Append the exact tags from ``pos`` on to ``events`` (one ``finditer`` of the candidate pattern).

    Returns whether a near miss occurs (``near``: one was found before ``pos``).
    """
    startswith = text.startswith
    open_tag, close_tag, open_len, close_len = plan.open_tag, plan.close_tag, plan.open_len, plan.close_len
    for m in plan.candidate.finditer(text, pos):  # type: ignore[union-attr]
        s = m.start()
        if startswith(open_tag, s):
            events.append((s, s + open_len, True))
        elif startswith(close_tag, s):
            events.append((s, s + close_len, False))
        elif not near:
            near = _near_miss_at(text, s, plan)
    return near


def _rest_tag_events(text: str, pos: int, plan: _Plan, events: list[_Event], near: bool) -> bool:
    """:func:`_pattern_tag_events`, skipped when an ASCII rest holds no case of the name's last character.

    Code answers: a ``<`` every ~20 characters costs the pattern ~35 ns each; two memchr passes cost ~0.02 ns a
    character.
    """
    if text.isascii():
        rest, start = text, pos
    else:
        rest, start = text[pos:], 0  # a slice is stored as narrow as its own characters allow
    if rest.isascii():
        find = rest.find
        for key in plan.name_keys:
            if find(key, start) >= 0:
                break
        else:
            return near
    return _pattern_tag_events(text, pos, plan, events, near)


def _near_miss_at(text: str, s: int, plan: _Plan) -> bool:
    """Is the ``<`` at ``s`` (not an exact tag) a near-miss tag?"""
    m = plan.near_miss.match(text, s)  # type: ignore[union-attr]
    return m is not None and _is_near_miss(text, s, m.end(), plan.name)  # type: ignore[arg-type]


def _literal_tag_events(text: str, markup: ThinkMarkup) -> tuple[list[_Event], bool]:
    """Tags of markups that are not ``<name>``-shaped, by ``str.find`` per tag; overlapping tags: the longer."""
    events: list[_Event] = []
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


class _Walk:
    """What the block state machine found (see :func:`_walk`)."""

    __slots__ = ("after_last_close", "answer_parts", "blocks", "closed", "codes", "inside", "think_parts")

    def __init__(
        self,
        codes: set[str],
        blocks: int,
        closed: int,
        inside: bool,
        answer_parts: list[tuple[int, int]],
        think_parts: list[tuple[int, int]],
        after_last_close: int,
    ) -> None:
        self.codes = codes
        self.blocks = blocks  # blocks opened, prompt-opened included
        self.closed = closed
        self.inside = inside
        self.answer_parts = answer_parts
        self.think_parts = think_parts
        self.after_last_close = after_last_close  # index into answer_parts of the first part after the last close


def _walk(events: Sequence[_Event], length: int, prompt_opened: bool, text: str | None, header: str = "") -> _Walk:
    """Run the block state machine. ``text=None`` (token ids) skips the codes that need visible text."""
    nonspace = _NONSPACE.search
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
            if not block_visible and text is not None and cursor < start and nonspace(text, cursor, start):
                block_visible = not header or _header_block_visible(text, cursor, start, header)
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
            if text is not None and cursor < start and nonspace(text, cursor, start):
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


def _header_block_visible(text: str, a: int, b: int, header: str) -> bool:
    """``text[a:b]`` has visible text (known) beyond a leading ``header`` (gemma4's ``thought``)."""
    seg = text[a:b].strip()
    return bool(seg[len(header) :].strip()) if seg.startswith(header) else True


def _cut_tag_at_end(text: str, plan: _Plan) -> int:
    """Length of a truncated tag ending the text (a proper prefix of ``_MIN_PARTIAL``+ characters), else 0.

    The longest such suffix over both tags; 0 when the text ends with a whole tag. Two ``endswith`` calls in C
    decide the usual case.
    """
    prefixes = plan.cut_prefixes  # longest first
    if not prefixes or not text.endswith(prefixes) or text.endswith(plan.tags):
        return 0
    for prefix in prefixes:
        if text.endswith(prefix):
            return len(prefix)
    return 0  # pragma: no cover - endswith(prefixes) found one above


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


@lru_cache(maxsize=16)
def _candidate_regex(name: str) -> re.Pattern[str]:
    """A superset of :func:`_near_miss_regex`'s matches (same starts) that is cheaper per ``<``.

    ``[ \\t/]{0,7}`` covers ``[ \\t]{0,3}/?[ \\t]{0,3}``; the name is matched with the same case folding. A
    match's span holds no ``<``, so ``finditer`` skips no candidate start.
    """
    return re.compile(r"<[ \t/]{0,7}(?i:" + re.escape(name) + ")")


@lru_cache(maxsize=16)
def _classify_regex(name: str) -> re.Pattern[str]:
    """The exact open tag (group 1), the exact close tag (group 2), or a :func:`_candidate_regex` match (no group).

    One anchored match per ``<`` instead of a ``startswith`` and a candidate match.
    """
    name = re.escape(name)
    return re.compile(rf"<(?:({name}>)|(/{name}>)|[ \t/]{{0,7}}(?i:{name}))")


def _id_events(token_ids: Sequence[int], open_id: int, close_id: int) -> list[_Event]:
    # list.index scans in C: a completion has thousands of ids and a handful of tags.
    ids = token_ids if isinstance(token_ids, list) else list(token_ids)
    events: list[_Event] = []
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


def _join_pieces(text: str, parts: Sequence[tuple[int, int]]) -> str:
    """The stripped, non-empty ``text[a:b]`` pieces joined by newlines."""
    if len(parts) == 1:
        a, b = parts[0]
        return text[a:b].strip() if a < b else ""
    pieces = []
    for a, b in parts:
        if a < b:
            piece = text[a:b].strip()
            if piece:
                pieces.append(piece)
    return "\n".join(pieces)


def _any_visible(text: str, parts: list[tuple[int, int]], cut: int) -> bool:
    """``_clean_answer(text, parts, markup, cut)`` is not empty, for a plain markup (no copy of the text)."""
    n = len(text)
    for a, b in parts:
        if b == n:  # only the last part reaches the end; a tag cut by the end is not answer text
            b -= cut
        if a < b and _NONSPACE.search(text, a, b):
            return True
    return False


def _clean_answer(text: str, parts: list[tuple[int, int]], markup: ThinkMarkup, cut: int = 0) -> str:
    """Join the answer parts; drop a tag cut by the end of the text (``cut`` chars), framing, and trailers."""
    if cut and parts and parts[-1][1] == len(text):
        parts = [*parts[:-1], (parts[-1][0], len(text) - cut)]
    answer = _join_pieces(text, parts)
    if markup.answer_marker:
        k = answer.rfind(markup.answer_marker)
        if k >= 0:
            answer = answer[k + len(markup.answer_marker) :]
        answer = answer.strip()
    if not markup.trailers:
        return answer
    answer = answer.strip()
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
    header = markup.open_header
    if not header:
        return _join_pieces(text, parts)
    pieces = []
    for a, b in parts:
        piece = text[a:b].strip()
        if piece.startswith(header):
            piece = piece[len(header) :].strip()
        if piece:
            pieces.append(piece)
    return "\n".join(pieces)


_new_verdict = object.__new__
_THINK_PLAN = _Plan(THINK)


def scan(
    text: str,
    markup: ThinkMarkup = THINK,
    *,
    prompt_opened: bool = False,
    token_ids: Sequence[int] | None = None,
    open_id: int | None = None,
    close_id: int | None = None,
    id_tags: Sequence[tuple[int, int]] | None = None,
) -> MarkupVerdict:
    """Classify one completion's think markup. Never raises on any ``str``; linear in ``len(text)``.

    ``token_ids`` with ``open_id``/``close_id``: the tags are also counted on the ids. ``id_tags``: their
    ``(position, id)`` in ``token_ids``, in order, when the caller found them already (a batched pass); the ids
    are then not searched again.

    Cost: a few ``str.find`` calls when the text's only ``<`` are its tags; two C calls per other ``<`` while they
    are sparse, then one compiled-pattern pass over the rest (or two memchr passes when an ASCII rest cannot hold a
    tag); Python work per tag, not per character.
    """
    if not isinstance(text, str):
        raise TypeError(f"scan() needs a str, got {type(text).__name__}")
    if markup is THINK:
        plan = _THINK_PLAN
    else:
        plan = _PLANS.get(id(markup))
        if plan is None or plan.markup is not markup:
            plan = _plan(markup)

    # ---- exact tags, near misses, a tag cut by the end of the text
    near_miss = False
    cut = 0
    open_count = 0
    events: list[_Event] = []
    if plan.name is not None:
        # Every tag and near miss starts with "<" and holds no other "<": hop from "<" to "<" with str.find
        # (memchr). A "<" that is no tag (inequality, code, near miss) costs one candidate match; past a budget of
        # them, or at three within _DENSE_SPAN characters (code), the rest goes to _rest_tag_events in C.
        find = text.find
        i = find("<")
        if i >= 0:
            classify = plan.classify
            hops = _HOPS + (len(text) >> _HOP_SHIFT)
            # The last two "<" that are no exact tag; the last one alone can start a tag cut by the end.
            last_other = before_last = -_DENSE_SPAN
            while i >= 0:
                # One anchored match decides a "<": exact open tag (group 1), exact close tag (group 2), near-miss
                # candidate (no group), or neither (None: "x < 3", code).
                m = classify(text, i)
                if m is not None:
                    tag = m.lastindex
                    if tag:
                        if tag == 1:
                            end = i + plan.open_len
                            events.append((i, end, True))
                            open_count += 1
                        else:
                            end = i + plan.close_len
                            events.append((i, end, False))
                        i = find("<", end)
                        continue
                if not hops or i - before_last < _DENSE_SPAN:
                    near_miss = _rest_tag_events(text, i, plan, events, near_miss)
                    open_count = sum(1 for event in events if event[2])
                    last_other = text.rfind("<")
                    break
                hops -= 1
                before_last, last_other = last_other, i
                if m is not None and not near_miss:
                    near_miss = _near_miss_at(text, i, plan)
                i = find("<", i + 1)
            if last_other > len(text) - plan.cut_span:
                cut = _cut_tag_at_end(text, plan)
    else:
        events, near_miss = _literal_tag_events(text, markup)
        open_count = sum(1 for event in events if event[2])
        cut = _cut_tag_at_end(text, plan)
    n_events = len(events)
    close_count = n_events - open_count

    # ---- the block state machine; the common shapes of a quick markup without the general walk: no tag, one
    # block, a prompt-opened block closed, an unclosed block, a stray close. These leave the answer and thinking as
    # spans (``pieces``: text, thinking span, answer span, text before the block put before the answer), made into
    # strings when first read; emptiness is one search for a non-space character (the whitespace str.strip removes).
    codes: set[str]
    pieces: _Pieces | None = None
    answer = thinking = ""
    quick = plan.quick
    visible = _NONSPACE.search
    if quick and n_events == 0:
        if prompt_opened:
            codes, blocks, closed, inside = {UNCLOSED_OPEN}, 1, 0, True
            pieces = (text, 0, len(text), 0, 0, "")
        else:
            codes, blocks, closed, inside = set(), 0, 0, False
            pieces = (text, 0, 0, 0, len(text) - cut, "")
    elif quick and n_events == 2 and open_count == 1 and events[0][2] and not prompt_opened:
        (s0, e0, _), (s1, e1, _) = events
        codes = set()
        before = text[:s0].strip() if s0 else ""
        if before:
            codes.add(TEXT_BEFORE_OPEN)
        if visible(text, e0, s1) is None:
            codes.add(EMPTY_THINKING)
        end = len(text) - cut  # a tag cut by the end of the text is not answer text
        if e1 >= end or visible(text, e1, end) is None:
            codes.add(EMPTY_ANSWER)
        pieces = (text, e0, s1, e1, end, before)
        blocks, closed, inside = 1, 1, False
    elif quick and n_events == 1 and not open_count and prompt_opened:
        s0, e0, _ = events[0]
        codes = set()
        if visible(text, 0, s0) is None:
            codes.add(EMPTY_THINKING)
        end = len(text) - cut
        if e0 >= end or visible(text, e0, end) is None:
            codes.add(EMPTY_ANSWER)
        pieces = (text, 0, s0, e0, end, "")
        blocks, closed, inside = 1, 1, False
    elif quick and n_events == 1 and not prompt_opened:
        s0, e0, _ = events[0]
        if open_count:  # a block never closed (the completion hit the length limit)
            before = text[:s0].strip() if s0 else ""
            codes = {TEXT_BEFORE_OPEN, UNCLOSED_OPEN} if before else {UNCLOSED_OPEN}
            pieces = (text, e0, len(text), 0, 0, before)
            blocks, closed, inside = 1, 0, True
        else:  # a close with no open: the text before it is thinking whose open tag is missing
            codes = {STRAY_CLOSE}
            end = len(text) - cut
            if e0 >= end or visible(text, e0, end) is None:
                codes.add(EMPTY_ANSWER)
            pieces = (text, 0, s0, e0, end, "")
            blocks, closed, inside = 1, 1, False
    else:
        walk = _walk(events, len(text), prompt_opened, text, plan.header)
        codes = walk.codes
        if plan.plain:  # the strings are joined when first read; emptiness without joining copies of the text
            pieces = (text, walk.think_parts, walk.answer_parts, cut, markup)
        else:
            answer = _clean_answer(text, walk.answer_parts, markup, cut)
            thinking = _clean_thinking(text, walk.think_parts, markup)
        if walk.closed and not walk.inside:
            last = walk.answer_parts[walk.after_last_close :]
            if plan.plain:  # visible text after the last close
                empty = not _any_visible(text, last, cut)
            elif walk.after_last_close == 0:
                empty = not answer
            else:
                empty = not _clean_answer(text, last, markup, cut)
            if empty:
                codes.add(EMPTY_ANSWER)
        blocks, closed, inside = walk.blocks, walk.closed, walk.inside
    if near_miss or cut:
        codes.add(PARTIAL_TAG)

    # ---- tags on token ids
    id_open = id_close = None
    if token_ids is not None and open_id is not None and close_id is not None and open_id != close_id:
        if id_tags is None:
            id_events = _id_events(token_ids, open_id, close_id)
        else:
            id_events = [(p, p + 1, t == open_id) for p, t in id_tags if t == open_id or t == close_id]
        id_open = 0
        for event in id_events:
            if event[2]:
                id_open += 1
        id_close = len(id_events) - id_open
        id_walk = _walk(id_events, len(token_ids), prompt_opened, None)
        if id_open != open_count or id_close != close_count:
            codes.add(IDS_TEXT_MISMATCH)
            if not events and id_events:
                # The text lost its tags (tool parsing moved the thinking out, or the tags are special tokens
                # that were skipped): the ids are the ground truth for the block structure.
                codes -= MALFORMED - {PARTIAL_TAG}
                blocks, closed, inside = id_walk.blocks, id_walk.closed, id_walk.inside
                answer, thinking, pieces = _clean_answer(text, [(0, len(text))], markup, cut), "", None
        codes |= id_walk.codes

    # ---- the verdict
    if not codes:
        anomalies: tuple[str, ...] = ()
        kind = "thinking" if blocks == 1 and closed == 1 and not inside else "answer"
    else:
        anomalies = tuple(sorted(codes))
        if not codes.isdisjoint(MALFORMED):
            kind = "anomalous"
        elif blocks == 1 and closed == 1 and not inside:
            kind = "thinking"
        else:
            kind = "answer"
    # The frozen dataclass __init__ sets each field through object.__setattr__ (about as slow as a short scan);
    # filling the instance dict builds the same object (eq, hash, repr, pickle), in field order.
    verdict = _new_verdict(MarkupVerdict)
    fields = verdict.__dict__
    fields["kind"] = kind
    fields["anomalies"] = anomalies
    if pieces is None:
        fields["answer"] = answer
        fields["thinking"] = thinking
    else:
        fields["_pieces"] = pieces
    fields["open_count"] = open_count
    fields["close_count"] = close_count
    fields["has_tags"] = n_events > 0 or bool(id_open) or bool(id_close)
    if prompt_opened:  # the last three fields have class defaults (False, None, None): stored when they differ
        fields["prompt_opened"] = True
    if id_open is not None:
        fields["id_open_count"] = id_open
        fields["id_close_count"] = id_close
    return verdict


def strip_thinking(text: str, markup: ThinkMarkup = THINK, *, prompt_opened: bool = False) -> str:
    """The final answer only (what a blind judge should see)."""
    fields = scan(text, markup, prompt_opened=prompt_opened).__dict__
    pieces = fields.get("_pieces")
    return fields["answer"] if pieces is None else _piece(pieces, "answer")


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
