"""Loss masks, checked on plain lists: GRPO completion rows, SFT label rows, and a readable rendering of both.

No torch here. The GRPO rules are written once as a per-row reference (:func:`check_completion_row`,
:func:`check_prompt_row`); :mod:`rl_guards.tensors.grpo_masks` applies the same rules vectorised on device tensors and
the tests hold the two to each other. The SFT rules (:func:`check_label_row`) run as they are in the collator
wrapper, on the host.

Rendering: ``⟦masked⟧`` tokens carry no loss, ``«trained»`` tokens do, ``⟨!offending!⟩`` tokens broke a rule;
whitespace is visible (``·`` space, ``↵`` newline, ``⇥`` tab).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# ----- rule names (the ``kind`` of a violation) ----------------------------------------------------------------
MASK_VALUES = "mask_values"  # a mask holds something other than 0 and 1
POST_EOS = "post_eos"  # loss after the completion's first EOS
PADDING = "padding"  # loss on the padding of a completion that has no EOS
TRUNCATED_UNMASKED = "truncated_unmasked"  # mask_truncated_completions=True, yet a truncated row carries loss
MISSING_LOSS = "missing_loss"  # a generated token up to the first EOS carries no loss
TOOL_MASK = "tool_mask"  # tool_mask does not line up with the tool results
PROMPT_LEAK = "prompt_leak"  # completion_ids start with prompt tokens the model cannot have generated
PROMPT_OVERLAP = "prompt_overlap"  # every row starts with the same prompt tokens: a slice bug, or the model (warned)
PROMPT_MASK = "prompt_mask"  # prompt_mask is not a left-padded block matching prompt_ids != pad
REWARD_POSITION = "reward_position"  # a per-token reward on a position that carries no loss (verl's rm_scores)

# Reporting order: what corrupts gradients most directly first.
GRPO_KINDS: tuple[str, ...] = (
    MASK_VALUES,
    POST_EOS,
    PADDING,
    TRUNCATED_UNMASKED,
    MISSING_LOSS,
    TOOL_MASK,
    PROMPT_LEAK,
    PROMPT_MASK,
    PROMPT_OVERLAP,
    REWARD_POSITION,  # last: the row bits of the older rules keep their places
)
COMPLETION_KINDS = frozenset(GRPO_KINDS) - {PROMPT_MASK}  # every kind but the prompt mask's own: rows' completions
# Kinds the model's own choice of tokens can produce: evidence for a warning, never a stop.
SUSPECTED_KINDS = frozenset({PROMPT_OVERLAP})

PROMPT_TRAINED = "prompt_trained"  # SFT: a system/user/tool/header token has a label
ASSISTANT_UNTRAINED = "assistant_untrained"  # SFT: an assistant token (or its end-of-turn) has label -100
NOTHING_TRAINED = "nothing_trained"  # SFT: a whole batch without a single label
LABEL_MISMATCH = "label_mismatch"  # SFT: a trained label differs from the input id at its position
SFT_KINDS: tuple[str, ...] = (NOTHING_TRAINED, PROMPT_TRAINED, ASSISTANT_UNTRAINED, LABEL_MISMATCH)

IGNORE_INDEX = -100  # the label of a token that carries no loss (PyTorch cross-entropy's ignore_index)
LEAK_WINDOW = 16  # prompt tail lengths compared with a completion's head (a non-thinking Qwen3 header is 8)
REPEAT_WINDOW = 4  # a completion starting with this many of the prompt's first tokens repeats the prompt
HEAD_WINDOW = 64  # how far a repeat of the prompt's head is followed
UNIFORM_LEAK_MIN_ROWS = 4  # prompt_overlap: every row of a batch at least this large must show it

MASKED_OPEN, MASKED_CLOSE = "⟦", "⟧"
TRAINED_OPEN, TRAINED_CLOSE = "«", "»"
FLAG_OPEN, FLAG_CLOSE = "⟨!", "!⟩"
LEGEND = "⟦masked⟧ no loss · «trained» loss · ⟨!…!⟩ offending tokens · ␣=· ↵=newline"


@dataclass
class MaskReport:
    """What one mask check found: rows breaking each rule (local row indices), and totals."""

    num_rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # kind -> rows breaking it
    rows: dict[str, list[int]] = field(default_factory=dict)  # kind -> offending row indices
    violating_rows: int = 0  # rows breaking at least one rule

    @property
    def ok(self) -> bool:
        return self.violating_rows == 0

    @property
    def kinds(self) -> list[str]:
        """Rules broken, in reporting order."""
        order = {k: i for i, k in enumerate((*GRPO_KINDS, *SFT_KINDS))}
        return sorted((k for k, n in self.counts.items() if n), key=lambda k: order.get(k, len(order)))


# ----- rendering ------------------------------------------------------------------------------------------------
def visible(text: str) -> str:
    """Whitespace made visible on one line: space ``·``, newline ``↵``, tab ``⇥``, carriage return ``␍``."""
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")


def token_pieces(decode: Callable[[list[int]], str], ids: Sequence[int]) -> list[str]:
    """The text of each token, such that ``"".join(pieces) == decode(ids)`` for byte-level BPE.

    A character split over several tokens is given to the last of them (the others get ``""``).
    """
    pieces: list[str] = []
    pending: list[int] = []
    for token in ids:
        pending.append(int(token))
        text = decode(pending)
        if "\ufffd" in text and len(pending) < 4:
            pieces.append("")
            continue
        pieces.append(text)
        pending = []
    if pending:
        pieces[-1] = decode(pending)
    return pieces


def render_spans(
    pieces: Sequence[str],
    trained: Sequence[bool | int | float],
    flagged: Sequence[bool] | None = None,
    *,
    max_tokens: int = 96,
) -> str:
    """One row with its spans marked: ``⟦masked⟧``, ``«trained»``, ``⟨!offending!⟩``; whitespace visible.

    Rows longer than ``max_tokens`` are cut to a window around the first offending token, with ``…`` elisions.
    """
    n = len(pieces)
    if len(trained) != n or (flagged is not None and len(flagged) != n):
        raise ValueError(f"pieces, trained and flagged must have one entry per token ({n})")
    flags = [bool(f) for f in flagged] if flagged is not None else [False] * n
    start, stop = 0, n
    if n > max_tokens:
        first = next((i for i, f in enumerate(flags) if f), 0)
        start = max(0, min(first - max_tokens // 3, n - max_tokens))
        stop = start + max_tokens
    out: list[str] = ["…"] if start > 0 else []
    i = start
    while i < stop:
        on = bool(trained[i])
        j = i
        while j < stop and bool(trained[j]) == on:
            j += 1
        body: list[str] = []
        k = i
        while k < j:
            bad = flags[k]
            m = k
            while m < j and flags[m] == bad:
                m += 1
            text = visible("".join(pieces[k:m]))
            body.append(f"{FLAG_OPEN}{text}{FLAG_CLOSE}" if bad else text)
            k = m
        opening, closing = (TRAINED_OPEN, TRAINED_CLOSE) if on else (MASKED_OPEN, MASKED_CLOSE)
        out.append(opening + "".join(body) + closing)
        i = j
    if stop < n:
        out.append(f"…(+{n - stop} tokens)")
    return "".join(out)


# ----- GRPO: the per-row reference of the rules --------------------------------------------------------------------
@dataclass
class RowCheck:
    """Offending positions of one row, per rule (empty lists when clean)."""

    positions: dict[str, list[int]] = field(default_factory=dict)
    has_eos: bool = False  # the row ends with an EOS the model generated
    content_end: int = -1  # last position of the generated tokens (the EOS when there is one)

    @property
    def kinds(self) -> set[str]:
        return {k for k, v in self.positions.items() if v}

    def add(self, kind: str, position: int) -> None:
        self.positions.setdefault(kind, []).append(position)


def completion_end(
    ids: Sequence[int],
    loss: Sequence[float],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    tool_mask: Sequence[int] | None = None,
) -> tuple[bool, int]:
    """``(has_eos, content_end)`` of one right-padded completion row.

    The end is the first EOS the model produced itself (``tool_mask`` 1) that a tool result does not follow. When
    the pad token is also an EOS (Qwen: ``<|endoftext|>``), a first "EOS" that is a pad and carries no loss is
    read as the padding of a truncated row: from the ids alone the two cannot be told apart.
    """
    eos = set(eos_token_ids)
    n = len(ids)
    tm = list(tool_mask) if tool_mask is not None else [1] * n
    for j, token in enumerate(ids):
        follows_tool = j + 1 < n and tm[j + 1] == 0
        if token in eos and tm[j] == 1 and not follows_tool:
            if token == pad_token_id and loss[j] == 0:
                return False, j - 1
            return True, j
    last = max((j for j, t in enumerate(ids) if t != pad_token_id), default=-1)
    return False, last


def check_completion_row(
    ids: Sequence[int],
    completion_mask: Sequence[float],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    mask_truncated: bool,
    tool_mask: Sequence[int] | None = None,
    tool_head_ids: Sequence[int] = (),
    tool_tail_ids: Sequence[int] = (),
    token_rewards: Sequence[float] | None = None,
) -> RowCheck:
    """The completion rules on one row; the loss weight is ``completion_mask * tool_mask`` as in TRL's loss.

    - ``mask_values``: masks are 0/1; ``post_eos``: no loss after the first EOS; ``padding``: none on the padding of
      a row without EOS; ``truncated_unmasked``: with ``mask_truncated`` a row without EOS carries none;
      ``missing_loss``: otherwise every generated token up to the EOS does (tool results aside);
      ``tool_mask``: each tool-result span starts right after the model's EOS and, when known, starts with
      ``tool_head_ids`` and ends with ``tool_tail_ids``;
    - ``reward_position``: with ``token_rewards`` (a framework that places each row's reward on a token, as verl's
      ``rm_scores`` does), no reward sits on a position without loss. verl writes an empty response's reward on the
      last padding column, and GRPO sums the row unmasked: the reward enters its group's statistics while no token
      of the row can learn from it.
    """
    n = len(ids)
    if len(completion_mask) != n or (tool_mask is not None and len(tool_mask) != n):
        raise ValueError("completion_ids, completion_mask and tool_mask must have the same length")
    if token_rewards is not None and len(token_rewards) != n:
        raise ValueError("token_rewards must have one value per completion position")
    tm = list(tool_mask) if tool_mask is not None else [1] * n
    loss = [c * t for c, t in zip(completion_mask, tm, strict=True)]
    has_eos, end = completion_end(
        ids, loss, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id, tool_mask=tool_mask
    )
    out = RowCheck(has_eos=has_eos, content_end=end)
    masked_truncated = mask_truncated and not has_eos
    eos = set(eos_token_ids)
    for j in range(n):
        if completion_mask[j] not in (0, 1) or tm[j] not in (0, 1):
            out.add(MASK_VALUES, j)
        if j > end:
            if loss[j] != 0:
                out.add(POST_EOS if has_eos else PADDING, j)
            continue
        if masked_truncated and loss[j] != 0:
            out.add(TRUNCATED_UNMASKED, j)
        if not masked_truncated and tm[j] != 0 and loss[j] == 0:
            out.add(MISSING_LOSS, j)
    if tool_mask is not None and not masked_truncated:  # a row without loss has no tool_mask to get wrong
        for j in range(end + 1):
            if tm[j] != 0:
                continue
            if j == 0 or tm[j - 1] != 0:  # a tool span starts here
                after_model_eos = j > 0 and ids[j - 1] in eos
                head_ok = list(ids[j : j + len(tool_head_ids)]) == list(tool_head_ids)
                if not (after_model_eos and head_ok):
                    out.add(TOOL_MASK, j)
            if j + 1 <= end and tm[j + 1] != 0:  # a tool span ends here, model tokens follow
                lo = j + 1 - len(tool_tail_ids)
                if lo < 0 or list(ids[lo : j + 1]) != list(tool_tail_ids):
                    out.add(TOOL_MASK, j)
    for j, reward in enumerate(token_rewards or ()):
        if reward != 0 and loss[j] == 0:
            out.add(REWARD_POSITION, j)
    return out


def check_prompt_row(prompt_ids: Sequence[int], prompt_mask: Sequence[int], *, pad_token_id: int | None) -> list[int]:
    """Positions where ``prompt_mask`` is not a left-padded block matching ``prompt_ids != pad``.

    Flags: values other than 0/1; a 1 followed by a 0; a 0 on a real token; a 1 on left padding (all but the last
    leading pad, which may be a real BOS when pad and BOS share an id).
    """
    n = len(prompt_ids)
    if len(prompt_mask) != n:
        raise ValueError("prompt_ids and prompt_mask must have the same length")
    bad: list[int] = []
    lead = 0
    while lead < n and prompt_ids[lead] == pad_token_id:
        lead += 1
    for j in range(n):
        m = prompt_mask[j]
        wrong = (
            m not in (0, 1)
            or (m == 1 and j + 1 < n and prompt_mask[j + 1] == 0)
            or (m == 0 and prompt_ids[j] != pad_token_id)
            or (m != 0 and j + 1 < lead)
        )
        if wrong:
            bad.append(j)
    return bad


def prompt_overlap_length(prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> int:
    """How many of the completion's first tokens repeat the (unpadded) prompt, from 2 tokens: its tail (up to
    ``LEAK_WINDOW``) or its head (at least ``REPEAT_WINDOW`` tokens, or the whole prompt; followed up to
    ``HEAD_WINDOW``); 0 when neither. A single repeated token (a newline) is never counted: it happens by chance."""
    tail = 0
    for k in range(2, min(LEAK_WINDOW, len(prompt_ids), len(completion_ids)) + 1):
        if list(completion_ids[:k]) == list(prompt_ids[-k:]):
            tail = k
    head = 0
    for a, b in zip(completion_ids[:HEAD_WINDOW], prompt_ids[:HEAD_WINDOW], strict=False):
        if a != b:
            break
        head += 1
    counted = head >= REPEAT_WINDOW or (head == len(prompt_ids) and head >= 2)
    return max(tail, head if counted else 0)


def prompt_leak_verdicts(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    eos_token_ids: Sequence[int],
    markup_ids: Sequence[int] = (),
) -> tuple[list[int], list[bool]]:
    """Per row: the certain leak length (0: none) and whether the row shows a suspected overlap.

    Certain (``prompt_leak``): the overlap holds an end-of-sequence token followed by more of the prompt. Generation
    stops at EOS, so the model cannot have produced these tokens: the rollout path put prompt tokens into
    ``completion_ids``. Suspected (``prompt_overlap``, a warning): in a batch of at least ``UNIFORM_LEAK_MIN_ROWS``
    rows, every row overlaps its prompt by 2+ tokens and the overlap is either the same tokens on every row (the
    template's generation prompt again) or the whole prompt, and is not only think tags and whitespace. A
    collapsing policy can write that itself, so it is never a stop.
    """
    eos = {int(e) for e in eos_token_ids}
    markup = {int(t) for t in markup_ids}
    lengths = [prompt_overlap_length(p, c) for p, c in zip(prompts, completions, strict=True)]
    certain = [
        n if n >= 2 and any(int(t) in eos for t in c[: n - 1]) else 0 for n, c in zip(lengths, completions, strict=True)
    ]
    b = len(lengths)
    suspected = [False] * b
    if b >= UNIFORM_LEAK_MIN_ROWS and all(n >= 2 for n in lengths):
        k = min(lengths)
        same = all(list(c[:k]) == list(completions[0][:k]) for c in completions)
        whole = all(n == len(p) for n, p in zip(lengths, prompts, strict=True))
        markup_only = all(all(int(t) in markup for t in c[:k]) for c in completions)
        if (same or whole) and not markup_only:
            suspected = [not c for c in certain]
    return certain, suspected


# ----- SFT: assistant spans and labels -------------------------------------------------------------------------------
@dataclass(frozen=True)
class AssistantMarkers:
    """Token ids around an assistant turn, derived from a chat template by rendering probe conversations.

    ``header`` opens an assistant turn (e.g. ``<|im_start|>assistant↵``); ``end`` closes it (``<|im_end|>``) and
    belongs to the turn (the model must learn to emit it); ``trailer`` is what the template writes after ``end``
    (``↵``) and ``closing`` what it adds after a conversation's final turn (phi3: the eos); either way is fine
    for their labels.
    """

    header: tuple[int, ...]
    end: tuple[int, ...]
    trailer: tuple[int, ...] = ()
    closing: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.header or not self.end:
            raise ValueError("AssistantMarkers needs a non-empty header and end")


def find_subsequence(ids: Sequence[int], pattern: Sequence[int], start: int = 0) -> int:
    """First index ``>= start`` where ``pattern`` occurs in ``ids``, or -1."""
    k = len(pattern)
    if k == 0:
        return start
    first = pattern[0]
    pat = list(pattern)
    for i in range(start, len(ids) - k + 1):
        if ids[i] == first and list(ids[i : i + k]) == pat:
            return i
    return -1


@dataclass(frozen=True)
class Span:
    """An assistant turn: ``header`` starts at ``header_start``; tokens ``[start, stop)`` carry loss (end included)."""

    header_start: int
    start: int
    stop: int
    trailer_stop: int  # end of what the template writes after the end marker (trailer, closing)


def find_assistant_spans(ids: Sequence[int], markers: AssistantMarkers, length: int | None = None) -> list[Span]:
    """The assistant turns of one tokenized conversation (``length``: real tokens, before padding).

    A turn cut by truncation runs to ``length``.
    """
    n = len(ids) if length is None else length
    row = list(ids[:n])
    spans: list[Span] = []
    i = 0
    while True:
        h = find_subsequence(row, markers.header, i)
        if h < 0:
            break
        start = h + len(markers.header)
        e = find_subsequence(row, markers.end, start)
        stop = n if e < 0 else e + len(markers.end)
        trailer_stop = stop
        for extra in (markers.trailer, markers.closing):
            if extra and row[trailer_stop : trailer_stop + len(extra)] == list(extra):
                trailer_stop += len(extra)
        spans.append(Span(h, start, stop, trailer_stop))
        i = stop
    return spans


def check_label_row(
    labels: Sequence[int],
    spans: Sequence[Span],
    length: int,
    *,
    expect: str,
    ignore_index: int = IGNORE_INDEX,
) -> dict[str, list[int]]:
    """Offending positions of one SFT row, per rule.

    ``expect="assistant_only"``: every token outside the assistant spans has ``ignore_index`` (``prompt_trained``
    otherwise; the assistant header and the whitespace after the end marker may go either way) and every token inside,
    end-of-turn included, has a label (``assistant_untrained``). ``"completion_only"``: the first trained token
    follows a masked prompt: not at position 0 and, in a conversation, inside an assistant turn (not in its header
    or in another turn); from there that turn (without turns: the rest of the row) is trained throughout.
    ``"auto"``: conversations as ``assistant_only`` except that only the last assistant turn must be trained
    (earlier ones may belong to a prompt); rows without an assistant turn as ``completion_only``. ``length`` is
    the number of real (unpadded) tokens.
    """
    if expect not in ("assistant_only", "completion_only", "auto"):
        raise ValueError(f"expect must be assistant_only, completion_only or auto, got {expect!r}")
    trained = [labels[j] != ignore_index for j in range(length)]
    out: dict[str, list[int]] = {}
    if expect == "completion_only" or (expect == "auto" and not spans):
        first = next((j for j, t in enumerate(trained) if t), None)
        if first is None:
            return out  # truncation can cut a whole completion; the batch-level nothing_trained rule covers the rest
        home = next((s for s in spans if s.start <= first < s.stop), None)
        if first == 0 or (spans and home is None):
            # The prompt (or, in a conversation, an assistant header / a non-assistant turn) has labels.
            limit = max((s.start for s in spans), default=length) if first == 0 else first + 1
            out[PROMPT_TRAINED] = [j for j in range(min(limit, length)) if trained[j]]
            return out
        stop = min(home.stop, length) if home is not None else length
        holes = [j for j in range(first, stop) if not trained[j]]
        if holes:
            out[ASSISTANT_UNTRAINED] = holes
        return out
    inside = [False] * length
    neutral = [False] * length
    for span in spans:
        for j in range(span.start, min(span.stop, length)):
            inside[j] = True
        # The header is a prompt cue, yet some training templates (deepseek_r1_distill) train it: either way.
        for j in [*range(span.header_start, span.start), *range(span.stop, span.trailer_stop)]:
            if j < length:
                neutral[j] = True
    prompt_bad = [j for j in range(length) if trained[j] and not inside[j] and not neutral[j]]
    must_train = spans if expect == "assistant_only" else spans[-1:]
    untrained = [j for s in must_train for j in range(s.start, min(s.stop, length)) if not trained[j]]
    if prompt_bad:
        out[PROMPT_TRAINED] = prompt_bad
    if untrained:
        out[ASSISTANT_UNTRAINED] = untrained
    return out
