"""Completion length distribution and the ``max_completion_length`` it calls for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

HEADROOM = 1.25  # recommended cap = p99 x HEADROOM, rounded up
ROUND_TO = 64  # ... to a multiple of this
CENSORED_SHARE = 0.01  # more than this share of samples at the cap censors p99: the recommendation is a lower bound


def percentile(sorted_values: Sequence[int], q: float) -> int:
    """Nearest-rank percentile (``q`` in [0, 100]) of an ascending sequence: a value that was observed."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return int(sorted_values[min(rank, len(sorted_values)) - 1])


def round_up(value: float, multiple: int = ROUND_TO) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value`` (at least ``multiple``)."""
    return max(multiple, math.ceil(value / multiple) * multiple)


@dataclass(frozen=True)
class LengthSummary:
    """Lengths of sampled completions (tokens, EOS included) generated with a cap of ``cap`` new tokens."""

    count: int
    cap: int
    p50: int
    p90: int
    p99: int
    max: int
    mean: float
    hit_cap: int  # completions that reached the cap without EOS
    recommended: int  # suggested max_completion_length
    lower_bound: bool  # True when the cap censored the tail: the recommendation is a minimum, not an estimate

    @property
    def hit_cap_share(self) -> float:
        return self.hit_cap / self.count if self.count else 0.0

    def text(self) -> str:
        lines = [
            f"completion lengths over {self.count} samples (tokens, cap {self.cap}): p50 {self.p50}, p90 {self.p90}, "
            f"p99 {self.p99}, max {self.max}, mean {self.mean:.1f}",
            f"hit the cap: {self.hit_cap}/{self.count} ({self.hit_cap_share:.1%})",
        ]
        if self.lower_bound:
            lines.append(
                f"the cap was hit by more than 1% of samples, so the true p99 is unknown (above {self.cap}): "
                f"max_completion_length should be at least {self.recommended}; rerun with --max-new-tokens "
                f"{self.recommended} or more to measure the tail."
            )
        else:
            note = (
                f" ({self.hit_cap} sample(s) still hit the cap: the longest lengths are unknown)"
                if self.hit_cap
                else ""
            )
            lines.append(
                f"recommended max_completion_length: {self.recommended} (p99 x {HEADROOM:g}, rounded up to a "
                f"multiple of {ROUND_TO}){note}"
            )
        return "\n".join(lines)


def summarize_lengths(lengths: Sequence[int], hit_cap: Sequence[bool], cap: int) -> LengthSummary:
    """Percentiles, cap hits and the recommended ``max_completion_length``.

    The recommendation is p99 x 1.25 rounded up to a multiple of 64. When more than 1% of samples hit the cap,
    p99 is censored: the recommendation becomes twice the cap (rounded) and is flagged as a lower bound.
    """
    if len(lengths) != len(hit_cap):
        raise ValueError(f"{len(lengths)} lengths but {len(hit_cap)} hit_cap flags")
    if not lengths:
        raise ValueError("no completion lengths to summarise")
    ordered = sorted(int(n) for n in lengths)
    hits = sum(bool(h) for h in hit_cap)
    p99 = percentile(ordered, 99)
    censored = hits / len(ordered) > CENSORED_SHARE
    recommended = round_up(2 * cap) if censored else round_up(p99 * HEADROOM)
    return LengthSummary(
        count=len(ordered),
        cap=cap,
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        p99=p99,
        max=ordered[-1],
        mean=sum(ordered) / len(ordered),
        hit_cap=hits,
        recommended=recommended,
        lower_bound=censored,
    )
