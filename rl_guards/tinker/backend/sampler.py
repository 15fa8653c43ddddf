"""Sampling, the way a Tinker sampler answers ``asample``.

Semantics the cookbook relies on (the brief's reading of the SDK and renderers; Tinker's own server is closed):

- ``stop``: ``None`` stops at the tokenizer's EOS; a list of token ids stops at any of them; a string or a list of
  strings stops once the decoded text generated so far contains one; ``[]`` stops only at ``max_tokens``. The
  tokens that made the stop are **kept** in ``tokens`` (renderers' ``parse_response`` expects the stop token).
- ``stop_reason`` is ``"stop"`` when a stop matched, else ``"length"`` (``max_tokens`` reached).
- ``logprobs`` are each sampled token's log-probability under the model (temperature 1): what the trainer computes
  for the same token, so the cookbook's ``optim/kl_sample_train`` stays ~0 when weights are unchanged. Tinker's own
  behaviour at other temperatures is not documented; the cookbook's default is 1.
- Each sample draws from a generator seeded from ``sampling_params.seed`` when given, else from the backend's seed,
  the sampling session and the request's ``seq_id``: a run is reproducible whatever order requests arrive in.

Requests with prompts of the same length run as one batch (a group's rollouts share their prompt), each row with its
own generator, stop rule and budget.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rl_guards.tinker.backend.wire import Sampled


@dataclass
class StopRule:
    """When one sampled sequence stops."""

    token_ids: frozenset[int] = frozenset()
    strings: tuple[str, ...] = ()

    @classmethod
    def of(cls, stop: Any, eos_token_id: int | None) -> StopRule:
        if stop is None:
            return cls(frozenset() if eos_token_id is None else frozenset({int(eos_token_id)}))
        if isinstance(stop, str):
            return cls(strings=(stop,))
        items = list(stop)
        return cls(
            token_ids=frozenset(int(s) for s in items if isinstance(s, int) and not isinstance(s, bool)),
            strings=tuple(s for s in items if isinstance(s, str)),
        )


@dataclass
class Row:
    """One sequence to sample: its prompt, budget, temperature/top-k/top-p, stop rule and seed."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop: StopRule = field(default_factory=StopRule)
    seed: int = 0


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any values (stable across processes, unlike ``hash``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _pick(logits: torch.Tensor, row: Row, generator: torch.Generator) -> int:
    scaled = logits / max(row.temperature, 1e-6)
    if row.top_k > 0 and row.top_k < scaled.numel():
        kth = torch.topk(scaled, row.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if row.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, 0) - sorted_probs < row.top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def sample_rows(model: Any, rows: Sequence[Row], decode: Any) -> list[Sampled]:
    """Sample every row; rows whose prompts have one length share each forward pass (KV cache, no padding)."""
    out: list[Sampled | None] = [None] * len(rows)
    by_length: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if not row.prompt:
            raise ValueError("cannot sample from an empty prompt")
        by_length.setdefault(len(row.prompt), []).append(i)
    for indices in by_length.values():
        for i, sampled in zip(indices, _sample_same_length(model, [rows[i] for i in indices], decode), strict=True):
            out[i] = sampled
    return [s for s in out if s is not None]


def _sample_same_length(model: Any, rows: list[Row], decode: Any) -> list[Sampled]:
    generators = [torch.Generator().manual_seed(row.seed) for row in rows]
    tokens: list[list[int]] = [[] for _ in rows]
    logprobs: list[list[float]] = [[] for _ in rows]
    reasons = ["length"] * len(rows)
    active = [row.max_tokens > 0 for row in rows]
    output = model(input_ids=torch.tensor([row.prompt for row in rows]), use_cache=True)
    past = output.past_key_values
    logits = output.logits[:, -1, :].float()
    steps = max((row.max_tokens for row in rows), default=0)
    for _ in range(steps):
        log_probs = torch.log_softmax(logits, dim=-1)
        nxt = [0] * len(rows)
        for r, row in enumerate(rows):
            if not active[r]:
                continue
            token = _pick(logits[r], row, generators[r])
            nxt[r] = token
            tokens[r].append(token)
            logprobs[r].append(float(log_probs[r, token]))
            if token in row.stop.token_ids or (
                row.stop.strings and any(s in decode(tokens[r]) for s in row.stop.strings)
            ):
                reasons[r] = "stop"
                active[r] = False
            elif len(tokens[r]) >= row.max_tokens:
                active[r] = False
        if not any(active):
            break
        output = model(input_ids=torch.tensor([[t] for t in nxt]), past_key_values=past, use_cache=True)
        past = output.past_key_values
        logits = output.logits[:, -1, :].float()
    return [Sampled(t, lp, reason) for t, lp, reason in zip(tokens, logprobs, reasons, strict=True)]


@torch.no_grad()
def prompt_logprobs(model: Any, prompt: list[int]) -> list[float]:
    """Log-probability of each prompt token given the ones before it; NaN at position 0 (Tinker's layout)."""
    logits = model(input_ids=torch.tensor([prompt])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
    return [float("nan"), *lp.tolist()]


__all__ = ["Row", "StopRule", "derive_seed", "prompt_logprobs", "sample_rows"]
