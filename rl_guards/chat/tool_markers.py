"""The tool-result markers a chat template renders around a tool turn (for the GRPO mask check's tool rule)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("rl_guards")


def tool_result_markers(
    tokenizer: Any, chat_template: str | None = None, chat_template_kwargs: Mapping[str, Any] | None = None
) -> tuple[list[int], list[int]] | None:
    """The token ids a chat template puts before and after a tool result in a completion, or None.

    Rendered the way TRL builds the tool suffix (``GRPOTrainer._get_tool_suffix_ids``), with two different probe
    results: the common head and tail of the two suffixes, without whitespace-only tokens at the content side
    (a result starting or ending with whitespace may merge with them).
    """
    kwargs = dict(chat_template_kwargs or {})
    call = [{"type": "function", "function": {"name": "probe_tool", "arguments": {}}}]
    base = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": "", "tool_calls": call}]
    eos_id = getattr(tokenizer, "eos_token_id", None)

    def suffix(content: str) -> list[int]:
        def render(messages: list[dict[str, Any]], gen: bool) -> list[int]:
            out = tokenizer.apply_chat_template(
                messages, add_generation_prompt=gen, tokenize=True, chat_template=chat_template, **kwargs
            )
            out = out["input_ids"] if isinstance(out, Mapping) else out
            return [int(t) for t in out]

        prefix = render(base, False)
        full = render([*base, {"role": "tool", "name": "probe_tool", "content": content}], True)
        cut = max((i for i, t in enumerate(prefix) if t == eos_id), default=None)
        if cut is not None:
            prefix = prefix[: cut + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("the tool turn does not extend the conversation it follows")
        return full[len(prefix) :]

    try:
        a, b = suffix("alpha 17"), suffix('{"x": 42}')
    except Exception as exc:  # templates without tool support, processors, ...
        logger.debug("rl_guards: no tool-result markers from the chat template (%s)", exc)
        return None
    head = []
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        head.append(x)
    tail: list[int] = []
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y or len(tail) >= min(len(a), len(b)) - len(head):
            break
        tail.insert(0, x)

    def blank(token: int) -> bool:
        return tokenizer.decode([token]).strip() == ""

    while head and blank(head[-1]):
        head.pop()
    while tail and blank(tail[0]):
        tail.pop(0)
    return head, tail


__all__ = ["tool_result_markers"]
