"""The one :class:`~rl_guards.guards.base.RunContext` builder for a tinker-cookbook run."""

from __future__ import annotations

from typing import Any

from rl_guards.chat.renderer_check import renderer_thinking
from rl_guards.guards.base import RunContext


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


__all__ = ["build_context"]
