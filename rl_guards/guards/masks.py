"""The GRPO mask guard: stops a run whose loss mask weights the wrong tokens.

The rules and their device-side checks are in :mod:`rl_guards.tensors.grpo_masks` (torch, imported when a batch
is checked, so this module imports without torch); the reference rules in :mod:`rl_guards.core.masks`.

Metrics (``rl_guards/masking/...``):

====================  ==========================================================
``checked_batches``   batches checked so far (cumulative; ``check_every`` samples)
``violating_rows``    rows (all ranks) breaking at least one rule, per checked batch
``violations``        one per reported violation (from the Reporter)
====================  ==========================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rl_guards.config import GuardsConfig, MaskingConfig
from rl_guards.core import masks as M
from rl_guards.errors import MaskingError
from rl_guards.guards.base import Guard, Reporter

if TYPE_CHECKING:
    import torch

    from rl_guards.tensors.grpo_masks import GRPOMaskFlags

PROMPT_TAIL_SHOWN = 12  # prompt tokens shown before a completion in error messages
PADDING_SHOWN = 3  # padding tokens shown after a completion's end in error messages

RULES: dict[str, tuple[str, str]] = {
    M.MASK_VALUES: (
        "have mask values other than 0 and 1 (a weight of 2 doubles a token's loss)",
        "build completion_mask / tool_mask / prompt_mask as 0/1 integer tensors.",
    ),
    M.POST_EOS: (
        "carry loss after their first EOS token",
        "completion_mask must be 1 up to and including the first EOS and 0 after it. If you build completion_ids "
        "yourself (rollout_func, a trainer subclass), cut each completion after its first EOS, as "
        "GRPOTrainer._generate does, and right-pad completion_mask with 0.",
    ),
    M.PADDING: (
        "carry loss on padding (a completion without EOS, followed by pad tokens)",
        "right-pad completion_mask with 0 where completion_ids holds padding.",
    ),
    M.TRUNCATED_UNMASKED: (
        "are truncated (no EOS) yet carry loss although mask_truncated_completions=True",
        "zero the whole completion_mask (and tool_mask) of truncated rows, as GRPOTrainer does, or set "
        "mask_truncated_completions=False if truncated completions are meant to train.",
    ),
    M.MISSING_LOSS: (
        "have generated tokens up to the first EOS that carry no loss",
        "completion_mask must be 1 on every generated token up to and including the first EOS (tool results "
        "aside); to drop truncated completions use mask_truncated_completions=True instead of zeroing by hand.",
    ),
    M.TOOL_MASK: (
        "have a tool_mask that does not line up with the tool results in completion_ids",
        "tool_mask must be 0 exactly on the tokens the trainer inserted after the model's end-of-turn token "
        "(the rendered tool turn and the next assistant header) and 1 on every model token.",
    ),
    M.PROMPT_LEAK: (
        "start with their prompt's own tokens (completion_ids overlap prompt_ids)",
        "completion_ids must start right after the prompt: slice generated sequences at the padded prompt length "
        "(prompt_completion_ids[:, prompt_ids.size(1):]); a rollout_func returns only the new tokens.",
    ),
    M.PROMPT_OVERLAP: (
        "start with the same tokens their prompt ends with (or with their whole prompt); the model may write "
        "this itself (a collapsing policy), or the rollout path cut the prompt a few tokens early",
        "if you build completion_ids yourself (rollout_func, a trainer subclass), slice generated sequences at the "
        "padded prompt length; if the rows above are what the model wrote, nothing is wrong with the masks (the "
        "model repeats the prompt: read the rollouts) and masking.mode: log silences this.",
    ),
    M.PROMPT_MASK: (
        "have a prompt_mask that is not a left-padded block matching prompt_ids != pad",
        "prompt_mask must be 0 on the left padding and 1 on every prompt token (attention over padding, or a "
        "hidden prompt token, changes the log-probs the loss is computed from).",
    ),
    M.REWARD_POSITION: (
        "carry their reward on a position without loss (padding, a tool result, a masked token): the reward still "
        "enters the group's statistics (GRPO sums the row's token rewards unmasked) while no token of the row can "
        "learn from it; verl 0.9 writes an empty response's reward on its last padding column",
        "place each row's reward on its last trained token and give a response without tokens no reward (or drop "
        "the row); in a verl reward manager, return the score only for rows whose valid response length is > 0.",
    ),
}


class GRPOMaskGuard(Guard):
    """Stops a GRPO run whose loss mask weights the wrong tokens (``MaskingError``).

    The TRL hook calls :meth:`check_tensors` on every rank with the dict ``_generate_and_score_completions``
    returns; one batch in ``masking.check_every`` is checked.
    """

    name: ClassVar[str] = "masking"
    config_field: ClassVar[str] = "masking"
    TENSOR_FEATURES: ClassVar[tuple[str, ...]] = ("kinds", "checked")  # computed on the device (tensor_features)

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: MaskingConfig = config.masking
        self.calls = 0
        self.checked = 0
        self._tool_markers: tuple[list[int], list[int]] | None = None
        self._tool_markers_done = False
        self._markup: dict[int, bool] = {}  # token id -> think tag or whitespace only (decoded once)
        self._vocab_markup: list[int] | None = None  # every such id of the vocabulary (computed once)
        self._per_batch_markup = False
        # (output, flags, per-row bitmask) of the batch check_tensors staged for on_batch (adapter path)
        self._staged: tuple[Mapping[str, Any], GRPOMaskFlags | None, torch.Tensor] | None = None

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        self._markup_ids({})  # the vocabulary's markup ids, once, at install rather than in the first batch

    # ----- state -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "checked": self.checked}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))
        self.checked = int(state.get("checked", 0))

    # ----- the check ---------------------------------------------------------------------------------------
    def _pad_token_id(self) -> int | None:
        if self.ctx.pad_token_id is not None:
            return int(self.ctx.pad_token_id)
        tok = self.ctx.tokenizer
        return None if getattr(tok, "pad_token_id", None) is None else int(tok.pad_token_id)

    def _eos_token_ids(self) -> list[int]:
        if self.ctx.eos_token_ids:
            return [int(e) for e in self.ctx.eos_token_ids]
        eos = getattr(self.ctx.tokenizer, "eos_token_id", None)
        return [] if eos is None else [int(eos)]

    def _tool_result_markers(self) -> tuple[list[int], list[int]]:
        if not self._tool_markers_done:
            self._tool_markers_done = True
            if self.ctx.tokenizer is not None:
                from rl_guards.chat.tool_markers import tool_result_markers

                self._tool_markers = tool_result_markers(
                    self.ctx.tokenizer, self.ctx.chat_template, self.ctx.chat_template_kwargs
                )
        return self._tool_markers or ([], [])

    def _markup_ids(self, output: Mapping[str, Any]) -> list[int]:
        """Token ids that are think tags or whitespace only: what a model may repeat after a prompt ending in them.

        Taken once from the whole vocabulary (one batched decode at the first check), so no batch pays a host
        transfer for it; a tokenizer without ``batch_decode`` falls back to decoding the prompts' last tokens.
        """
        tok = self.ctx.tokenizer
        if tok is None:
            return []
        if self._vocab_markup is None:
            try:
                # One batched decode of the vocabulary (~1 s for Qwen's 151k tokens, once per run): a token's
                # vocabulary form does not tell whitespace apart (byte-level BPE writes a newline as a letter).
                texts = tok.batch_decode([[i] for i in range(len(tok))], skip_special_tokens=False)
                self._vocab_markup = [i for i, text in enumerate(texts) if self._is_markup(text)]
            except Exception:  # slow or unusual tokenizers: per batch, the prompts' last tokens
                self._vocab_markup = []
                self._per_batch_markup = True
        if not self._per_batch_markup:
            return self._vocab_markup
        for token in _tensors().prompt_tail_tokens(output.get("prompt_ids"), M.LEAK_WINDOW):
            if token not in self._markup:
                self._markup[token] = self._is_markup(tok.decode([int(token)], skip_special_tokens=False))
        return [t for t, is_markup in self._markup.items() if is_markup]

    def _is_markup(self, text: str) -> bool:
        tags = self.guards_config.think_tags
        return not text.replace(tags.open_tag, "").replace(tags.close_tag, "").strip()

    def check_tensors(self, output: Mapping[str, Any], report: Reporter) -> None:
        """Check one rollout batch (local rows); all ranks reach the same verdict.

        Under the TRL adapter (``report.session.defer``) this only computes the per-row rule bitmask on the batch's
        device (:meth:`tensor_features`, no host transfer); the adapter gathers it with the other per-row features
        and :meth:`on_batch` decides. Called on its own, it checks, reduces over ranks and reports at once.
        """
        self.calls += 1
        self._staged = None
        if (self.calls - 1) % self.config.check_every:
            return
        if report.session.defer:
            self._staged = (output, None, self._row_kinds(output))
            return
        self._check_now(output, report)

    def _rule_args(self, output: Mapping[str, Any]) -> dict[str, Any]:
        """The run's side of the rules: EOS and pad ids, truncation masking, tool-result markers, markup ids."""
        head, tail = self._tool_result_markers() if output.get("tool_mask") is not None else ([], [])
        return {
            "eos_token_ids": self._eos_token_ids(),
            "pad_token_id": self._pad_token_id(),
            "mask_truncated": bool(getattr(self.ctx.args, "mask_truncated_completions", False)),
            "tool_head_ids": head,
            "tool_tail_ids": tail,
            "markup_ids": self._markup_ids(output),
        }

    def _row_kinds(self, output: Mapping[str, Any]) -> torch.Tensor:
        return _tensors().grpo_mask_row_kinds(output, **self._rule_args(output))

    def _flags(self, output: Mapping[str, Any]) -> GRPOMaskFlags:
        return _tensors().grpo_mask_flags(output, **self._rule_args(output))

    def tensor_features(self, rows: int, device: Any) -> dict[str, torch.Tensor]:
        """Per-row ``kinds`` bitmask of the batch staged by :meth:`check_tensors` (zeros when it was not checked),
        and ``checked`` (1 on every row of a checked batch), on the batch's device."""
        return _tensors().staged_features(None if self._staged is None else self._staged[2], rows, device)

    def on_batch(self, batch: Any, report: Reporter) -> None:
        """Decide from the gathered per-row bitmask (every rank holds the same numbers)."""
        checked = batch.feature("masking/checked")
        kinds_column = batch.feature("masking/kinds")
        if kinds_column is None or checked is None or not checked.any():
            return
        bits = kinds_column.astype(np.int64)
        kinds = M.GRPO_KINDS
        broken = [(bits >> k) & 1 for k in range(len(kinds))]
        counts = [int(b.sum()) for b in broken] + [int((bits != 0).sum())]
        self.checked += 1
        report.metric("checked_batches", float(self.checked))
        report.metric("violating_rows", float(counts[len(kinds)]))
        if not counts[len(kinds)]:
            return
        global_report = _tensors().report_from_counts(counts, len(bits), None)
        for k, kind in enumerate(kinds):
            if counts[k]:
                global_report.rows[kind] = np.flatnonzero(broken[k]).tolist()
        for kind in global_report.kinds:
            shown = global_report.rows[kind][: self.config.max_rows_shown]
            message = partial(self._global_message, kind, global_report, batch, shown)
            if kind in M.SUSPECTED_KINDS:  # the model can write this itself: evidence for a warning, never a stop
                report.suspect(kind, message, rows=shown)
            else:
                report.violation(kind, message, MaskingError, rows=shown)

    def row_evidence(self, batch: Any, row: int) -> str | None:
        """The row rendered with its loss mask, for every rule it breaks (JSON: kind -> rendering)."""
        if self._staged is None or row not in batch.held_rows:
            return None
        output, flags, bits = self._staged
        if flags is None:  # per-position detail only now that a message needs it
            flags = self._flags(output)
            self._staged = (output, flags, bits)
        local = row - batch.held_rows.start
        if local >= flags.rows.size(0):
            return None
        broken = flags.rows[local].tolist()
        views = {
            kind: self._render_row(kind, local, flags, output)
            for kind, b in zip(M.GRPO_KINDS, broken, strict=True)
            if b
        }
        return json.dumps(views) if views else None

    def _global_message(self, kind: str, global_report: M.MaskReport, batch: Any, shown: list[int]) -> str:
        output = self._staged[0] if self._staged is not None else {}
        lines, fix = _message_head(kind, global_report, output)
        lines.append(M.LEGEND)
        for row in shown:
            text = batch.evidence.get((self.name, row)) or self.row_evidence(batch, row)
            view = json.loads(text).get(kind) if text else None
            lines.append(f"row {row}: " + (view if view is not None else "(rendered on the rank that holds it)"))
        lines.append(f"Fix: {fix}")
        return "\n".join(lines)

    def _check_now(self, output: Mapping[str, Any], report: Reporter) -> None:
        tensors = _tensors()
        n_kinds = len(M.GRPO_KINDS)
        flags: GRPOMaskFlags | None = None
        failure: Exception | None = None
        try:
            local = tensors.local_bit_counts(self._row_kinds(output), output, failed=False)
        except Exception as exc:  # still join the collective below, or the other ranks would hang
            failure = exc
            local = tensors.local_bit_counts(None, output, failed=True)
        from rl_guards.tensors.collectives import all_reduce_sum

        counts = all_reduce_sum(local).tolist()
        if failure is not None:
            raise failure
        self.checked += 1
        report.metric("checked_batches", float(self.checked))
        report.metric("violating_rows", float(counts[n_kinds]))
        if not counts[n_kinds]:
            return
        global_report = tensors.report_from_counts(counts[: n_kinds + 1], int(counts[n_kinds + 1]), None)
        local_report = None
        local_counts = local.tolist()
        if local_counts[n_kinds]:  # per-position detail only on a rank whose rows a message shows
            flags = self._flags(output)
            local_report = tensors.report_from_counts(local_counts[: n_kinds + 1], flags.rows.size(0), flags)
        for kind in global_report.kinds:
            text = self._message(kind, global_report, local_report, flags, output)
            if kind in M.SUSPECTED_KINDS:
                report.suspect(kind, text)
            else:
                report.violation(kind, text, MaskingError)

    # ----- the message -------------------------------------------------------------------------------------
    def _message(
        self,
        kind: str,
        global_report: M.MaskReport,
        local_report: M.MaskReport | None,
        flags: GRPOMaskFlags | None,
        output: Mapping[str, Any],
    ) -> str:
        lines, fix = _message_head(kind, global_report, output)
        local_rows = (local_report.rows.get(kind, []) if local_report else [])[: self.config.max_rows_shown]
        if flags is not None and local_rows:
            lines.append(M.LEGEND)
            for row in local_rows:
                lines.append(f"row {row}: " + self._render_row(kind, row, flags, output))
        elif self.ctx.world_size > 1:
            lines.append(f"(the offending rows are on other ranks; rank {self.ctx.process_index} has none)")
        lines.append(f"Fix: {fix}")
        return "\n".join(lines)

    def _decode_pieces(self, ids: list[int]) -> list[str]:
        tok = self.ctx.tokenizer
        if tok is None:
            return [f"[{t}]" for t in ids]
        return M.token_pieces(lambda x: tok.decode(x, skip_special_tokens=False), ids)

    def _render_row(self, kind: str, row: int, flags: GRPOMaskFlags, output: Mapping[str, Any]) -> str:
        pids = output["prompt_ids"][row].tolist()
        pm = output["prompt_mask"][row].tolist()
        if kind == M.PROMPT_MASK:
            pieces = self._decode_pieces(pids)
            return "prompt («attended»): " + M.render_spans(pieces, pm, flags.prompt_bad[row].tolist())
        prompt = [t for t, m in zip(pids, pm, strict=True) if m][-PROMPT_TAIL_SHOWN:]
        ids = output["completion_ids"][row].tolist()
        stop = min(len(ids), int(flags.content_end[row]) + 1 + PADDING_SHOWN)
        bad = flags.completion_bad[kind][row].tolist()
        last_bad = max((j for j, f in enumerate(bad) if f), default=-1)
        stop = max(stop, last_bad + 1)
        loss = flags.loss[row].tolist()
        prompt_text = M.render_spans(self._decode_pieces(prompt), [0] * len(prompt))
        body = M.render_spans(self._decode_pieces(ids[:stop]), loss[:stop], bad[:stop])
        more = f"…(+{len(ids) - stop} more)" if stop < len(ids) else ""
        return f"…{prompt_text} ‖ {body}{more}"


def _message_head(kind: str, global_report: M.MaskReport, output: Mapping[str, Any]) -> tuple[list[str], str]:
    """A mask message's first line (the rule, how many rows of the batch break it, the other rules broken) and its
    fix (with the tool-mask hint when the batch has one)."""
    what, fix = RULES[kind]
    if kind == M.POST_EOS and output.get("tool_mask") is not None:
        fix += " With tools, tool_mask must be 0 from the token right after the model's EOS to the next turn."
    lines = [f"{kind}: {global_report.counts[kind]} of {global_report.num_rows} rows {what}."]
    others = [k for k in global_report.kinds if k != kind]
    if others:
        lines[0] += " Also: " + ", ".join(f"{k} ({global_report.counts[k]})" for k in others) + "."
    return lines, fix


def _tensors() -> Any:
    """The torch side of the check, imported on first use (this module stays importable without torch)."""
    from rl_guards.tensors import grpo_masks

    return grpo_masks


__all__ = ["PADDING_SHOWN", "PROMPT_TAIL_SHOWN", "RULES", "GRPOMaskGuard"]
