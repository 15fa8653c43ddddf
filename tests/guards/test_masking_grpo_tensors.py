"""GRPO mask rules on synthetic rollout batches: each rule broken once, clean batches silent, and the vectorised
check held to the per-row reference in rl_guards.core.masks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_guards.config import GuardsConfig
from rl_guards.core import masks as M
from rl_guards.errors import MaskingError
from rl_guards.guards.base import GuardSession, RunContext, run_hook
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.tensors.grpo_masks import check_grpo_batch, grpo_mask_flags, grpo_mask_row_kinds
from rl_guards.testing.logs import shows

PAD, EOS, EOT = 0, 2, 3  # EOT: a second end-of-turn id (like Qwen's <|endoftext|> next to <|im_end|>)
EOS_IDS = [EOS, EOT]
HEAD, TAIL = [90, 91], [92, 93]  # tool-result markers of the synthetic "template"


def pad_left(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[value] * (width - len(r)) + r for r in rows])


def pad_right(rows: list[list[int]], value: int, width: int | None = None) -> torch.Tensor:
    width = width or max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def batch(
    completions: list[list[int]],
    prompts: list[list[int]] | None = None,
    *,
    mask_truncated: bool = False,
    width: int | None = None,
    tool_masks: list[list[int]] | None = None,
    eos_ids: tuple[int, ...] = (EOS, EOT),
    pad: int = PAD,
) -> dict[str, Any]:
    """A rollout batch built the way GRPOTrainer builds it (prompts left-padded, completions right-padded)."""
    prompts = prompts or [[10 + i, 11, 12, 13, 14] for i in range(len(completions))]
    prompts = [p[: 2 + (i % 3)] for i, p in enumerate(prompts)]  # ragged, so there is left padding
    cm = [[1] * len(c) for c in completions]
    if mask_truncated:
        cm = [m if (c and c[-1] in (*eos_ids, pad)) else [0] * len(m) for c, m in zip(completions, cm, strict=True)]
    out = {
        "prompt_ids": pad_left(prompts, pad),
        "prompt_mask": pad_left([[1] * len(p) for p in prompts], 0),
        "completion_ids": pad_right(completions, pad, width),
        "completion_mask": pad_right(cm, 0, width),
        "advantages": torch.zeros(len(completions)),
    }
    if tool_masks is not None:
        tm = tool_masks
        if mask_truncated:
            tm = [t if (c and c[-1] in (*eos_ids, pad)) else [0] * len(t) for c, t in zip(completions, tm, strict=True)]
        out["tool_mask"] = pad_right(tm, 1, width)
    return out


CLEAN = [[40, 41, EOS], [42, EOS], [43, 44, 45, 46], [47, 48, EOT]]  # row 2 is truncated (no EOS)


def check(out: dict[str, Any], *, mask_truncated: bool = False, **kw: Any) -> M.MaskReport:
    return check_grpo_batch(
        out,
        eos_token_ids=kw.pop("eos_ids", EOS_IDS),
        pad_token_id=kw.pop("pad", PAD),
        mask_truncated=mask_truncated,
        **kw,
    )


def _set(key: str, row: int, cols: slice | int, value: int) -> Callable[[dict[str, Any]], None]:
    def apply(out: dict[str, Any]) -> None:
        out[key][row, cols] = value

    return apply


def _leak_tail(out: dict[str, Any]) -> None:
    # Row 0 starts with its prompt's last two tokens (one row: the model may write that, e.g. an echo).
    out["completion_ids"][0, :2] = out["prompt_ids"][0, -2:]


def _leak_one_all(out: dict[str, Any]) -> None:
    # Every row starts with its prompt's last token: a collapsing policy writing "\n" first (issue 20 #3).
    out["completion_ids"][:, 0] = out["prompt_ids"][:, -1]


def _leak_head(out: dict[str, Any]) -> None:
    # Row 2 starts with its whole prompt (4 tokens, no EOS among them): one row, the model may copy its prompt.
    out["completion_ids"][2, :4] = out["prompt_ids"][2, :4]


def _leak_past_eos(out: dict[str, Any]) -> None:
    # Row 2's prompt (4 tokens) ends with an end of turn and a header; its completion starts with them: generation
    # stops at EOS, so the model cannot have written them. Its mask ends at that EOS, as TRL builds it from the ids.
    out["prompt_ids"][2, -3:] = torch.tensor([EOS, 90, 91])
    out["completion_ids"][2, :3] = torch.tensor([EOS, 90, 91])
    out["completion_mask"][2, 1:] = 0


def _reward_on_padding(out: dict[str, Any]) -> None:
    # verl's placement: each row's reward on its last response token; row 1 is empty and its reward lands on the
    # last padding column (index -1), which carries no loss.
    out["completion_ids"][1, :] = PAD
    out["completion_mask"][1, :] = 0
    rewards = torch.zeros(out["completion_ids"].shape)
    rewards[0, 2], rewards[3, 2], rewards[1, -1] = 1.0, 0.5, 0.5
    out["token_rewards"] = rewards


def _reward_on_last_tokens(out: dict[str, Any]) -> None:
    # The clean twin: every reward on its row's last trained token (and a zero reward anywhere is no reward).
    rewards = torch.zeros(out["completion_ids"].shape)
    rewards[0, 2], rewards[1, 1], rewards[2, 3], rewards[3, 2] = 1.0, -1.0, 0.5, 1.0
    out["token_rewards"] = rewards


def _overlap_every_row(out: dict[str, Any]) -> None:
    # Every row starts with the same two prompt tokens (a shared generation-prompt tail): a slice two tokens early,
    # or the model writing the header again. A warning, never a stop.
    out["prompt_ids"][:, -2:] = torch.tensor([90, 91])
    out["completion_ids"][:, :2] = torch.tensor([90, 91])


CASES: list[tuple[str, Callable[[dict[str, Any]], None] | None, bool, set[str], int | None]] = [
    # name, mutation, mask_truncated, expected kinds, expected offending row
    ("clean", None, False, set(), None),
    ("clean_mask_truncated", None, True, set(), None),
    ("post_eos", _set("completion_mask", 1, slice(2, None), 1), False, {M.POST_EOS}, 1),
    ("padding", _set("completion_mask", 2, slice(4, None), 1), False, {M.PADDING}, 2),
    ("missing_loss_eos", _set("completion_mask", 0, 2, 0), False, {M.MISSING_LOSS}, 0),
    ("missing_loss_first", _set("completion_mask", 3, 0, 0), False, {M.MISSING_LOSS}, 3),
    ("truncated_zeroed_without_flag", _set("completion_mask", 2, slice(None), 0), False, {M.MISSING_LOSS}, 2),
    ("truncated_unmasked", _set("completion_mask", 2, slice(0, 4), 1), True, {M.TRUNCATED_UNMASKED}, 2),
    ("mask_value_two", _set("completion_mask", 0, 1, 2), False, {M.MASK_VALUES}, 0),
    ("prompt_overlap_one_row_is_no_leak", _leak_tail, False, set(), None),
    ("one_token_overlap_every_row_is_no_leak", _leak_one_all, False, set(), None),
    ("whole_prompt_on_one_row_is_no_leak", _leak_head, False, set(), None),
    ("prompt_leak_past_eos", _leak_past_eos, False, {M.PROMPT_LEAK}, 2),
    ("prompt_overlap_every_row", _overlap_every_row, False, {M.PROMPT_OVERLAP}, 1),
    ("prompt_mask_attends_padding", _set("prompt_mask", 0, slice(None), 1), False, {M.PROMPT_MASK}, 0),
    ("prompt_mask_hides_token", _set("prompt_mask", 2, 1, 0), False, {M.PROMPT_MASK}, 2),
    ("reward_on_padding", _reward_on_padding, False, {M.REWARD_POSITION}, 1),
    ("rewards_on_last_tokens", _reward_on_last_tokens, False, set(), None),
]


@pytest.mark.parametrize(("name", "mutate", "mask_truncated", "kinds", "row"), CASES, ids=[c[0] for c in CASES])
def test_each_rule(
    name: str, mutate: Callable[[dict[str, Any]], None] | None, mask_truncated: bool, kinds: set[str], row: int | None
) -> None:
    out = batch(CLEAN, mask_truncated=mask_truncated, width=6)
    if mutate is not None:
        mutate(out)
    report = check(out, mask_truncated=mask_truncated)
    assert set(report.kinds) == kinds, report
    assert report.ok == (not kinds)
    if row is not None:
        assert row in report.rows[next(iter(kinds))]
    assert report.num_rows == len(CLEAN)


def test_one_repeated_newline_on_a_single_row_is_not_a_leak() -> None:
    out = batch(CLEAN, width=6)
    out["completion_ids"][1, 0] = out["prompt_ids"][1, -1]
    assert check(out).ok


def test_every_mask_unmasked_reports_post_eos_and_padding() -> None:
    out = batch(CLEAN, width=6)
    out["completion_mask"][:] = 1
    report = check(out)
    assert report.counts[M.POST_EOS] == 3 and report.counts[M.PADDING] == 1 and report.violating_rows == 4


def test_float_and_bool_masks_are_read_as_weights() -> None:
    out = batch(CLEAN, width=6)
    out["completion_mask"] = out["completion_mask"].bool()
    out["prompt_mask"] = out["prompt_mask"].float()
    assert check(out).ok
    out["completion_mask"] = out["completion_mask"].float()
    out["completion_mask"][1, 3] = 1.0
    assert check(out).kinds == [M.POST_EOS]


def test_pad_token_that_is_also_eos() -> None:
    """Qwen3: pad <|endoftext|> is one of the EOS ids; a truncated row's padding looks like an EOS."""
    rows = [[40, 41, EOS], [42, 43, 44], [45, PAD]]  # row 1 truncated then padded; row 2 ended on pad-as-EOS
    for mask_truncated in (False, True):
        out = batch(rows, width=5, mask_truncated=mask_truncated, pad=PAD, eos_ids=(EOS, PAD))
        assert check(out, mask_truncated=mask_truncated, eos_ids=[EOS, PAD]).ok, mask_truncated
    out = batch(rows, width=5, pad=PAD, eos_ids=(EOS, PAD))
    out["completion_mask"][1, 3:] = 1  # padding of the truncated row unmasked
    assert check(out, eos_ids=[EOS, PAD]).kinds == [M.POST_EOS]
    out = batch(rows, width=5, mask_truncated=True, pad=PAD, eos_ids=(EOS, PAD))
    out["completion_mask"][1, :3] = 1  # truncated row left trained under mask_truncated
    assert check(out, mask_truncated=True, eos_ids=[EOS, PAD]).kinds == [M.TRUNCATED_UNMASKED]


# ----- tools ---------------------------------------------------------------------------------------------------
# Row 0: model turn ending in EOS, a tool result (HEAD 77 EOS TAIL), then the model's answer and EOS.
TOOL_ROWS = [
    [50, 51, EOS, *HEAD, 77, EOS, *TAIL, 52, EOS],
    [53, EOS],
    [54, 55, EOS, *HEAD, 78, *TAIL, 56, 57],  # truncated after the tool turn
]
TOOL_MASKS = [
    [1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1],
    [1, 1],
    [1, 1, 1, 0, 0, 0, 0, 0, 1, 1],
]


def tool_check(out: dict[str, Any], *, mask_truncated: bool = False) -> M.MaskReport:
    return check(out, mask_truncated=mask_truncated, tool_head_ids=HEAD, tool_tail_ids=TAIL)


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_tool_batch_clean(mask_truncated: bool) -> None:
    out = batch(TOOL_ROWS, tool_masks=TOOL_MASKS, mask_truncated=mask_truncated, width=12)
    assert tool_check(out, mask_truncated=mask_truncated).ok


def test_tool_results_trained_when_tool_mask_is_lost() -> None:
    out = batch(TOOL_ROWS, tool_masks=TOOL_MASKS, width=12)
    out["tool_mask"][:] = 1
    assert tool_check(out).kinds == [M.POST_EOS]
    del out["tool_mask"]
    assert check(out).kinds == [M.POST_EOS]


def test_tool_mask_shifted_by_one() -> None:
    # One token early: the model's own EOS is masked as if it were part of the tool result.
    out = batch(TOOL_ROWS, tool_masks=TOOL_MASKS, width=12)
    out["tool_mask"][0, 2:9] = torch.tensor([0, 0, 0, 0, 0, 0, 1])
    report = tool_check(out)
    assert report.kinds == [M.TOOL_MASK] and report.rows[M.TOOL_MASK] == [0]
    # One token late: the first tool-result token trains, so the model's EOS no longer ends a model turn.
    out = batch(TOOL_ROWS, tool_masks=TOOL_MASKS, width=12)
    out["tool_mask"][0, 3:10] = torch.tensor([1, 0, 0, 0, 0, 0, 0])
    assert M.POST_EOS in tool_check(out).kinds


def test_tool_span_cut_short_leaves_the_header_trained() -> None:
    out = batch(TOOL_ROWS, tool_masks=TOOL_MASKS, width=12)
    out["tool_mask"][0, 8] = 1  # the last tail token (the next assistant header) carries loss
    assert tool_check(out).kinds == [M.TOOL_MASK]
    # Without known markers the span still starts right after the model's EOS, so only the tail check sees it.
    assert check(out).ok


# ----- the guard -----------------------------------------------------------------------------------------------
class Args:
    mask_truncated_completions = False


def make_guard(mode: str = "raise", check_every: int = 1) -> tuple[GRPOMaskGuard, GuardSession]:
    guard = GRPOMaskGuard(GuardsConfig.from_dict({"masking": {"mode": mode, "check_every": check_every}}))
    guard.setup(RunContext(eos_token_ids=EOS_IDS, pad_token_id=PAD, args=Args()))
    return guard, GuardSession()


def test_guard_raises_masking_error_naming_the_rule_and_the_fix() -> None:
    guard, session = make_guard()
    out = batch(CLEAN, width=6)
    out["completion_mask"][1, 2:] = 1
    with pytest.raises(MaskingError) as err:
        run_hook(guard, "check_tensors", session, 7, out)
    text = str(err.value)
    assert "post_eos: 1 of 4 rows" in text and "Fix:" in text and "row 1:" in text
    assert f"«[42][{EOS}]⟨![{PAD}][{PAD}]" in text  # the trained padding is marked as offending
    assert err.value.step == 7 and err.value.guard == "masking"
    assert session.metrics["rl_guards/masking/violating_rows"] == [1.0]


def test_guard_clean_batches_are_silent_and_counted() -> None:
    guard, session = make_guard()
    for step in range(3):
        run_hook(guard, "check_tensors", session, step, batch(CLEAN, width=6))
    assert not session.findings
    assert session.metrics["rl_guards/masking/checked_batches"] == [1.0, 2.0, 3.0]
    assert session.metrics["rl_guards/masking/violating_rows"] == [0.0, 0.0, 0.0]
    assert guard.state_dict() == {"calls": 3, "checked": 3}


def test_guard_samples_with_check_every_and_warns_in_warn_mode() -> None:
    guard, session = make_guard(mode="warn", check_every=2)
    bad = batch(CLEAN, width=6)
    bad["completion_mask"][2, 4:] = 1
    with shows("padding"):
        for step in range(4):
            run_hook(guard, "check_tensors", session, step, bad)
    assert guard.checked == 2 and session.counts[("masking", M.PADDING)] == 2


def test_guard_reads_mask_truncated_from_the_trainer_args() -> None:
    guard, session = make_guard()
    guard.ctx.args.mask_truncated_completions = True
    try:
        with pytest.raises(MaskingError, match="truncated_unmasked"):
            run_hook(guard, "check_tensors", session, 0, batch(CLEAN, width=6))
    finally:
        Args.mask_truncated_completions = False


# ----- the vectorised check equals the per-row reference -------------------------------------------------------
@st.composite
def random_batch(draw: st.DrawFn) -> tuple[dict[str, Any], bool, bool]:
    n = draw(st.integers(1, 6))
    width = draw(st.integers(1, 7))
    vocab = st.sampled_from([PAD, EOS, EOT, 40, 41, 42])
    comps = [draw(st.lists(vocab, min_size=0, max_size=width)) for _ in range(n)]
    prompts = [draw(st.lists(st.sampled_from([PAD, 40, 41, 12]), min_size=1, max_size=4)) for _ in range(n)]
    with_tools = draw(st.booleans())
    out = {
        "prompt_ids": pad_left(prompts, PAD),
        "prompt_mask": pad_left([[1] * len(p) for p in prompts], 0),
        "completion_ids": pad_right(comps, PAD, width),
        "completion_mask": pad_right([[1] * len(c) for c in comps], 0, width),
    }
    bits = st.lists(st.sampled_from([0, 1, 1, 1]), min_size=width, max_size=width)
    if draw(st.booleans()):
        out["completion_mask"] = torch.tensor([draw(bits) for _ in range(n)])
    if draw(st.booleans()):
        pw = out["prompt_ids"].size(1)
        out["prompt_mask"] = torch.tensor(
            [draw(st.lists(st.sampled_from([0, 1]), min_size=pw, max_size=pw)) for _ in range(n)]
        )
    if with_tools:
        out["tool_mask"] = torch.tensor([draw(bits) for _ in range(n)])
    if draw(st.booleans()):  # per-token rewards (verl's rm_scores), now and then on a masked position
        values = st.lists(st.sampled_from([0.0, 0.0, 0.0, 1.0, -0.5]), min_size=width, max_size=width)
        out["token_rewards"] = torch.tensor([draw(values) for _ in range(n)])
    return out, draw(st.booleans()), with_tools


def reference_kinds(out: dict[str, Any], mask_truncated: bool, head: list[int], tail: list[int]) -> list[set[str]]:
    ids = out["completion_ids"].tolist()
    cms = out["completion_mask"].tolist()
    tms = out["tool_mask"].tolist() if "tool_mask" in out else [None] * len(ids)
    trs = out["token_rewards"].tolist() if "token_rewards" in out else [None] * len(ids)
    pids, pms = out["prompt_ids"].tolist(), out["prompt_mask"].tolist()
    kinds = []
    prompts = []
    for i in range(len(ids)):
        row = M.check_completion_row(
            ids[i],
            cms[i],
            eos_token_ids=EOS_IDS,
            pad_token_id=PAD,
            mask_truncated=mask_truncated,
            tool_mask=tms[i],
            tool_head_ids=head,
            tool_tail_ids=tail,
            token_rewards=trs[i],
        ).kinds
        if M.check_prompt_row(pids[i], pms[i], pad_token_id=PAD):
            row.add(M.PROMPT_MASK)
        # The prompt is read as its last n positions, n = ones in prompt_mask (what left padding means).
        n = sum(1 for m in pms[i] if m)
        prompts.append(pids[i][len(pids[i]) - n :])
        kinds.append(row)
    certain, suspected = M.prompt_leak_verdicts(prompts, ids, eos_token_ids=EOS_IDS)
    for row, leak, overlap in zip(kinds, certain, suspected, strict=True):
        if leak:
            row.add(M.PROMPT_LEAK)
        if overlap:
            row.add(M.PROMPT_OVERLAP)
    return kinds


@settings(max_examples=200, deadline=None)
@given(random_batch(), st.sampled_from([([], []), ([41], [42]), ([41, 40], [EOT, 42])]))
def test_vectorised_check_matches_reference(drawn: tuple[dict[str, Any], bool, bool], markers: Any) -> None:
    out, mask_truncated, _ = drawn
    head, tail = markers
    flags = grpo_mask_flags(
        out,
        eos_token_ids=EOS_IDS,
        pad_token_id=PAD,
        mask_truncated=mask_truncated,
        tool_head_ids=head,
        tool_tail_ids=tail,
    )
    got = [{k for k, on in zip(M.GRPO_KINDS, row, strict=True) if on} for row in flags.rows.tolist()]
    assert got == reference_kinds(out, mask_truncated, head, tail)


# ----- the hot-path row bits equal the detailed check ---------------------------------------------------------------
@st.composite
def odd_batch(draw: st.DrawFn) -> tuple[dict[str, Any], bool, list[int], list[int]]:
    """Batches the hot path must judge exactly as the detailed check: odd mask values and dtypes, pad == EOS,
    leaks, holes in the loss, empty rows, every row overlapping its prompt."""
    out, mask_truncated, _ = draw(random_batch())
    out.pop("tool_mask", None)  # tool masks take the detailed path anyway
    n, width = out["completion_ids"].shape
    if draw(st.booleans()):  # values other than 0 and 1 in the loss mask
        values = st.sampled_from([0, 1, 1, 2, -1])
        out["completion_mask"] = torch.tensor(
            [draw(st.lists(values, min_size=width, max_size=width)) for _ in range(n)]
        )
    dtype = draw(st.sampled_from([torch.long, torch.int32, torch.float32, torch.bool]))
    for key in ("completion_mask", "prompt_mask"):
        if dtype == torch.bool:
            out[key] = out[key] != 0
        else:
            out[key] = out[key].to(dtype)
    if draw(st.booleans()) and width:  # every completion starts with its prompt's last token
        out["completion_ids"][:, 0] = out["prompt_ids"][:, -1]
    eos = draw(st.sampled_from([EOS_IDS, [*EOS_IDS, PAD], [EOS]]))
    markup = draw(st.sampled_from([[], [40], [40, 41, EOT]]))
    return out, mask_truncated, eos, markup


@settings(max_examples=400, deadline=None)
@given(odd_batch())
def test_hot_path_row_bits_equal_the_detailed_check(drawn: tuple[dict[str, Any], bool, list[int], list[int]]) -> None:
    out, mask_truncated, eos, markup = drawn
    common = {"eos_token_ids": eos, "pad_token_id": PAD, "mask_truncated": mask_truncated, "markup_ids": markup}
    detailed = grpo_mask_flags(out, **common)
    expected = [sum(1 << k for k, on in enumerate(row) if on) for row in detailed.rows.tolist()]
    assert grpo_mask_row_kinds(out, **common).tolist() == expected


def test_hot_path_on_a_large_realistic_batch_with_planted_rows() -> None:
    g = torch.Generator().manual_seed(0)
    rows, width, plen = 256, 96, 12
    ids = torch.randint(40, 43, (rows, width), generator=g)
    ends = torch.randint(1, width + 1, (rows,), generator=g)
    pos = torch.arange(width).expand(rows, width)
    ids = torch.where(pos == (ends - 1).unsqueeze(1), torch.full_like(ids, EOS), ids)
    ids = torch.where(pos >= ends.unsqueeze(1), torch.full_like(ids, PAD), ids)
    cm = (pos < ends.unsqueeze(1)).long()
    pids = torch.randint(40, 43, (rows, plen), generator=g)
    pm = torch.ones_like(pids)
    cm[3, -1] = 1  # loss after EOS (or on padding)
    cm[7, 0] = 0  # a generated token without loss
    pm[9, 0] = 0  # a real prompt token hidden
    pids[11, -1], pm[11, -1] = PAD, 0  # a right-padded prompt: not a left-padded block
    out = {"prompt_ids": pids, "prompt_mask": pm, "completion_ids": ids, "completion_mask": cm}
    for mask_truncated in (False, True):
        common = {"eos_token_ids": EOS_IDS, "pad_token_id": PAD, "mask_truncated": mask_truncated}
        detailed = grpo_mask_flags(out, **common)
        bits = grpo_mask_row_kinds(out, **common)
        expected = [sum(1 << k for k, on in enumerate(row) if on) for row in detailed.rows.tolist()]
        assert bits.tolist() == expected and (bits[[3, 7, 9, 11]] != 0).all()
