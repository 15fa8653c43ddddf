"""How strong a count is as evidence (pure): a share's lower confidence bound, a binomial tail.

The guards that judge a share from few rows (a task's truncated completions, a look-alike column's agreement with
the prompts) decide from these rather than from a fixed row count: overwhelming evidence is reported at once, weak
evidence waits for more rows.
"""

from __future__ import annotations

import math


def share_lower_bound(hits: int, total: int, z: float = 1.96) -> float:
    """Wilson lower confidence bound of a share (``hits`` of ``total``; 95 % one-sided at z=1.645, two at 1.96)."""
    if total <= 0:
        return 0.0
    p = hits / total
    denom = 1 + z * z / total
    centre = p + z * z / (2 * total)
    spread = z * ((p * (1 - p) + z * z / (4 * total)) / total) ** 0.5
    return max(0.0, (centre - spread) / denom)


def binomial_tail(hits: int, total: int, rate: float) -> float:
    """``P(X >= hits)`` for ``X ~ Binomial(total, rate)``: how likely this many hits are when each has ``rate``."""
    if hits <= 0:
        return 1.0
    if hits > total or rate <= 0.0:
        return 0.0
    if rate >= 1.0:
        return 1.0
    return min(1.0, sum(math.comb(total, k) * rate**k * (1 - rate) ** (total - k) for k in range(hits, total + 1)))


__all__ = ["binomial_tail", "share_lower_bound"]
