"""The text of one TRL completion, whatever shape the trainer hands it in (pure)."""

from __future__ import annotations

from typing import Any

from rl_guards.core.think_markup import THINK, ThinkMarkup


def completion_text(completion: Any, markup: ThinkMarkup = THINK, *, prompt_opened: bool = False) -> str:
    """The text of a TRL completion: a string, or a list of messages.

    When TRL's response parser moved the thinking into ``reasoning_content`` (or ``reasoning``), the block is put
    back around it, so the scanner sees what the model generated.
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, list | tuple):
        return "" if completion is None else str(completion)
    parts: list[str] = []
    for message in completion:
        if not isinstance(message, dict):
            parts.append(str(message))
            continue
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        content = "" if content is None else str(content)
        if isinstance(reasoning, str) and reasoning and markup.close_tag not in content:
            opening = "" if prompt_opened and not parts else markup.open_tag
            content = f"{opening}{reasoning}{markup.close_tag}{content}"
        parts.append(content)
    return "".join(parts)
