"""Non-thinking SFT: take the template's closed empty think block out of the loss.

With ``enable_thinking=False`` Qwen3-style templates write a closed empty block right after the assistant header
(``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``); at inference the generation prompt already contains it,
so the model never has to produce it. Training on it teaches nothing but the block itself. The block is derived
by rendering with the tokenizer's own template (never hard-coded): its exact string from the non-thinking
generation prompt, its token ids from a tokenized SFT conversation, and where the template puts it (the last
assistant turn, or every one).

Two ways in, both on SFTTrainer's final labels (TRL builds ``labels`` while preparing the dataset; its collator
only pads them)::

    trainer = SFTTrainer(model=..., args=SFTConfig(...), train_dataset=ds, processing_class=tok)
    # a) collator wrapper (flags from chat_template_kwargs, or per row when the features carry them)
    trainer.data_collator = EmptyThinkMasker(trainer.data_collator, tok, {"enable_thinking": False})
    # b) dataset transform on the prepared dataset (per-row `chat_template_kwargs` / `enable_thinking` columns)
    trainer.train_dataset = trainer.train_dataset.map(lambda ex: mask_empty_think(ex, tok))

A row known to be non-thinking whose assistant turn lacks the block where the template puts it raises
:class:`~rl_guards.errors.MaskingError` with the decoded row: it was rendered some other way than the template
renders non-thinking conversations. When wrapping together with ``MaskCheckingCollator``, put this masker
outermost: the empty block sits inside the assistant turn, which that checker expects to be trained.

Audit only (``check_only=True``): labels are left alone and a non-thinking sequence whose empty block still
carries labels is a violation ``empty_think_trained`` (``mode``: raise | warn | log, default warn; findings
in ``self.session``). Put it outermost to check what the loss finally sees::

    trainer.data_collator = EmptyThinkMasker(trainer.data_collator, tok, {"enable_thinking": False}, check_only=True)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rl_guards.collators.sft_masks import PROBE_ASSISTANT, PROBE_USER, render_chat
from rl_guards.collators.trainer_metrics import CollatorMetrics
from rl_guards.config import MaskingConfig
from rl_guards.core.masks import IGNORE_INDEX, find_subsequence
from rl_guards.core.templates import extract_empty_think, generation_start, visible_tail
from rl_guards.core.think_markup import markup_for_template
from rl_guards.errors import MaskingError
from rl_guards.guards.base import GuardSession

EMPTY_THINK_TRAINED = "empty_think_trained"  # audit violation: a non-thinking row trains on the empty block


@dataclass(frozen=True)
class EmptyThinkBlock:
    """The closed empty think block as the template renders it, and where."""

    text: str  # e.g. '<think>\n\n</think>\n\n'
    header: tuple[int, ...]  # assistant header ids right before it, e.g. <|im_start|>assistant\n
    ids: tuple[int, ...]  # the block's ids in a tokenized conversation
    every_turn: bool  # the template writes it in every assistant turn (else only the last one)


def _token_span(offsets: Sequence[tuple[int, int]], start: int, stop: int) -> tuple[int, int] | None:
    """Token indexes ``[i, j)`` covering characters ``[start, stop)`` exactly, or None if a token straddles."""
    i = next((k for k, (a, _) in enumerate(offsets) if a == start), None)
    j = next((k for k, (a, _) in enumerate(offsets) if a == stop), None)
    if j is None and offsets and offsets[-1][1] == stop:
        j = len(offsets)
    if i is None or j is None or j <= i:
        return None
    return i, j


def derive_empty_think(
    tokenizer: Any, chat_template: str | None = None, chat_template_kwargs: Mapping[str, Any] | None = None
) -> EmptyThinkBlock:
    """Render probes with ``enable_thinking=False`` and locate the empty block; ValueError when there is none."""
    kw = {**(chat_template_kwargs or {}), "enable_thinking": False}
    template_text = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    markup = markup_for_template(template_text if isinstance(template_text, str) else None)
    user = [{"role": "user", "content": PROBE_USER}]
    gen = render_chat(tokenizer, user, True, chat_template, kw)
    history = render_chat(tokenizer, user, False, chat_template, kw)
    block = extract_empty_think(gen, markup, history=history)
    if block is None:
        raise ValueError(
            f"the template renders no empty think block for enable_thinking=False (generation prompt "
            f"{visible_tail(gen, width=80)}): nothing to mask"
        )
    header_text = gen[generation_start(gen, history) : len(gen) - len(block)]
    turn = [*user, {"role": "assistant", "content": PROBE_ASSISTANT}]
    full = render_chat(tokenizer, turn, False, chat_template, kw)
    where = full.find(header_text + block)
    between = full[where + len(header_text + block) :].split(PROBE_ASSISTANT)[0] if where >= 0 else "x"
    if not header_text or where < 0 or between.strip():  # the answer must follow, up to whitespace
        raise ValueError(
            f"the template's SFT render has no {block!r} after the assistant header {header_text!r}: "
            f"{visible_tail(full, width=120)}"
        )
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    ids = [int(t) for t in enc["input_ids"]]
    h = _token_span(offsets, where, where + len(header_text))
    b = _token_span(offsets, where + len(header_text), where + len(header_text) + len(block))
    if h is None or b is None:
        raise ValueError(f"the empty block {block!r} is not made of whole tokens after {header_text!r}")
    header_ids, block_ids = tuple(ids[h[0] : h[1]]), tuple(ids[b[0] : b[1]])
    two = [*turn, {"role": "user", "content": PROBE_USER}, {"role": "assistant", "content": PROBE_ASSISTANT}]
    every = render_chat(tokenizer, two, False, chat_template, kw).count(header_text + block) >= 2
    return EmptyThinkBlock(text=block, header=header_ids, ids=block_ids, every_turn=every)


def header_positions(ids: Sequence[int], header: Sequence[int]) -> list[int]:
    """Indexes right after each occurrence of ``header``."""
    out, i = [], find_subsequence(ids, header)
    while i >= 0:
        out.append(i + len(header))
        i = find_subsequence(ids, header, i + len(header))
    return out


def _row_thinking(row: Mapping[str, Any], default: bool | None) -> bool | None:
    kwargs = row.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is not None:
        return bool(kwargs["enable_thinking"])
    if row.get("enable_thinking") is not None:
        return bool(row["enable_thinking"])
    return default


class EmptyThinkMasker:
    """Collator wrapper: labels of the template's empty think block become -100 in non-thinking sequences.

    ``chat_template_kwargs`` is what the data was rendered with; its ``enable_thinking`` is the default thinking
    mode of a row (None: unknown, mask wherever the block follows a header, assert nothing). Features that carry
    ``chat_template_kwargs`` or ``enable_thinking`` (``remove_unused_columns=False``) override it per row.
    ``self.masked`` counts masked blocks. ``check_only=True`` masks nothing and reports non-thinking sequences
    whose block carries labels (``empty_think_trained``, per ``mode``; counted in ``self.trained_blocks``).
    """

    def __init__(
        self,
        collator: Callable[[list[Any]], Mapping[str, Any]] | None,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        chat_template: str | None = None,
        check_only: bool = False,
        mode: str = "warn",
    ) -> None:
        self.collator = collator
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        kwargs = dict(chat_template_kwargs or {})
        self.default_thinking = None if kwargs.get("enable_thinking") is None else bool(kwargs["enable_thinking"])
        self.block = derive_empty_think(self.tokenizer, chat_template, kwargs)
        self.masked = 0
        self.check_only = bool(check_only)
        self.config = MaskingConfig(mode=mode)  # type: ignore[arg-type]
        self.config.validate("EmptyThinkMasker")
        self.session = GuardSession()
        self.metrics = CollatorMetrics()  # rl_guards/masking/violations -> the calling trainer's log
        self.trained_blocks = 0

    def __getattr__(self, name: str) -> Any:
        if name == "collator":
            raise AttributeError(name)
        return getattr(self.collator, name)

    # ----- one sequence ---------------------------------------------------------------------------------------
    def spans(self, ids: Sequence[int], thinking: bool | None) -> list[tuple[int, int]]:
        """``[start, stop)`` of the blocks to mask in one sequence; MaskingError when a non-thinking turn lacks it."""
        if thinking:
            return []
        block = list(self.block.ids)
        starts = header_positions(ids, self.block.header)
        found = [(p, p + len(block)) for p in starts if list(ids[p : p + len(block)]) == block]
        if thinking is False and starts:
            expected = starts if self.block.every_turn else starts[-1:]
            # A block cut by truncation (the row ends inside it) is exempt.
            missing = [
                p for p in expected if (p, p + len(block)) not in found and list(ids[p:]) != block[: len(ids) - p]
            ]
            if missing:
                p = missing[0]
                row = self.tokenizer.decode(list(ids), skip_special_tokens=False)
                after = self.tokenizer.decode(list(ids[p : p + len(block) + 8]), skip_special_tokens=False)
                raise MaskingError(
                    "[rl_guards/masking] a non-thinking assistant turn lacks the empty think block "
                    f"{self.block.text!r} the template puts there: it starts {after!r}. Row: "
                    f"{visible_tail(row, width=400)}. Render non-thinking rows with enable_thinking=False "
                    "(SFTTrainer honours a per-row chat_template_kwargs column), or mark them as thinking.",
                    guard="masking",
                )
        return found

    def mask_example(self, example: Mapping[str, Any]) -> dict[str, list[int]]:
        """Dataset-transform form: ``{"labels": ...}`` for one prepared example (``input_ids``, maybe ``labels``)."""
        ids = [int(t) for t in example["input_ids"]]
        labels = [int(t) for t in example.get("labels") or ids]
        for a, b in self.spans(ids, _row_thinking(example, self.default_thinking)):
            labels[a:b] = [IGNORE_INDEX] * (b - a)
            self.masked += 1
        return {"labels": labels}

    # ----- a collated batch -----------------------------------------------------------------------------------
    def __call__(self, features: list[Any]) -> Mapping[str, Any]:
        if self.collator is None:
            raise TypeError("EmptyThinkMasker(collator=None) is for mask_example only")
        batch = self.collator(features)
        if "labels" not in batch or "input_ids" not in batch:
            raise MaskingError(
                f"[rl_guards/masking] the collator returned no labels/input_ids (keys: {sorted(batch)})",
                guard="masking",
            )
        flags = [
            _row_thinking(f, self.default_thinking) if isinstance(f, Mapping) else self.default_thinking
            for f in features
        ]
        ids_rows = batch["input_ids"].tolist()
        labels = batch["labels"]
        trained: list[tuple[int, int, int]] = []  # (row, start, stop) of blocks that carry labels
        for k, (r, a, b) in enumerate(_sequences(batch, len(features))):
            thinking = flags[k] if k < len(flags) else self.default_thinking
            for s, e in self.spans(ids_rows[r][a:b], thinking):
                if self.check_only:
                    if thinking is False and bool((labels[r, a + s : a + e] != IGNORE_INDEX).any()):
                        trained.append((r, a + s, a + e))
                    continue
                labels[r, a + s : a + e] = IGNORE_INDEX
                self.masked += 1
        if trained:
            self.trained_blocks += len(trained)
            try:
                self._report_trained(trained, batch)
            finally:  # into the calling trainer's log; nothing piles up in the session
                self.metrics.deliver(self.session.pop_metrics())
        return batch

    def _report_trained(self, trained: list[tuple[int, int, int]], batch: Mapping[str, Any]) -> None:
        r, start, stop = trained[0]
        ids = batch["input_ids"][r].tolist()
        shown = self.tokenizer.decode(ids[max(0, start - 6) : stop + 4], skip_special_tokens=False)
        message = (
            f"{len(trained)} non-thinking sequence(s) train on the template's empty think block "
            f"{self.block.text!r} (labels are not -100 there), e.g. row {r}: ...{shown!r}... The generation prompt "
            "already contains the block at inference, so the model learns nothing but the block. "
            "Fix: wrap the collator with EmptyThinkMasker(collator, tokenizer, {'enable_thinking': False}) (or "
            "dataset.map(mask_empty_think)) so the block leaves the loss."
        )
        reporter = self.session.reporter("masking", self.config, None)
        reporter.violation(EMPTY_THINK_TRAINED, message, MaskingError)


def _sequences(batch: Mapping[str, Any], n_features: int) -> list[tuple[int, int, int]]:
    """``(row, start, stop)`` per feature: one per row, or the packed sequences of a padding-free row."""
    ids = batch["input_ids"]
    rows, width = int(ids.shape[0]), int(ids.shape[1])
    if rows == 1 and n_features > 1 and batch.get("position_ids") is not None:
        pos = batch["position_ids"][0].tolist()
        starts = [j for j, p in enumerate(pos) if p == 0][:n_features]
        bounds = [*starts, width]
        return [(0, a, b) for a, b in itertools.pairwise(bounds)]
    if batch.get("attention_mask") is not None:  # real tokens only (left or right padding)
        out = []
        for r, mask in enumerate(batch["attention_mask"].tolist()):
            real = [j for j, m in enumerate(mask) if m]
            out.append((r, real[0], real[-1] + 1) if real else (r, 0, 0))
        return out
    return [(r, 0, width) for r in range(rows)]


@functools.lru_cache(maxsize=16)
def _cached_masker(tokenizer: Any, template: str | None, kwargs: tuple[tuple[str, Any], ...]) -> EmptyThinkMasker:
    return EmptyThinkMasker(None, tokenizer, dict(kwargs), chat_template=template)


def mask_empty_think(
    example: Mapping[str, Any],
    tokenizer: Any,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    chat_template: str | None = None,
) -> dict[str, list[int]]:
    """``{"labels": ...}`` with the empty block masked: ``dataset.map(lambda ex: mask_empty_think(ex, tok))``.

    The row's thinking mode comes from its ``chat_template_kwargs`` / ``enable_thinking`` columns, else from
    ``chat_template_kwargs`` here.
    """
    key = tuple(sorted((chat_template_kwargs or {}).items()))
    return _cached_masker(tokenizer, chat_template, key).mask_example(example)
