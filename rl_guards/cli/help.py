"""Module docstrings as ``--help`` text: the reStructuredText markup a reader of the source sees (````code````,
``:mod:`x```, ``::`` before an example) taken out, the line breaks kept."""

from __future__ import annotations

import re

_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :class:`~rl_guards.x.Y` -> rl_guards.x.Y


def plain(doc: str | None) -> str:
    """``doc`` without its reStructuredText markup (roles, double backquotes, the ``::`` of a literal block)."""
    text = _ROLE.sub(lambda m: m.group(1).split(".")[-1] if m.group(0).count("~") else m.group(1), doc or "")
    text = text.replace("``", "")
    text = re.sub(r"(?m)^[ \t]*::[ \t]*\n", "", text)  # a literal block's "::" on a line of its own: dropped
    text = re.sub(r"(?m)::$", ":", text)  # "Example::" -> "Example:"
    return text.strip() + "\n"


__all__ = ["plain"]
