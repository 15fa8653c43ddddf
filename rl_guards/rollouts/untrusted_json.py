"""JSON a run wrote, read back as untrusted input: every way a file or a line can fail is one error that says why.

A run folder can hold anything: a file cut by a kill, a 0-byte file from a full disk, bytes that are no UTF-8, a
document nested deeper than Python's parser recurses (``[[[[...``), JSON of the wrong shape. Readers call
:func:`read_json` / :func:`parse_json` and catch :class:`UnreadableJSON` alone, then check the shape of what they
got; the file is named and skipped, never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class UnreadableJSON(ValueError):
    """A file or line that holds no JSON a reader can use; the message says why."""


def parse_json(raw: str | bytes) -> Any:
    """``json.loads(raw)``, or :class:`UnreadableJSON` (not JSON, not UTF-8, nested too deeply)."""
    try:
        return json.loads(raw)
    except RecursionError:  # json's C parser recurses per nesting level
        raise UnreadableJSON("nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer beyond Python's digit limit
        raise UnreadableJSON(f"not JSON: {str(exc)[:160]}") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in ``path``, or :class:`UnreadableJSON` (cannot be read, empty, or :func:`parse_json`)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UnreadableJSON(f"cannot be read: {type(exc).__name__}: {exc.strerror or exc}") from None
    if not raw.strip():
        raise UnreadableJSON("empty file" if not raw else "only whitespace")
    return parse_json(raw)


__all__ = ["UnreadableJSON", "parse_json", "read_json"]
