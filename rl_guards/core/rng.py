"""Run extra work (a probe generation, a reward call made to check a function) without moving the run's random state.

::

    with forked_rng():
        probe_generate(rows)       # samples from torch's generators; the run's next draw is as if it never ran

Saved and restored: Python's ``random``, NumPy's global generator, torch's CPU generator and, when CUDA is
initialised, every CUDA device's generator. Only libraries already imported are touched (a library that is not
loaded has drawn nothing), so importing this module loads neither NumPy nor torch.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["forked_rng"]


def _save() -> list[tuple[Any, Any]]:
    """(restore function, state) for every generator in use."""
    saved: list[tuple[Any, Any]] = [(random.setstate, random.getstate())]
    np = sys.modules.get("numpy")
    if np is not None:
        saved.append((np.random.set_state, np.random.get_state()))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        saved.append((torch.set_rng_state, torch.get_rng_state()))
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            saved.append((cuda.set_rng_state_all, cuda.get_rng_state_all()))
    return saved


@contextmanager
def forked_rng() -> Iterator[None]:
    """Everything inside draws from the current random state; on the way out (also on an exception) it is put back."""
    saved = _save()
    try:
        yield
    finally:
        for restore, state in saved:
            restore(state)
