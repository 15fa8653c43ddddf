"""The loss functions a Tinker training client names, as plain torch functions of one datum.

Each takes ``lp`` (the model's log-probability of every target token, float32, shape ``[N]``, with gradient), the
datum's ``loss_fn_inputs`` as tensors and the loss config, and returns the datum's loss: a plain **sum** over its
tokens (Tinker does not normalise by length or batch; the gradients of several datums and ``forward_backward`` calls
add up until ``optim_step``). Formulas (Tinker's loss docs; ``cispo`` as SkyRL implements it)::

    cross_entropy        L = -sum(w * lp)                                   inputs: target_tokens, weights
    importance_sampling  L = -sum(exp(lp - lq) * A)                         inputs: target_tokens, logprobs, advantages
    ppo                  L = -sum(min(r * A, clip(r, lo, hi) * A))           r = exp(lp - lq)
    cispo                L = -sum(stopgrad(clip(r, lo, hi)) * lp * A)

``lq`` is the sampler's log-probability of the token (``logprobs``), ``A`` the advantage; ``lo`` / ``hi`` come from
``clip_low_threshold`` / ``clip_high_threshold`` (defaults 0.8 / 1.2). Any other loss name is refused with a message
(the local backend answers it as a failed request, never a server error).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

CLIP_LOW = 0.8
CLIP_HIGH = 1.2


class UnsupportedLoss(ValueError):
    """A loss the local backend does not implement, or inputs it lacks."""


def _need(inputs: Mapping[str, torch.Tensor], *names: str) -> list[torch.Tensor]:
    missing = [n for n in names if n not in inputs]
    if missing:
        raise UnsupportedLoss(f"loss_fn_inputs lacks {missing}; it has {sorted(inputs)}")
    return [inputs[n].to(torch.float32) for n in names]


def cross_entropy(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> torch.Tensor:
    (weights,) = _need(inputs, "weights")
    return -(weights * lp).sum()


def importance_sampling(
    lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> torch.Tensor:
    lq, adv = _need(inputs, "logprobs", "advantages")
    return -(torch.exp(lp - lq) * adv).sum()


def ppo(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> torch.Tensor:
    lq, adv = _need(inputs, "logprobs", "advantages")
    ratio = torch.exp(lp - lq)
    lo, hi = float(config.get("clip_low_threshold", CLIP_LOW)), float(config.get("clip_high_threshold", CLIP_HIGH))
    return -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv).sum()


def cispo(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> torch.Tensor:
    lq, adv = _need(inputs, "logprobs", "advantages")
    lo, hi = float(config.get("clip_low_threshold", CLIP_LOW)), float(config.get("clip_high_threshold", CLIP_HIGH))
    ratio = torch.exp(lp - lq).clamp(lo, hi).detach()
    return -(ratio * lp * adv).sum()


LOSSES: dict[str, Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, Any]], torch.Tensor]] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
}


def loss_function(name: str) -> Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, Any]], torch.Tensor]:
    """The loss called ``name``, or :class:`UnsupportedLoss` naming the ones there are."""
    try:
        return LOSSES[name]
    except KeyError:
        hint = (
            " (the cookbook's math_rl CLI defaults to it: pass loss_fn=importance_sampling)"
            if name == "stable_reinforce"
            else ""
        )
        raise UnsupportedLoss(
            f"the local Tinker backend does not implement loss_fn={name!r}{hint}; it has {sorted(LOSSES)}"
        ) from None


__all__ = ["CLIP_HIGH", "CLIP_LOW", "LOSSES", "UnsupportedLoss", "loss_function"]
