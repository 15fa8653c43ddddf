"""Think-markup verdicts as numbers: the verdict kinds and anomaly codes as bitmasks (per-row features, dumps)."""

from __future__ import annotations

from typing import Any

from rl_guards.core.think_markup import ALL_CODES

KINDS = ("answer", "thinking", "anomalous")  # MarkupVerdict.kind, as the ``kind`` feature's values


def code_bits(codes: Any) -> int:
    """Bitmask of anomaly codes (bit ``i`` = ``ALL_CODES[i]``)."""
    return sum(1 << ALL_CODES.index(c) for c in set(codes))


def codes_of(bits: int) -> list[str]:
    """The anomaly codes of a bitmask, in ``ALL_CODES`` order."""
    return [c for i, c in enumerate(ALL_CODES) if bits >> i & 1]


__all__ = ["KINDS", "code_bits", "codes_of"]
