"""Measure how long the model's completions are on training prompts, before choosing ``max_completion_length``.

::

    probe = probe_lengths(model, tokenizer, prompts, max_new_tokens=1024)
    print(probe.summary.text())          # p50/p90/p99/max, share hitting the cap, recommendation

Prompts are rendered as GRPOTrainer renders them (conversational prompts through the chat template with
``add_generation_prompt=True`` and the given ``chat_template_kwargs``; plain strings as they are) and sampled
with TRL's default settings (``do_sample``, temperature 1, top-p 1, no top-k), one completion per prompt.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.lengths import LengthSummary, summarize_lengths
from rl_guards.trl.template_check import tokenize_generation_prompts

__all__ = ["LengthProbe", "load_prompts", "probe_lengths"]


@dataclass
class LengthProbe:
    """Lengths of sampled completions and their summary."""

    lengths: list[int]  # new tokens per completion, EOS included
    hit_cap: list[bool]  # no EOS within max_new_tokens
    max_new_tokens: int
    summary: LengthSummary
    capped_tails: list[str] = field(default_factory=list)  # last characters of a few capped completions

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable numbers (the keys ``preflight.length_probe`` reads)."""
        s = self.summary
        return {
            "p50": s.p50,
            "p90": s.p90,
            "p99": s.p99,
            "max": s.max,
            "mean": s.mean,
            "cap": s.cap,
            "num_completions": s.count,
            "share_at_cap": s.hit_cap_share,
            "hit_cap": s.hit_cap,
            "recommended": s.recommended,
            "lower_bound": s.lower_bound,
        }


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """EOS ids as GRPOTrainer collects them: the generation config's, plus the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return [int(i) for i in ids]


def probe_lengths(
    model: Any,
    tokenizer: Any,
    prompts: list[Any],
    *,
    max_new_tokens: int = 1024,
    chat_template_kwargs: dict[str, Any] | None = None,
    batch_size: int = 8,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> LengthProbe:
    """Generate one completion per prompt and summarise the lengths (see :func:`summarize_lengths`)."""
    import torch
    from transformers import GenerationConfig

    if not prompts:
        raise ValueError("probe_lengths needs at least one prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    kwargs = dict(chat_template_kwargs or {})
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        pad_token_id=pad,
        eos_token_id=eos,
    )
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    lengths: list[int] = []
    hit_cap: list[bool] = []
    tails: list[str] = []
    eos_set = set(eos)
    try:
        for start in range(0, len(prompts), batch_size):
            rendered = tokenize_generation_prompts(tokenizer, prompts[start : start + batch_size], kwargs)
            width = max(len(r) for r in rendered)
            input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rendered], device=device)
            attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rendered], device=device)
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
            for row in out[:, width:].tolist():
                end = next((i for i, t in enumerate(row) if t in eos_set), None)
                if end is None:
                    lengths.append(len(row))
                    hit_cap.append(True)
                    if len(tails) < 3:
                        tails.append(tokenizer.decode(row, skip_special_tokens=False)[-160:])
                else:
                    lengths.append(end + 1)
                    hit_cap.append(False)
    finally:
        model.train(was_training)
    return LengthProbe(lengths, hit_cap, max_new_tokens, summarize_lengths(lengths, hit_cap, max_new_tokens), tails)


def load_prompts(
    path: str | Path, *, samples: int | None = None, seed: int = 0, column: str = "prompt", split: str = "train"
) -> list[Any]:
    """Prompts from a ``datasets.save_to_disk`` folder (``split`` of a DatasetDict) or a JSON-lines file.

    ``samples`` rows are drawn at random (by ``seed``) without replacement; None or more than the rows = all.
    """
    path = Path(path)
    if path.is_dir():
        from datasets import DatasetDict, load_from_disk

        data = load_from_disk(str(path))
        if isinstance(data, DatasetDict):
            if split not in data:
                raise ValueError(f"{path} holds splits {sorted(data)}, not {split!r}; pass --split")
            data = data[split]
        if column not in data.column_names:
            raise ValueError(f"{path} has no {column!r} column; columns: {data.column_names}")
        values = list(data[column])
    elif path.is_file():
        values = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if column not in row:
                raise ValueError(f"{path}:{n} has no {column!r} field; fields: {sorted(row)}")
            values.append(row[column])
    else:
        raise FileNotFoundError(f"{path}: no such dataset folder or JSON-lines file")
    if samples is not None and samples < len(values):
        values = [values[i] for i in sorted(random.Random(seed).sample(range(len(values)), samples))]
    return values
