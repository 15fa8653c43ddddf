"""Best-of wall-clock timing shared by the benchmark scripts (``_``-prefixed: ``run_all.py`` does not run it).

Scripts run as ``python benchmarks/<script>.py``, so this folder is on ``sys.path``: ``from _timing import best_ms``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any


def best_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Fastest of ``repeats`` calls of ``fn``, in seconds (the least disturbed run on a shared machine)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()  # a run is not charged for collecting the garbage of the runs before it
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    """:func:`best_seconds` in milliseconds."""
    return best_seconds(fn, repeats) * 1000
