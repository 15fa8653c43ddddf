"""Strings silently cut short (``text[:3000]``) between the model and what scores it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import numpy as np

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
      the run context's ``decode_text``, or a tokenizer); the ``slicing.decode_rows`` longest rows are checked,
      and of those only the rows whose text is shorter than the most their tokens can decode to are decoded
      (per-token length bounds, built once from the tokenizer: :func:`token_length_bounds`);
    - ``judge_input_cut``: a text recorded by :func:`rl_guards.rewards.slicing.watch_inputs` holds a
      completion cut short;
    - ``length_cap``: at least ``slicing.min_repeats`` distinct texts of one place (completions, prompt
      messages, string dataset columns, watched inputs) share one round length of ``slicing.min_length``
      characters or more and none is longer. Circumstantial evidence; the message says where and the length.

    Each rank compares the texts of its own rows (a round length repeated within one rank's rows); the counts are
    gathered, so every rank takes the same decision, and the message shows what the ranks that found it saw.

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

    FEATURES: ClassVar[tuple[str, ...]] = ("cut", "caps", "inputs")

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: SlicingConfig
        self._cuts: dict[int, CutText] = {}  # held row -> its cut (from the last scan)
        self._caps: list[LengthCap] = []
        self._cut_inputs: list[CutText] = []
        self._bounds: np.ndarray | None = None  # token id -> most characters it adds to a decoded text

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        tokenizer = ctx.tokenizer
        self._bounds = None
        decode = self._decoder()
        if tokenizer is not None and decode is not None and hasattr(tokenizer, "batch_decode"):
            try:  # most rows can then be cleared without decoding them
                self._bounds = token_length_bounds(tokenizer, decode)
            except Exception:  # unusual tokenizers: decode every row checked
                self._bounds = None

    def _decoder(self) -> Any:
        if self.ctx.decode_text is not None:
            return self.ctx.decode_text
        tokenizer = self.ctx.tokenizer
        if tokenizer is not None and hasattr(tokenizer, "decode"):
            return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)
        return None

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        """Per held row: ``cut`` (its text is shorter than its decoded tokens); on the first held row, the number of
        round-length ``caps`` and of cut watched ``inputs`` this rank found (texts of one place are compared within
        the rank's own rows). The details stay here for the message (:meth:`row_evidence`)."""
        cfg = self.config
        held = list(batch.held_rows)
        decode = self._decoder()
        self._cuts = {}
        if decode is not None:
            rows = self._rows_to_decode(batch, held)
            if self._bounds is not None:  # a text as long as its tokens' longest decoding was not cut
                ids = batch.completion_ids
                rows = [i for i in rows if len(batch.completions[i]) < _length_bound(self._bounds, ids[i])]
            # One by one: transformers 5's batch_decode loops over decode itself, with more overhead per row.
            decoded = [decode(batch.completion_ids[i]) for i in rows]
            for cut in find_cut_completions([batch.completions[i] for i in rows], decoded):
                self._cuts[rows[cut.row]] = dataclasses.replace(cut, row=rows[cut.row])
        completions = [batch.completions[i] for i in held]
        places: dict[str, list[str]] = {"completion": completions}
        places.update(_prompt_texts([batch.prompts[i] for i in held if i < len(batch.prompts)]))
        for column, values in sorted(batch.columns.items()):
            strings = [values[i] for i in held if i < len(values) and isinstance(values[i], str)]
            if strings:
                places[f"column {column!r}"] = strings
        watched = drain_watched()
        for name, texts in sorted(watched.items()):
            places[f"input of {name}"] = texts
        self._caps = []
        for where, texts in places.items():
            self._caps += find_length_caps(texts, where, min_repeats=cfg.min_repeats, min_length=cfg.min_length)
        self._cut_inputs = []
        for name, texts in sorted(watched.items()):
            for text in dict.fromkeys(texts):
                cut = find_cut_inside(text, completions, where=f"input of {name}", min_length=cfg.min_length)
                if cut is not None:
                    self._cut_inputs.append(dataclasses.replace(cut, row=held[cut.row]))
        first = [1.0] + [0.0] * (len(held) - 1) if held else []
        return {
            "cut": [float(i in self._cuts) for i in held],
            "caps": [v * len(self._caps) for v in first],
            "inputs": [v * len(self._cut_inputs) for v in first],
        }

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        """What this rank saw at ``row``: its cut (a completion row), or its caps and cut inputs (its first row)."""
        parts: dict[str, Any] = {}
        if row in self._cuts:
            parts["cut"] = _cut_line(batch, self._cuts[row])
        held = batch.held_rows
        if len(held) and row == held[0]:
            parts["caps"] = [cap.describe() for cap in self._caps]
            parts["inputs"] = [_cut_line(batch, c) for c in self._cut_inputs]
        return json.dumps(parts) if parts else None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        feats = {k: batch.column_array(v) for k, v in self.features(batch).items()}
        cut_rows = np.flatnonzero(feats["cut"]).tolist()
        caps, cut_inputs = int(feats["caps"].sum()), int(feats["inputs"].sum())
        report.metric("cut_completions", float(len(cut_rows)))
        report.metric("cut_inputs", float(cut_inputs))
        report.metric("length_caps", float(caps))
        if cut_rows:
            shown = cut_rows[:_MAX_SHOWN]
            report.violation(
                "completion_cut",
                lambda: self._cut_message(batch, shown, len(cut_rows), "completion"),
                TruncationError,
                rows=shown,
            )
        reporting = np.flatnonzero(feats["inputs"]).tolist()  # each rank's first row, when it found any
        if cut_inputs:
            report.violation(
                "judge_input_cut",
                lambda: self._gathered_message(batch, reporting, "inputs", cut_inputs, "watched input"),
                TruncationError,
                rows=reporting,
            )
        reporting = np.flatnonzero(feats["caps"]).tolist()
        if caps:
            report.violation("length_cap", lambda: self._cap_message(batch, reporting), TruncationError, rows=reporting)

    def _evidence(self, batch: RolloutBatch, row: int) -> dict[str, Any]:
        text = batch.evidence.get((self.name, row))
        if text is None and (batch.local_rows is None or row in batch.local_rows):
            text = self.row_evidence(batch, row)
        return json.loads(text) if text else {}

    def _rows_to_decode(self, batch: RolloutBatch, rows: list[int]) -> list[int]:
        """Every row, or the ``decode_rows`` longest (a slice only shortens texts longer than its cut)."""
        limit = self.config.decode_rows
        if not limit or limit >= len(rows):
            return rows
        return sorted(sorted(rows, key=lambda i: (-batch.completion_lengths[i], i))[:limit])

    def _cut_message(self, batch: RolloutBatch, rows: list[int], total: int, what: str) -> str:
        lines = [f"{total} {what}(s) cut short at step {batch.step} ({batch.mode}):"]
        lines += [f"  {self._evidence(batch, row).get('cut', f'row {row}: (on another rank)')}" for row in rows]
        lines.append(_CUT_FIX)
        return "\n".join(lines)

    def _gathered_message(self, batch: RolloutBatch, rows: list[int], part: str, total: int, what: str) -> str:
        lines = [f"{total} {what}(s) cut short at step {batch.step} ({batch.mode}):"]
        lines += [f"  {line}" for row in rows for line in self._evidence(batch, row).get(part, [])][:_MAX_SHOWN]
        lines.append(_CUT_FIX)
        return "\n".join(lines)

    def _cap_message(self, batch: RolloutBatch, rows: list[int]) -> str:
        lines = [f"texts line up on a round length at step {batch.step} ({batch.mode}), as a slice would leave them:"]
        lines += [f"  {line}" for row in rows for line in self._evidence(batch, row).get("caps", [])][:_MAX_SHOWN]
        lines.append(
            "Fix: look for text[:N] with these N in the data pipeline or the reward code; if the lengths are real, "
            "raise slicing.min_repeats or slicing.min_length."
        )
        return "\n".join(lines)


def token_length_bounds(tokenizer: Any, decode: Any) -> np.ndarray | None:
    """Per token id, how many characters it adds to ``tokenizer.decode(ids, skip_special_tokens=True)``, measured
    after an anchor token (SentencePiece drops a leading space only at the start, WordPiece joins with spaces), so
    that a row's decoded text is at most the sum over its tokens (a character split over byte tokens counts once per
    token). One batched decode of the vocabulary (once per run); None when ``decode`` (the decoder the guard uses)
    breaks the bound on sample sequences."""
    anchor = tokenizer("a", add_special_tokens=False)["input_ids"]
    if len(anchor) != 1:
        return None
    pairs = [[anchor[0], i] for i in range(len(tokenizer))]
    backend = getattr(tokenizer, "_tokenizer", None)  # the Rust tokenizer: 10x faster on a 151k vocabulary
    if hasattr(backend, "decode_batch"):  # it skips transformers' space clean-up, which only shortens texts
        base, texts = len(backend.decode(anchor, skip_special_tokens=True)), backend.decode_batch(pairs, True)
    else:
        base = len(tokenizer.decode(anchor, skip_special_tokens=True))
        texts = tokenizer.batch_decode(pairs, skip_special_tokens=True)
    bounds = np.fromiter((len(t) - base for t in texts), dtype=np.int64, count=len(texts)).clip(min=0)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 8, 16, 32, 64):  # the bound must hold on sequences, not only next to the anchor
        for _ in range(8):
            ids = rng.integers(0, len(bounds), n).tolist()
            if len(decode(ids)) > bounds[ids].sum():
                return None
    return bounds


def _length_bound(bounds: np.ndarray, ids: list[int]) -> float:
    """Most characters ``ids`` can decode to (infinite when an id is outside the vocabulary)."""
    if not ids:
        return 0
    arr = np.asarray(ids, dtype=np.int64)
    if arr.min() < 0 or arr.max() >= len(bounds):
        return float("inf")
    return int(bounds[arr].sum())


_CUT_FIX = (
    "Fix: find the slice (e.g. text[:N]) between the completion and this place and remove it, or cut on a "
    "boundary the reward understands and say so in the reward; a scorer that sees part of the answer "
    "scores something else."
)


def _cut_line(batch: RolloutBatch, c: CutText) -> str:
    return (
        f"{c.where}, row {c.row} (task {batch.tasks[c.row]!r}): kept {c.seen} of {c.full} characters, "
        f"...{c.seen_tail!r} | lost {c.lost_head!r}..."
    )
