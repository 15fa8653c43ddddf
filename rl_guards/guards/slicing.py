"""Strings silently cut short (``text[:3000]``) between the model and what scores it."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from rl_guards.config import SlicingConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.slicing import CutText, LengthCap, find_cut_completions, find_cut_inside, find_length_caps
from rl_guards.errors import TruncationError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rewards.slicing import drain_watched

_MAX_SHOWN = 3


def _prompt_texts(prompts: list[Any]) -> dict[str, list[str]]:
    """Prompt strings by place: plain prompts, or each chat message's content by role."""
    out: dict[str, list[str]] = {}
    for prompt in prompts:
        if isinstance(prompt, str):
            out.setdefault("prompt", []).append(prompt)
        elif isinstance(prompt, list):
            for message in prompt:
                if isinstance(message, dict) and isinstance(message.get("content"), str):
                    out.setdefault(f"prompt ({message.get('role', '?')} message)", []).append(message["content"])
    return out


class SlicingGuard(Guard):
    """Looks for cut strings in each batch; what it can and cannot see is in :mod:`rl_guards.core.slicing`.

    Checks, per batch:

    - ``completion_cut``: a completion reached the reward functions shorter than its decoded tokens (needs
      the run context's ``decode_text``, or a tokenizer); the ``slicing.decode_rows`` longest rows are checked;
    - ``judge_input_cut``: a text recorded by :func:`rl_guards.rewards.slicing.watch_inputs` holds a
      completion cut short;
    - ``length_cap``: at least ``slicing.min_repeats`` distinct texts of one place (completions, prompt
      messages, string dataset columns, watched inputs) share one round length of ``slicing.min_length``
      characters or more and none is longer. Circumstantial evidence; the message says where and the length.

    Watched inputs are per process: with several processes their findings are recorded (``info``), never raised,
    so that all ranks keep taking the same decisions.

    ========================================  =============================================================
    key                                       value
    ========================================  =============================================================
    ``rl_guards/slicing/cut_completions``     completions shorter than their decoded tokens
    ``rl_guards/slicing/cut_inputs``          watched texts holding a cut completion
    ``rl_guards/slicing/length_caps``         places whose texts line up on a round length
    ========================================  =============================================================
    """

    name: ClassVar[str] = "slicing"
    config_field: ClassVar[str] = "slicing"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: SlicingConfig

    def _decoder(self) -> Any:
        if self.ctx.decode_text is not None:
            return self.ctx.decode_text
        tokenizer = self.ctx.tokenizer
        if tokenizer is not None and hasattr(tokenizer, "decode"):
            return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)
        return None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        cfg = self.config
        decode = self._decoder()
        cut_completions: list[CutText] = []
        if decode is not None:
            rows = self._rows_to_decode(batch)
            decoded = [decode(batch.completion_ids[i]) for i in rows]
            cuts = find_cut_completions([batch.completions[i] for i in rows], decoded)
            cut_completions = [dataclasses.replace(c, row=rows[c.row]) for c in cuts]

        places: dict[str, list[str]] = {"completion": list(batch.completions)}
        places.update(_prompt_texts(batch.prompts))
        for column, values in sorted(batch.columns.items()):
            strings = [v for v in values if isinstance(v, str)]
            if strings:
                places[f"column {column!r}"] = strings
        watched = drain_watched()
        for name, texts in sorted(watched.items()):
            places[f"input of {name}"] = texts
        caps: list[LengthCap] = []
        for where, texts in places.items():
            caps += find_length_caps(texts, where, min_repeats=cfg.min_repeats, min_length=cfg.min_length)

        cut_inputs: list[CutText] = []
        for name, texts in sorted(watched.items()):
            for text in dict.fromkeys(texts):
                cut = find_cut_inside(text, batch.completions, where=f"input of {name}", min_length=cfg.min_length)
                if cut is not None:
                    cut_inputs.append(cut)

        report.metric("cut_completions", float(len(cut_completions)))
        report.metric("cut_inputs", float(len(cut_inputs)))
        report.metric("length_caps", float(len(caps)))
        if cut_completions:
            report.violation("completion_cut", self._cut_message(batch, cut_completions, "completion"), TruncationError)
        if cut_inputs:
            message = self._cut_message(batch, cut_inputs, "watched input")
            if self.ctx.world_size > 1:
                report.info("judge_input_cut", message)
            else:
                report.violation("judge_input_cut", message, TruncationError)
        if caps:
            report.violation("length_cap", self._cap_message(batch, caps), TruncationError)

    def _rows_to_decode(self, batch: RolloutBatch) -> list[int]:
        """Every row, or the ``decode_rows`` longest (a slice only shortens texts longer than its cut)."""
        limit = self.config.decode_rows
        if not limit or limit >= len(batch):
            return list(range(len(batch)))
        longest = sorted(range(len(batch)), key=lambda i: (-len(batch.completion_ids[i]), i))[:limit]
        return sorted(longest)

    @staticmethod
    def _cut_message(batch: RolloutBatch, cuts: list[CutText], what: str) -> str:
        lengths = sorted({c.seen for c in cuts})
        lines = [
            f"{len(cuts)} {what}(s) cut short at step {batch.step} ({batch.mode}); cut at {lengths[:5]} characters:"
        ]
        for c in cuts[:_MAX_SHOWN]:
            lines.append(
                f"  {c.where}, row {c.row} (task {batch.tasks[c.row]!r}): kept {c.seen} of {c.full} characters, "
                f"...{c.seen_tail!r} | lost {c.lost_head!r}..."
            )
        lines.append(
            "Fix: find the slice (e.g. text[:N]) between the completion and this place and remove it, or cut on a "
            "boundary the reward understands and say so in the reward; a scorer that sees part of the answer "
            "scores something else."
        )
        return "\n".join(lines)

    @staticmethod
    def _cap_message(batch: RolloutBatch, caps: list[LengthCap]) -> str:
        lines = [f"texts line up on a round length at step {batch.step} ({batch.mode}), as a slice would leave them:"]
        lines += [f"  {cap.describe()}" for cap in caps[:_MAX_SHOWN]]
        lines.append(
            "Fix: look for text[:N] with these N in the data pipeline or the reward code; if the lengths are real, "
            "raise slicing.min_repeats or slicing.min_length."
        )
        return "\n".join(lines)
