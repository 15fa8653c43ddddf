"""GRPO loss-mask rules on device tensors: the tensors ``GRPOTrainer._generate_and_score_completions`` returns.

TRL's loss weights completion position ``j`` of row ``i`` by ``completion_mask * tool_mask`` (``_compute_loss``);
the prompt only enters as attention (``prompt_mask``). The rules, per row (reference: :mod:`rl_guards.core.masks`):

=====================  ====================================================================================
kind                   rule
=====================  ====================================================================================
``mask_values``        every mask holds only 0 and 1
``post_eos``           no loss after the first EOS of ``completion_ids``
``padding``            no loss on the padding of a row without EOS
``truncated_unmasked`` with ``mask_truncated_completions``, a row without EOS carries no loss at all
``missing_loss``       otherwise every generated token up to and including the first EOS carries loss
``tool_mask``          each ``tool_mask == 0`` span starts right after the model's EOS, and starts/ends with the
                       tool-result tokens the chat template renders
``prompt_leak``        ``completion_ids`` do not start with prompt tokens the model cannot have written: an overlap
                       with the prompt's tail or head that holds an EOS followed by more of the prompt (generation
                       stops at EOS)
``prompt_overlap``     (a warning, never a stop) every row of the batch starts with the same prompt tokens, or with
                       its whole prompt: a slice a few tokens early, or a collapsing policy; think tags and
                       whitespace alone (``</think>\n\n`` after the empty block) do not count
``prompt_mask``        ``prompt_mask`` is a left-padded block equal to ``prompt_ids != pad``
``reward_position``    with ``token_rewards`` (``[B, C]``, where a framework places each row's reward: verl's
                       ``rm_scores``), no non-zero reward on a position that carries no loss
=====================  ====================================================================================

Everything runs vectorised on the batch's device; the verdict costs one transfer of a few integers, plus one
``all_reduce`` of the same integers when ``torch.distributed`` is initialised, so all ranks raise together.

The guard that reports them is :class:`rl_guards.guards.masks.GRPOMaskGuard`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rl_guards.core import masks as M


@dataclass
class GRPOMaskFlags:
    """Device tensors of one check: per-kind row flags and the offending positions, for rendering."""

    rows: torch.Tensor  # [B, K] bool, K = len(GRPO_KINDS)
    completion_bad: dict[str, torch.Tensor]  # kind -> [B, C] bool
    prompt_bad: torch.Tensor  # [B, P] bool
    loss: torch.Tensor  # [B, C] loss weights (completion_mask * tool_mask)
    content_end: torch.Tensor  # [B] last generated position (-1 when none)


def _as_int(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return t.long()
    return t.round().long() if t.is_floating_point() else t


def _shift_left(t: torch.Tensor, k: int, fill: int | bool) -> torch.Tensor:
    """``out[:, j] = t[:, j + k]``, filled past the end."""
    if k == 0:
        return t
    pad = torch.full((t.size(0), min(k, t.size(1))), fill, dtype=t.dtype, device=t.device)
    return torch.cat([t[:, k:], pad], dim=1)


def _shift_right(t: torch.Tensor, k: int, fill: int | bool) -> torch.Tensor:
    """``out[:, j] = t[:, j - k]``, filled before the start."""
    if k == 0:
        return t
    pad = torch.full((t.size(0), min(k, t.size(1))), fill, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t[:, : max(t.size(1) - k, 0)]], dim=1)


def _check_shapes(output: Mapping[str, Any]) -> None:
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        if not isinstance(output.get(key), torch.Tensor) or output[key].dim() != 2:
            raise ValueError(f"rollout batch: {key} must be a 2-D tensor, got {type(output.get(key)).__name__}")
    pairs = [("prompt_ids", "prompt_mask"), ("completion_ids", "completion_mask")]
    for optional in ("tool_mask", "token_rewards"):
        if output.get(optional) is not None:
            pairs.append(("completion_ids", optional))
    for a, b in pairs:
        if output[a].shape != output[b].shape:
            raise ValueError(f"rollout batch: {b} has shape {tuple(output[b].shape)}, {a} {tuple(output[a].shape)}")
    if output["prompt_ids"].size(0) != output["completion_ids"].size(0):
        raise ValueError("rollout batch: prompt_ids and completion_ids have different numbers of rows")


def grpo_mask_flags(
    output: Mapping[str, Any],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    mask_truncated: bool,
    tool_head_ids: Sequence[int] = (),
    tool_tail_ids: Sequence[int] = (),
    markup_ids: Sequence[int] = (),
) -> GRPOMaskFlags:
    """Apply every rule to a rollout batch, on its device, without a host transfer.

    ``markup_ids``: tokens a model may write itself right after a prompt ending in them (think tags, whitespace);
    a prompt overlap made only of them is a leak only when every row of the batch overlaps.
    """
    _check_shapes(output)
    ids = output["completion_ids"]
    cm = _as_int(output["completion_mask"])
    tm_given = output.get("tool_mask")
    tm = _as_int(tm_given) if tm_given is not None else torch.ones_like(cm)
    pids = output["prompt_ids"]
    pm = _as_int(output["prompt_mask"])
    device = ids.device
    pad = -1 if pad_token_id is None else int(pad_token_id)
    rewards = output.get("token_rewards")
    if ids.size(1) == 0:  # every completion empty: one padding column keeps the reductions defined
        ids = torch.full((ids.size(0), 1), pad, dtype=ids.dtype, device=device)
        cm, tm = torch.zeros_like(ids), torch.ones_like(ids)
        rewards = None
    b, c = ids.shape
    eos = torch.tensor(sorted({int(e) for e in eos_token_ids}) or [-1], device=device, dtype=ids.dtype)
    pos = torch.arange(c, device=device).expand(b, c)

    loss = cm * tm
    is_eos = torch.isin(ids, eos)
    model = tm != 0
    tool = tm == 0
    next_is_tool = _shift_left(tool, 1, False)
    terminal = is_eos & model & ~next_is_tool
    has_term = terminal.any(dim=1)
    first = torch.where(has_term, terminal.int().argmax(dim=1), torch.full_like(has_term, c, dtype=torch.long))
    at = first.clamp(max=max(c - 1, 0)).unsqueeze(1)
    pad_is_eos = pad in {int(e) for e in eos_token_ids}
    ambiguous = has_term & (ids.gather(1, at).squeeze(1) == pad) & (loss.gather(1, at).squeeze(1) == 0) & pad_is_eos
    has_eos = has_term & ~ambiguous
    last_real = torch.where(ids != pad, pos, torch.full_like(pos, -1)).amax(dim=1)
    content_end = torch.where(has_eos, first, torch.where(ambiguous, first - 1, last_real))
    in_content = pos <= content_end.unsqueeze(1)
    positive = loss != 0
    masked_truncated = (~has_eos & mask_truncated).unsqueeze(1)

    bad: dict[str, torch.Tensor] = {}
    bad[M.MASK_VALUES] = ((cm != 0) & (cm != 1)) | ((tm != 0) & (tm != 1))
    beyond = positive & ~in_content
    bad[M.POST_EOS] = beyond & has_eos.unsqueeze(1)
    bad[M.PADDING] = beyond & ~has_eos.unsqueeze(1)
    bad[M.TRUNCATED_UNMASKED] = in_content & positive & masked_truncated
    bad[M.MISSING_LOSS] = in_content & model & ~positive & ~masked_truncated
    if tm_given is not None:
        starts = tool & ~_shift_right(tool, 1, False) & in_content
        after_model_eos = _shift_right(is_eos & model, 1, False)
        head_ok = torch.ones_like(starts)
        for k, token in enumerate(tool_head_ids):
            head_ok &= _shift_left(ids, k, -1) == int(token)
        ends = tool & ~next_is_tool & _shift_left(in_content, 1, False) & _shift_left(model, 1, False)
        tail_ok = torch.ones_like(ends)
        n_tail = len(tool_tail_ids)
        for k, token in enumerate(tool_tail_ids):
            tail_ok &= _shift_right(ids, n_tail - 1 - k, -1) == int(token)
        # Rows zeroed by mask_truncated_completions carry no loss: their tool_mask is moot.
        bad[M.TOOL_MASK] = ((starts & ~(after_model_eos & head_ok)) | (ends & ~tail_ok)) & ~masked_truncated
    else:
        bad[M.TOOL_MASK] = torch.zeros_like(in_content)
    bad[M.REWARD_POSITION] = (rewards != 0) & (loss == 0) if rewards is not None else torch.zeros_like(in_content)

    # Prompt leak: the completion's head repeats the prompt's tail or head (certain, or suspected).
    n_prompt = (pm != 0).sum(dim=1, keepdim=True)
    any_eos, first_eos = is_eos.max(dim=1, keepdim=True)
    length, leak, overlap = _leak_verdicts(ids, pids, n_prompt, pids.size(1) - n_prompt, any_eos, first_eos, markup_ids)
    bad[M.PROMPT_LEAK] = pos < length * leak
    bad[M.PROMPT_OVERLAP] = pos < length * overlap

    # Prompt mask: a left-padded 0...01...1 block equal to prompt_ids != pad.
    lead = torch.cumprod((pids == pad).int(), dim=1).bool()
    prompt_bad = (
        ((pm != 0) & (pm != 1))
        | ((pm == 1) & (_shift_left(pm, 1, 1) == 0))
        | ((pm == 0) & (pids != pad))
        | ((pm != 0) & lead & _shift_left(lead, 1, False))
    )
    rows = torch.stack(
        [bad[k].any(dim=1) if k != M.PROMPT_MASK else prompt_bad.any(dim=1) for k in M.GRPO_KINDS], dim=1
    )
    return GRPOMaskFlags(rows=rows, completion_bad=bad, prompt_bad=prompt_bad, loss=loss, content_end=content_end)


def grpo_mask_row_kinds(
    output: Mapping[str, Any],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    mask_truncated: bool,
    tool_head_ids: Sequence[int] = (),
    tool_tail_ids: Sequence[int] = (),
    markup_ids: Sequence[int] = (),
) -> torch.Tensor:
    """Per row, a bitmask of the rules it breaks (bit ``k`` = ``GRPO_KINDS[k]``): the same verdict as
    :func:`grpo_mask_flags`, computed for the hot path (every batch) without per-position results.

    On the batch's device, no host transfer, about 110 torch calls whatever the batch size (was 290): a handful of
    full-width passes in bool (EOS lookup, first EOS, last real token, loss inside vs outside the content), every
    rule kept as a ``[B, 1]`` column, every prompt-tail length compared at once, and only the first ``HEAD_WINDOW``
    columns for the prompt-leak rule. Batches with a ``tool_mask`` (rare) take the detailed path.
    """
    if output.get("tool_mask") is not None or output["completion_ids"].size(1) == 0:
        flags = grpo_mask_flags(
            output,
            eos_token_ids=eos_token_ids,
            pad_token_id=pad_token_id,
            mask_truncated=mask_truncated,
            tool_head_ids=tool_head_ids,
            tool_tail_ids=tool_tail_ids,
            markup_ids=markup_ids,
        )
        return _row_bits(flags)
    _check_shapes(output)
    ids = output["completion_ids"]
    cm = output["completion_mask"]
    if cm.is_floating_point():
        cm = cm.round()
    pids = output["prompt_ids"]
    pm = output["prompt_mask"]
    if pm.is_floating_point():
        pm = pm.round()
    device = ids.device
    b, c = ids.shape
    pad = -1 if pad_token_id is None else int(pad_token_id)
    eos_set = tuple(sorted({int(e) for e in eos_token_ids})) or (-1,)
    is_eos = ids == eos_set[0]  # (a few == beat isin on a short list)
    for e in eos_set[1:]:
        is_eos |= ids == e
    has_term, first = is_eos.max(dim=1, keepdim=True)  # one pass: any EOS, and the first one ([B, 1] columns)
    positive = cm != 0
    real = ids != pad
    any_real, last_from_end = real.flip(1).max(dim=1, keepdim=True)
    last_p1 = torch.where(any_real, c - last_from_end, 0)  # one past the last real token (0: none)
    if pad in eos_set:  # a first "EOS" that is the pad and carries no loss is padding: the content ends before it
        loud = (real | positive).gather(1, first)
        has_eos = has_term & loud
        ends = torch.where(has_term, first + loud, last_p1)
    else:
        has_eos = has_term
        ends = torch.where(has_term, first + 1, last_p1)
    in_content = _arange(c, device) < ends  # ends: one past the content's last position
    beyond = (positive > in_content).any(dim=1, keepdim=True)  # bool ">": loss outside the content
    missing = (in_content > positive).any(dim=1, keepdim=True)  # content without loss
    no_eos = ~has_eos
    zero = torch.zeros_like(has_term)
    truncated = zero
    if mask_truncated:  # rows without EOS must carry no loss at all; the others are checked as usual
        truncated = no_eos & (positive & in_content).any(dim=1, keepdim=True)
        missing = has_eos & missing
    if cm.dtype == torch.bool:
        bad_values = zero
    else:
        low, high = torch.aminmax(cm, dim=1, keepdim=True)
        bad_values = (low < 0) | (high > 1)
    if pids.size(1) == 0 or b == 0:
        prompt_bad = leak = overlap = zero
    else:
        n_prompt, start, prompt_bad = _prompt_block(pids, pm, pad)
        _, leak, overlap = _leak_verdicts(ids, pids, n_prompt, start, has_term, first, markup_ids)
    columns = {
        M.MASK_VALUES: bad_values,
        M.POST_EOS: beyond & has_eos,
        M.PADDING: beyond & no_eos,
        M.TRUNCATED_UNMASKED: truncated,
        M.MISSING_LOSS: missing,
        M.TOOL_MASK: zero,
        M.PROMPT_LEAK: leak,
        M.PROMPT_MASK: prompt_bad,
        M.PROMPT_OVERLAP: overlap,
        M.REWARD_POSITION: zero,
    }
    rewards = output.get("token_rewards")
    if rewards is not None:
        columns[M.REWARD_POSITION] = ((rewards != 0) & ~positive).any(dim=1, keepdim=True)
    flags = torch.cat([columns[k] for k in M.GRPO_KINDS], dim=1)
    return (flags * _arange(len(M.GRPO_KINDS), device, weights=True)).sum(dim=1)


_CONSTS: dict[tuple[Any, ...], Any] = {}  # small constant tensors, built once per shape and device


def _const(key: tuple[Any, ...], build: Any) -> Any:
    t = _CONSTS.get(key)
    if t is None:
        if len(_CONSTS) >= 256:
            _CONSTS.clear()
        t = _CONSTS[key] = build()
    return t


def _arange(n: int, device: torch.device, start: int = 0, *, weights: bool = False) -> torch.Tensor:
    """``start, ..., start + n - 1`` (``weights``: ``1, 2, 4, ...``), cached: never written to."""
    if weights:
        return _const(("pow2", n, device), lambda: 2 ** torch.arange(n, device=device, dtype=torch.long))
    return _const(("arange", n, start, device), lambda: torch.arange(start, start + n, device=device))


def _prompt_block(pids: torch.Tensor, pm: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (``[B, 1]`` columns): the attended prompt length, where a left-padded block of it starts, and
    whether ``prompt_mask`` is not a left-padded 0/1 block matching ``prompt_ids != pad``.

    A valid mask equals ``position >= start`` (0/1 values, one block on the right) and starts at the first real
    token, or one before it (attention on the last leading pad token is allowed).
    """
    p = pids.size(1)
    n_prompt = (pm != 0).sum(dim=1, keepdim=True)
    start = p - n_prompt
    block = (pm == (_arange(p, pm.device) >= start)).all(dim=1, keepdim=True)
    any_real, first_real = (pids != pad).max(dim=1, keepdim=True)
    gap = torch.where(any_real, first_real, p) - start  # 0 or 1 when the block starts where it should
    return n_prompt, start, ~block | ((gap >> 1) != 0)


def _leak_verdicts(
    ids: torch.Tensor,
    pids: torch.Tensor,
    n_prompt: torch.Tensor,
    start: torch.Tensor,
    has_eos: torch.Tensor,
    first_eos: torch.Tensor,
    markup_ids: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row (``[B, 1]`` columns): the overlap length with the prompt, a certain leak, a suspected overlap.

    The vectorised :func:`rl_guards.core.masks.prompt_leak_verdicts`: an overlap with the prompt's tail (2 to
    ``LEAK_WINDOW`` tokens) or head (``REPEAT_WINDOW`` tokens or the whole prompt, followed up to ``HEAD_WINDOW``) is
    certain when it holds an EOS followed by more overlapped tokens (generation stops at EOS); suspected when every
    row of a batch of ``UNIFORM_LEAK_MIN_ROWS`` overlaps with the same tokens (or its whole prompt), not only think
    tags and whitespace. Reads only the first ``HEAD_WINDOW`` columns. ``n_prompt``, ``start``: attended prompt
    length and ``P - n_prompt``; ``has_eos``, ``first_eos``: whether a row holds an EOS, and the first one.
    """
    b, c = ids.shape
    p = pids.size(1)
    device = ids.device
    zero = torch.zeros_like(has_eos)
    if b == 0 or p == 0 or c == 0:
        return torch.zeros_like(n_prompt), zero, zero
    window = min(M.LEAK_WINDOW, p, c)
    w = min(M.HEAD_WINDOW, p, c)  # >= window
    head_ids = ids[:, :w]
    # Head: the completion repeats the prompt from its first attended token on.
    pos = _arange(w, device)
    repeat = (head_ids == pids.gather(1, (start + pos).clamp(max=p - 1))).int().cumprod(dim=1)
    head = torch.minimum(repeat.sum(dim=1, keepdim=True), n_prompt)
    length = head * (head >= n_prompt.clamp(min=2, max=M.REPEAT_WINDOW))  # REPEAT_WINDOW tokens, or the whole prompt
    if window >= 2:  # tail: the completion starts with the prompt's last k tokens, k = 2..window, all k at once
        idx, other, k_weight = _tail_consts(p, window, device)
        tails = pids.gather(1, idx.expand(b, -1)).view(b, window, window)  # [B, k, j]: P - k + j
        match = ((tails == head_ids[:, None, :window]) | other).all(dim=2)  # [B, k]
        tail = ((match & (n_prompt >= _arange(window, device, 1))) * k_weight).amax(dim=1, keepdim=True)
        length = torch.maximum(tail, length)
    leak = has_eos & (first_eos + 1 < length)  # an EOS with more overlapped tokens after it
    if b < M.UNIFORM_LEAK_MIN_ROWS:
        return length, leak, zero
    # Batch-level verdict without a host transfer: the first k = min(length) columns, as a column mask.
    k = length.min()
    beyond_k = pos >= k
    same_or_whole = ((head_ids == head_ids[:1]) | beyond_k).all() | (length == n_prompt).all()
    overlaps = (k >= 2) & same_or_whole
    if markup_ids:
        table = _markup_table(markup_ids, device)
        top = table.size(0)
        in_markup = table[head_ids.clamp(0, top - 1)] & (head_ids < top) & (head_ids >= 0)
        overlaps = overlaps & ~(in_markup | beyond_k).all()
    return length, leak, overlaps & ~leak


def _markup_table(markup_ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """``table[t]`` is True for the ids in ``markup_ids`` (``[max id + 1]`` bools): one lookup per position, where
    ``torch.isin`` sorts (the markup list holds hundreds of whitespace tokens). Cached by the ids and device."""

    def build() -> torch.Tensor:
        values = sorted({int(t) for t in markup_ids if int(t) >= 0})
        table = torch.zeros((values[-1] + 1) if values else 1, dtype=torch.bool, device=device)
        if values:
            table[torch.tensor(values, device=device)] = True
        return table

    return _const(("markup", tuple(markup_ids), device), build)


def _tail_consts(p: int, window: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the prompt-tail comparison of all lengths k = 1..window at once: ``idx[k-1, j]`` the prompt column the
    completion's column j meets (``P - k + j``, flat), ``other[k-1, j]`` the columns past k (ignored), and the weight of
    each k (0 for k = 1: a single repeated token happens by chance)."""

    def build() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k = torch.arange(1, window + 1, device=device)
        j = torch.arange(window, device=device)
        idx = (p - k.unsqueeze(1) + j).clamp(max=p - 1)
        return idx.view(1, -1), j >= k.unsqueeze(1), torch.where(k >= 2, k, 0)

    return _const(("tail", p, window, device), build)


def _row_bits(flags: GRPOMaskFlags) -> torch.Tensor:
    """Per row, a bitmask of the rules it breaks (bit ``k`` = ``GRPO_KINDS[k]``), on the batch's device."""
    weights = 2 ** torch.arange(flags.rows.size(1), device=flags.rows.device, dtype=torch.long)
    return (flags.rows.long() * weights).sum(dim=1)


def _bit_counts(bits: torch.Tensor) -> torch.Tensor:
    """From per-row rule bits: rows per kind (GRPO_KINDS order), rows breaking any rule, and the number of rows."""
    k = len(M.GRPO_KINDS)
    per_kind = (bits.unsqueeze(1) >> _arange(k, bits.device)) & 1
    return torch.cat([per_kind, bits.clamp(max=1).unsqueeze(1), torch.ones_like(per_kind[:, :1])], dim=1).sum(dim=0)


def _row_counts(flags: GRPOMaskFlags) -> torch.Tensor:
    """Rows per kind (GRPO_KINDS order), then rows breaking any rule: ``len(GRPO_KINDS) + 1`` integers."""
    return torch.cat([flags.rows.sum(dim=0), flags.rows.any(dim=1).sum().unsqueeze(0)])


def _report_from_counts(counts: list[int], num_rows: int, flags: GRPOMaskFlags | None) -> M.MaskReport:
    """``counts``: rows per kind (GRPO_KINDS order), then rows breaking any rule. Row indices come from ``flags``."""
    kinds = M.GRPO_KINDS
    report = M.MaskReport(num_rows=num_rows, counts=dict(zip(kinds, counts[: len(kinds)], strict=True)))
    report.violating_rows = int(counts[len(kinds)])
    if flags is not None and report.violating_rows:
        for k, kind in enumerate(kinds):
            if report.counts[kind]:
                report.rows[kind] = flags.rows[:, k].nonzero().flatten().tolist()
    return report


def check_grpo_batch(
    output: Mapping[str, Any],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    mask_truncated: bool,
    tool_head_ids: Sequence[int] = (),
    tool_tail_ids: Sequence[int] = (),
    markup_ids: Sequence[int] = (),
) -> M.MaskReport:
    """Check one rollout batch (the dict ``_generate_and_score_completions`` returns); no trainer needed.

    One host transfer of ``len(GRPO_KINDS) + 1`` integers when the batch is clean; row indices when it is not.
    """
    flags = grpo_mask_flags(
        output,
        eos_token_ids=eos_token_ids,
        pad_token_id=pad_token_id,
        mask_truncated=mask_truncated,
        tool_head_ids=tool_head_ids,
        tool_tail_ids=tool_tail_ids,
        markup_ids=markup_ids,
    )
    return _report_from_counts(_row_counts(flags).tolist(), flags.rows.size(0), flags)


def staged_features(bits: torch.Tensor | None, rows: int, device: Any) -> dict[str, torch.Tensor]:
    """The mask guard's per-row device features: the rule bitmask and a checked flag (zeros when unchecked)."""
    if bits is None:
        zeros = torch.zeros(rows, dtype=torch.float64, device=device)
        return {"kinds": zeros, "checked": zeros}
    kinds = bits.to(torch.float64)
    return {"kinds": kinds, "checked": torch.ones_like(kinds)}


def prompt_tail_tokens(prompt_ids: Any, window: int) -> list[int]:
    """The distinct token ids of the prompts' last ``window`` positions ([] when not a 2-D tensor)."""
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2:
        return []
    return [int(t) for t in torch.unique(prompt_ids[:, -window:]).tolist()]


def local_bit_counts(row_kinds: Any, output: Mapping[str, Any], failed: bool) -> torch.Tensor:
    """Per-kind row counts of this rank's bitmask (zeros on the batch's device when the check failed)."""
    if not failed:
        return _bit_counts(row_kinds)
    ids = output.get("completion_ids")
    device = ids.device if isinstance(ids, torch.Tensor) else torch.device("cpu")
    return torch.zeros(len(M.GRPO_KINDS) + 2, dtype=torch.long, device=device)


def report_from_counts(counts: list[int], num_rows: int, flags: GRPOMaskFlags | None) -> M.MaskReport:
    """A :class:`~rl_guards.core.masks.MaskReport` from per-kind row counts (rows listed from ``flags``)."""
    return _report_from_counts(counts, num_rows, flags)


__all__ = [
    "GRPOMaskFlags",
    "check_grpo_batch",
    "grpo_mask_flags",
    "grpo_mask_row_kinds",
    "local_bit_counts",
    "prompt_tail_tokens",
    "report_from_counts",
    "staged_features",
]
