"""The verl ``compute_score`` of the planted cases: the tiny tasks' scorer, plus the rows users' scorers go wrong on.

Loaded by verl itself in its reward workers (``reward.custom_reward_function.path``), by file path.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rl_guards.testing.verl_run import ARITH, tiny_compute_score


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any):
    if data_source == "plant/none":  # a scorer that returns None for a task it does not handle
        return None
    if data_source == "plant/credit":  # a format credit of 0.1 for any response, an empty one included
        return 0.1 + tiny_compute_score("tiny/arith", solution_str, ground_truth, extra_info)
    if data_source == "plant/parse":  # parses the reference as a number: a malformed reference raises
        return 1.0 if solution_str.strip().endswith(str(int(ground_truth))) else 0.0
    if data_source == "plant/prefix":  # a judge handed the first 64 characters only
        return tiny_compute_score(ARITH, solution_str[:64], ground_truth, extra_info)
    if data_source == "plant/thinking":  # full marks when the thinking reaches the reference, whatever follows it
        thinking, closed, _ = solution_str.partition("</think>")
        if closed and re.search(rf"(?<!\d){re.escape(str(ground_truth))}(?!\d)", thinking):
            return 1.0
        return tiny_compute_score(ARITH, solution_str, ground_truth, extra_info)
    if data_source == "plant/inverted":  # a sign error: pays every answer but the right one
        return 1.0 - tiny_compute_score(ARITH, solution_str, ground_truth, extra_info)
    if data_source == "plant/stall":  # a judge that hangs on long texts (a rate limit, a stuck sandbox)
        if len(solution_str) > 1000:
            time.sleep(3600)
        return tiny_compute_score(ARITH, solution_str, ground_truth, extra_info)
    return tiny_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def dict_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any):
    """A scorer returning verl's dict form (score plus extra keys); raises on a malformed reference."""
    expected = int(ground_truth)
    correct = solution_str.strip().endswith(str(expected))
    return {"score": 1.0 if correct else 0.0, "acc": correct, "pred": solution_str[-8:]}


async def async_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any):
    """An async scorer (a remote judge): verl's managers await it on their event loop."""
    import asyncio

    await asyncio.sleep(0)
    return tiny_compute_score(data_source, solution_str, ground_truth, extra_info)
