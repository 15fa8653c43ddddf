"""Behaviour statistics of completions, and how they moved between two checkpoints (pure).

Per completion (:func:`row_stats`): token length, terminated (ended with EOS), repetition (share of its 4-grams of
token ids that repeat an earlier one), thinking length and whether it has a think block, think-markup anomaly, empty
final answer (special tokens are not answer text), answer length, share of non-ASCII characters. Per group of one
prompt: distinct-2 across its completions (distinct token bigrams / all bigrams). Per task (:func:`summarise`): the
means of those, the length's spread, and each reward function's mean over its finite scores (an infinite score is
left out and counted, so the statistics stay finite numbers a JSON record can hold).

:func:`compare` reads a task's statistics at the baseline and now against thresholds; what moved beyond them is a
:class:`Drift` with both values, the behaviour half of a drift alarm (the guard adds the reward half: reward went up).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rl_guards.core.think_markup import ThinkMarkup, scan

REPEAT_N = 4  # n-gram size of the repetition statistic
DISTINCT_N = 2  # n-gram size of distinct-n across a group


def repetition(ids: Sequence[int], n: int = REPEAT_N) -> float:
    """Share of the n-grams of ``ids`` that repeat an earlier n-gram of the same completion (0 when too short)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def distinct_n(group: Sequence[Sequence[int]], n: int = DISTINCT_N) -> float:
    """Distinct n-grams over all n-grams of a group's completions (1.0 when every n-gram differs)."""
    grams = [tuple(ids[i : i + n]) for ids in group for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def without_tokens(text: str, tokens: Sequence[str]) -> str:
    """``text`` with every occurrence of ``tokens`` removed (the longest first, so none is cut by a shorter one)."""
    for token in sorted((t for t in tokens if t and t in text), key=len, reverse=True):
        text = text.replace(token, "")
    return text


@dataclass
class RowStats:
    """One completion's behaviour numbers."""

    length: float
    terminated: float
    repetition: float
    thinking_chars: float
    has_block: float
    anomalous: float
    empty_answer: float
    answer_chars: float
    non_ascii: float

    def as_list(self) -> list[float]:
        return [float(v) for v in asdict(self).values()]


ROW_FIELDS: tuple[str, ...] = tuple(RowStats.__dataclass_fields__)


def row_stats(
    text: str,
    ids: Sequence[int],
    *,
    terminated: bool,
    markup: ThinkMarkup,
    prompt_opened: bool = False,
    text_for_scan: str | None = None,
    special_tokens: Sequence[str] = (),
) -> RowStats:
    """The numbers of one completion (``text`` decoded with special tokens kept; ``ids`` its token ids).

    ``special_tokens``: the tokenizer's special tokens (EOS, end of turn, padding), which are not answer text: an
    answer that is only those (``</think><|im_end|>``, whitespace then EOS) is empty.
    """
    verdict = scan(text_for_scan if text_for_scan is not None else text, markup, prompt_opened=prompt_opened)
    non_ascii = sum(1 for c in text if ord(c) > 127) / len(text) if text else 0.0
    answer = without_tokens(verdict.answer, special_tokens).strip()
    return RowStats(
        length=float(len(ids)),
        terminated=float(terminated),
        repetition=repetition(ids),
        thinking_chars=float(len(verdict.thinking)),
        has_block=float(verdict.kind == "thinking" or bool(verdict.thinking)),
        anomalous=float(verdict.is_anomalous),
        empty_answer=float(not answer),
        answer_chars=float(len(answer)),
        non_ascii=non_ascii,
    )


@dataclass
class BehaviourStats:
    """One task's behaviour on the probe prompts at one checkpoint."""

    completions: int = 0
    length: float = 0.0
    length_std: float = 0.0
    terminated: float = 0.0
    repetition: float = 0.0
    distinct_2: float = 1.0
    thinking_chars: float = 0.0
    thinking_share: float = 0.0
    anomaly_rate: float = 0.0
    empty_answer_rate: float = 0.0
    answer_chars: float = 0.0
    non_ascii: float = 0.0
    rewards: dict[str, float] = field(default_factory=dict)  # reward function -> mean over the scored completions
    reward_total: float | None = None  # mean weighted total
    nonfinite_rewards: int = 0  # completions with an infinite score or total, left out of the reward means

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BehaviourStats:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarise(
    rows: Sequence[RowStats],
    distinct: Sequence[float],
    rewards: Sequence[Mapping[str, float | None]] = (),
    totals: Sequence[float | None] = (),
) -> BehaviourStats:
    """A task's statistics from its completions (``distinct``: distinct-2 of each prompt's group)."""
    if not rows:
        return BehaviourStats()
    lengths = [r.length for r in rows]
    mean = _mean(lengths)
    # NaN / None is an unscored completion; +-inf a score no mean can hold: left out, counted per completion
    by_func: dict[str, list[float]] = {}
    infinite = [False] * max(len(rewards), len(totals))
    for i, row in enumerate(rewards):
        for name, value in row.items():
            if value is None or math.isnan(value):
                continue
            if math.isinf(value):
                infinite[i] = True
                continue
            by_func.setdefault(name, []).append(float(value))
    scored = []
    for i, total in enumerate(totals):
        if total is None or math.isnan(total):
            continue
        if math.isinf(total):
            infinite[i] = True
            continue
        scored.append(float(total))
    return BehaviourStats(
        completions=len(rows),
        length=mean,
        length_std=math.sqrt(_mean([(v - mean) ** 2 for v in lengths])),
        terminated=_mean([r.terminated for r in rows]),
        repetition=_mean([r.repetition for r in rows]),
        distinct_2=_mean(list(distinct)) if distinct else 1.0,
        thinking_chars=_mean([r.thinking_chars for r in rows]),
        thinking_share=_mean([r.has_block for r in rows]),
        anomaly_rate=_mean([r.anomalous for r in rows]),
        empty_answer_rate=_mean([r.empty_answer for r in rows]),
        answer_chars=_mean([r.answer_chars for r in rows]),
        non_ascii=_mean([r.non_ascii for r in rows]),
        rewards={k: _mean(v) for k, v in sorted(by_func.items())},
        reward_total=_mean(scored) if scored else None,
        nonfinite_rewards=sum(infinite),
    )


@dataclass(frozen=True)
class Thresholds:
    """How far a statistic may move from the baseline before it counts as drift."""

    length_ratio: float = 2.0  # mean length x this (or / this)
    thinking_length_ratio: float = 2.0  # mean thinking length (characters) x this (or / this),
    thinking_length_floor: float = 32.0  # and by at least this many characters (a few words either way is noise)
    repetition_rise: float = 0.2  # absolute rise of the repeated 4-gram share
    distinct_drop: float = 0.3  # absolute drop of distinct-2 across a group
    thinking_share_drop: float = 0.5  # absolute drop of the share of completions with a think block
    empty_answer_rise: float = 0.3  # absolute rise of the empty-answer rate
    anomaly_rise: float = 0.3  # absolute rise of the think-markup anomaly rate
    terminated_drop: float = 0.3  # absolute drop of the share ending with EOS (more hit the length cap)
    non_ascii_rise: float = 0.2  # absolute rise of the non-ASCII share (a script change)


@dataclass(frozen=True)
class Drift:
    """One statistic of one task that moved beyond its threshold."""

    stat: str
    before: float
    after: float
    why: str

    def describe(self) -> str:
        return f"{self.stat} {self.before:.3g} -> {self.after:.3g} ({self.why})"


def compare(before: BehaviourStats, after: BehaviourStats, t: Thresholds) -> list[Drift]:
    """The statistics of ``after`` that moved beyond ``t`` from ``before`` (biggest first)."""
    out: list[tuple[float, Drift]] = []

    def rise(stat: str, limit: float, label: str) -> None:
        a, b = getattr(before, stat), getattr(after, stat)
        if b - a > limit:
            out.append(((b - a) / limit, Drift(stat, a, b, f"{label} by {b - a:+.2f}, threshold {limit:g}")))

    def drop(stat: str, limit: float, label: str) -> None:
        a, b = getattr(before, stat), getattr(after, stat)
        if a - b > limit:
            out.append(((a - b) / limit, Drift(stat, a, b, f"{label} by {b - a:+.2f}, threshold {limit:g}")))

    def ratio(stat: str, limit: float, floor: float = 0.0) -> None:
        a, b = getattr(before, stat), getattr(after, stat)
        if a > 0 and b > 0 and (b / a >= limit or b / a <= 1 / limit) and abs(b - a) >= floor:
            out.append((max(b / a, a / b) / limit, Drift(stat, a, b, f"x{b / a:.2f}, threshold x{limit:g}")))

    ratio("length", t.length_ratio)
    ratio("thinking_chars", t.thinking_length_ratio, t.thinking_length_floor)
    rise("repetition", t.repetition_rise, "repetition rose")
    drop("distinct_2", t.distinct_drop, "diversity across the group fell")
    drop("thinking_share", t.thinking_share_drop, "thinking collapsed")
    rise("empty_answer_rate", t.empty_answer_rise, "answers emptied")
    rise("anomaly_rate", t.anomaly_rise, "think markup broke")
    drop("terminated", t.terminated_drop, "fewer completions end")
    rise("non_ascii", t.non_ascii_rise, "non-ASCII text rose")
    return [d for _, d in sorted(out, key=lambda x: -x[0])]


__all__ = [
    "ROW_FIELDS",
    "BehaviourStats",
    "Drift",
    "RowStats",
    "Thresholds",
    "compare",
    "distinct_n",
    "repetition",
    "row_stats",
    "summarise",
    "without_tokens",
]
