"""The one :class:`~rl_guards.guards.base.RunContext` builder for a tinker-cookbook run, and its reward columns as
checks call them.

The run's reward columns (:mod:`rl_guards.tinker.rows`) are ``env`` (the steps' rewards), ``group``, the stray-think
penalty when on, then the envs' numeric step metrics (weight 0). Only ``env`` is callable outside the loop: through
each row's own env (:class:`rl_guards.reward_calls.tinker.TinkerCaller`, ``ctx.checked_calls`` caller 0); the group
reward needs the whole group and the builder, the penalty is rl_guards' own, the metrics are not rewards, so their
callers are None (the reward probes leave them out and count them in the total as the batch paid them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rl_guards.chat.renderer_check import renderer_thinking
from rl_guards.guards.base import RunContext
from rl_guards.rewards.checked_calls import CheckedCalls
from rl_guards.tinker.rows import ENV_REWARD, GROUP_REWARD, PENALTY


def build_context(log_path: str, tokenizer: Any, renderer: Any, max_tokens: int) -> RunContext:
    """What a guard may know about the run: its folder, tokenizer, renderer and thinking mode, EOS ids."""
    stops: list[int] = []
    try:
        stops = [int(s) for s in renderer.get_stop_sequences() if isinstance(s, int)]
    except Exception:  # string stops (role_colon): no stop ids
        stops = []
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None and int(eos) not in stops:
        stops.append(int(eos))

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    def decode_text(ids: list[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=True)

    thinking = renderer_thinking(renderer) if renderer is not None else True
    return RunContext(
        output_dir=str(log_path),
        tokenizer=tokenizer,
        chat_template_kwargs={"enable_thinking": thinking},
        eos_token_ids=stops,
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
        decode=decode,
        decode_text=decode_text,
        renderer=renderer,
        length_cap_name="max_tokens",
    )


def set_reward_columns(ctx: RunContext, *, penalty: bool, call_timeout: float) -> None:
    """The columns every batch starts with (``env``, ``group``, the penalty), ``env`` callable (see the module doc);
    :func:`follow_columns` adds the metric columns as batches show them."""
    from rl_guards.reward_calls.tinker import TinkerCaller

    caller = TinkerCaller(ENV_REWARD)
    names = [ENV_REWARD, GROUP_REWARD] + ([PENALTY] if penalty else [])
    ctx.reward_func_names = names
    ctx.reward_funcs = [caller] + [None] * (len(names) - 1)
    ctx.checked_calls = CheckedCalls([caller] + [None] * (len(names) - 1), cap=call_timeout)


def follow_columns(ctx: RunContext, names: Sequence[str]) -> bool:
    """Name the context's columns after a batch's (one reward function per column, as the guards index them);
    True when the batch has more columns than any before (guards sized by the column count must be set up again)."""
    known = ctx.reward_func_names
    grown = len(names) > len(known)
    for i, name in enumerate(names):
        if i < len(known):
            known[i] = name
        else:
            known.append(name)
            ctx.reward_funcs.append(None)
            if ctx.checked_calls is not None:
                ctx.checked_calls.callers.append(None)
    return grown


__all__ = ["build_context", "follow_columns", "set_reward_columns"]
