"""Plain-text views of rollouts: whitespace made visible, one header line per rollout (two columns side by side:
:func:`rl_guards.console.two_columns`)."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

NEWLINE_MARK = "↵"
TAB_MARK = "⇥"
CR_MARK = "␍"
SPACE_MARK = "·"
# Characters that print as nothing (or as a plain space) yet change what the model and the reward saw.
INVISIBLE = {
    "\u00a0": "NBSP",
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u2060": "WJ",
    "\ufeff": "BOM",
    "\u000b": "VT",
    "\u000c": "FF",
}


CONTROL_NAMES = {"\x00": "NUL", "\x07": "BEL", "\x08": "BS", "\x1b": "ESC", "\x7f": "DEL"}


def control_mark(char: str) -> str | None:
    """How a character a terminal would act on (a control or format character) is shown, or None for others.

    Text from a model or a dataset can hold ESC / OSC sequences, NUL, bidi overrides: printed raw they move the
    cursor, change colours or titles, hide text. They are shown as ``⟨ESC⟩``, ``⟨U+202E⟩``... instead.
    """
    if char in INVISIBLE:
        return f"⟨{INVISIBLE[char]}⟩"
    if unicodedata.category(char) in ("Cc", "Cf", "Cs"):
        return f"⟨{CONTROL_NAMES.get(char, f'U+{ord(char):04X}')}⟩"
    return None


def printable(value: Any) -> str:
    """One line of text safe to print: every control character (line breaks included) shown as a mark."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(NEWLINE_MARK if char == "\n" else _mark(char) or char for char in text)


def _mark(char: str) -> str | None:
    """The mark of a tab, a carriage return or a control character; None for a character shown as it is."""
    if char == "\t":
        return TAB_MARK
    if char == "\r":
        return CR_MARK
    return control_mark(char)


def visible_whitespace(text: str) -> str:
    """``text`` with line breaks shown as ``↵`` (the break is kept), tabs as ``⇥``, carriage returns as ``␍``,
    invisible characters as ``⟨NAME⟩``, and every space as ``·`` except a single space between two visible
    characters; other control and format characters as ``⟨ESC⟩``, ``⟨U+202E⟩``... (:func:`control_mark`), so
    nothing a model wrote can drive the terminal. Special tokens stay as their text (``<|im_end|>``)."""
    out_lines = []
    for line in text.split("\n"):
        chars = list(line)
        shown = []
        for i, char in enumerate(chars):
            if char == " ":
                prev = chars[i - 1] if i > 0 else ""
                nxt = chars[i + 1] if i + 1 < len(chars) else ""
                plain = bool(prev) and bool(nxt) and not prev.isspace() and not nxt.isspace()
                shown.append(" " if plain else SPACE_MARK)
            else:
                shown.append(_mark(char) or char)
        out_lines.append("".join(shown))
    return (NEWLINE_MARK + "\n").join(out_lines)


def fmt_number(value: float | None, signed: bool = False) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return "—" if value is None or isinstance(value, float) else printable(value)
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def flags(row: dict[str, Any]) -> list[str]:
    """Short flags of a rollout: TRUNCATED, the think verdict and its anomalies."""
    out = []
    if row.get("truncated"):
        out.append("TRUNCATED")
    if row.get("think_kind"):
        out.append(f"think={row['think_kind']}")
    anomalies = row.get("think_anomalies") or []
    if anomalies:
        out.append("anomalies=" + ",".join(anomalies))
    if row.get("thinking") is not None:
        out.append(f"thinking={'on' if row['thinking'] else 'off'}")
    return out


def header_line(row: dict[str, Any]) -> str:
    """``step 20 | arith | group 3 row 12 | reward 1.000 (f=1.000) | adv +0.870 | TRUNCATED ...``."""
    rewards = row.get("rewards") or {}
    parts = ", ".join(f"{printable(k)}={fmt_number(v)}" for k, v in rewards.items())
    fields = [
        f"step {printable(row.get('step'))}",
        printable(row.get("task")),
        f"group {row.get('group')} row {row.get('row')}",
        f"reward {fmt_number(row.get('reward'))}" + (f" ({parts})" if parts else ""),
        f"adv {fmt_number(row.get('advantage'), signed=True)}",
        f"{row.get('completion_tokens')} tokens",
        *flags(row),
    ]
    return " | ".join(fields)


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters, with ``…`` when cut."""
    return text if len(text) <= chars else "…" + text[-chars:]


def format_rollout(row: dict[str, Any], prompt_chars: int = 300) -> str:
    """Header, prompt tail and the full completion, whitespace visible."""
    rule = "─" * 8
    lines = [
        f"{rule} {header_line(row)}",
        "prompt (tail):",
        _indent(visible_whitespace(tail(row.get("prompt") or "", prompt_chars))),
        "completion:",
        _indent(visible_whitespace(row.get("completion") or "")),
    ]
    if row.get("truncated"):
        lines.append("  [cut at max_completion_length: no end-of-turn token]")
    return "\n".join(lines)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.split("\n"))
