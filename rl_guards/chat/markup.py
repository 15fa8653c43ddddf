"""The run's think markup with its tokenizer: the tags of the config or the template, and their token ids."""

from __future__ import annotations

from typing import Any

from rl_guards.config import ThinkTagsConfig
from rl_guards.core.think_markup import THINK, ThinkMarkup, markup_for_template


def tag_token_ids(tokenizer: Any, markup: ThinkMarkup) -> tuple[int | None, int | None]:
    """``(open_id, close_id)`` when each tag is exactly one token of ``tokenizer``, else ``(None, None)``."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap the tokenizer
    if tok is None or not hasattr(tok, "encode"):
        return None, None
    ids: list[int | None] = []
    for tag in (markup.open_tag, markup.close_tag):
        try:
            encoded = list(tok.encode(tag, add_special_tokens=False))
        except Exception:
            encoded = []
        ids.append(int(encoded[0]) if len(encoded) == 1 else None)
    if ids[0] is None or ids[1] is None or ids[0] == ids[1]:
        return None, None
    return ids[0], ids[1]


def tags_are_special(tokenizer: Any, markup: ThinkMarkup) -> bool:
    """True when ``skip_special_tokens`` decoding (TRL's completions) removes the tags from the text."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    try:
        special = set(getattr(tok, "all_special_tokens", None) or ())
    except Exception:
        return False
    return any(token and token in tag for token in special for tag in (markup.open_tag, markup.close_tag))


def markup_from_config(config: ThinkTagsConfig, chat_template: str | None) -> ThinkMarkup:
    """The config's tags; with the default ``<think>``/``</think>``, the family guessed from the template."""
    if (config.open_tag, config.close_tag) == (THINK.open_tag, THINK.close_tag):
        return markup_for_template(chat_template)
    return ThinkMarkup(open_tag=config.open_tag, close_tag=config.close_tag, name="custom")


__all__ = ["markup_from_config", "tag_token_ids", "tags_are_special"]
