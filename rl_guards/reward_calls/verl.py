"""verl's call of a ``compute_score``, argument for argument (verl 0.9: ``NaiveRewardManager.__call__``, the reward
loop's ``run_single``; ``BatchRewardManager.verify`` for batched scorers).

Per sample::

    extra_info = row's extra_info (or {}); extra_info["num_turns"] = None; extra_info["rollout_reward_scores"] = {}
    score = compute_score(data_source=..., solution_str=<response decoded, special tokens skipped>,
                          ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info)
    reward = score["score"] if isinstance(score, dict) else score

A batched scorer gets ``compute_score(data_sources=[...], solution_strs=[...],
ground_truths=[...], extra_infos=[...])`` and returns a list. A per-source scorer of ``verl.utils.reward_score``
(``gsm8k.compute_score(solution_str, ground_truth)``) is called as ``default_compute_score`` calls it. Every keyword
is passed, as verl passes it: a ``compute_score`` without an ``extra_info`` parameter (and no ``**kwargs``) raises in
verl and raises here. Async scorers are awaited.

A row from a verl run (its ``handle`` a :class:`rl_guards.verl.records.VerlScoreCall` whose ``extra_info`` was
recorded in the reward worker) already holds the extra_info the scorer received, verl's keys set with their values
(``num_turns`` from the agent loop, the tool fields merged): it is passed as it is, a copy each call.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, Tracked, gather, params, resolve, score_value

BATCH_PARAMS = frozenset({"data_sources", "solution_strs", "ground_truths"})


def is_routed(fn: Any) -> bool:
    """One of verl's per-source scorers (``verl.utils.reward_score.gsm8k.compute_score(solution_str, ground_truth)``):
    verl calls it through ``default_compute_score``, positionally, never with ``data_source``. (A user's function of
    that shape set as ``custom_reward_function`` gets verl's keywords, and raises on them: it is not routed.)"""
    found = params(fn)
    if any(p.kind is p.VAR_KEYWORD for p in found.values()) or "data_source" in found:
        return False
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("verl.utils.reward_score") and len(found) >= 2


def is_batched(fn: Any) -> bool:
    """A ``BatchRewardManager`` scorer (plural argument names)."""
    return BATCH_PARAMS <= set(params(fn))


def _extra(row: CallRow) -> Any:
    extra = row.columns.get("extra_info", {})
    extra = {} if extra is None and "extra_info" not in row.columns else copy.deepcopy(extra)
    return extra


def _as_received(row: CallRow) -> bool:
    """The row's extra_info is the one a run's scorer received (a verl run's record): verl's keys are already set."""
    return bool(getattr(row.handle, "extra_info_recorded", False))


class VerlCaller:
    """One ``compute_score``, called as verl's reward managers call it (see the module doc). ``data_source`` and
    ``extra_info`` come from the row's columns (``reward_fn_key`` names the source column, as in verl's config)."""

    framework = "verl"

    def __init__(self, fn: Any, *, reward_fn_key: str = "data_source") -> None:
        self.fn = fn
        self.reward_fn_key = reward_fn_key
        self.batched = is_batched(fn)
        self.routed = is_routed(fn)  # called as default_compute_score calls it: (solution_str, ground_truth)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        solutions = tracked if tracked is not None else Tracked()
        solutions.extend(texts)
        if self.batched:
            extras = []
            for row in rows:
                extra = _extra(row)
                extra["rollout_reward_scores"] = {}  # verl sets it on each row's dict (a None extra_info raises)
                extras.append(extra)
            scores = resolve(
                self.fn(
                    data_sources=[row.columns.get(self.reward_fn_key) for row in rows],
                    solution_strs=solutions,
                    ground_truths=[row.reference for row in rows],
                    extra_infos=extras,
                )
            )
            if hasattr(scores, "tolist") and not isinstance(scores, list | tuple):
                scores = scores.tolist()
            if len(scores) != len(texts):
                raise ValueError(f"returned {len(scores)} scores for {len(texts)} solutions")
            return [score_value(s, dict_key="score") for s in scores]
        if self.routed:
            return [score_value(v, dict_key="score") for v in
                    gather([self.fn(solutions[i], row.reference) for i, row in enumerate(rows)])]  # fmt: skip
        values = []
        for i, row in enumerate(rows):
            extra = _extra(row)
            if not _as_received(row):  # verl sets both on the row's extra_info (a None extra_info raises there)
                extra["num_turns"] = None
                extra["rollout_reward_scores"] = {}
            values.append(
                self.fn(
                    data_source=row.columns.get(self.reward_fn_key),
                    solution_str=solutions[i],
                    ground_truth=row.reference,
                    extra_info=extra,
                )
            )
        return [score_value(v, dict_key="score") for v in gather(values)]


__all__ = ["VerlCaller", "is_batched", "is_routed"]
