"""What rl_guards said, for tests: every warning and blocking finding is one message on the ``rl_guards`` logger
(never a Python warning as well), so a test checks the logger, as ``pytest.warns`` checks warnings::

    from rl_guards.testing.logs import shows

    with shows("longer than 10") as said:   # fails unless a message at warning level or above matches
        guard.on_batch(batch, report)
    assert len(said.messages) == 1           # said once
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from rl_guards.console import Said, capture


@contextmanager
def shows(match: str | None = "", *, level: int = logging.WARNING) -> Iterator[Said]:
    """What the ``rl_guards`` logger says at ``level`` or above inside the block; unless ``match`` is None, the block
    fails when no message matches it (``re.search``; the default ``""``: when nothing was said)."""
    with capture(level) as said:
        yield said
    if match is not None and not any(re.search(match, m) for m in said.messages):
        shown = "\n".join(f"  {m[:300]}" for m in said.messages) or "  (nothing)"
        raise AssertionError(
            f"rl_guards said nothing matching {match!r} at {logging.getLevelName(level)} or above; it said:\n{shown}"
        )


__all__ = ["Said", "shows"]
