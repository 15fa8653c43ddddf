"""What a probe round may cost: the reward probes' time estimates, from each function's calls timed on the run.

The guard (:mod:`rl_guards.guards.probes`) keeps its clock (the seconds it spent, the run's elapsed seconds); this
module turns the timers of ``ctx.checked_calls`` into the seconds a round, a row and a pass are expected to take, and
times one single-text call where the run's own calls leave a function's cost per call unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rl_guards.core.batch import RolloutBatch
from rl_guards.guards import probe_views

LATER_ROWS = 4  # rows per task of a probe after the first (a verdict needs 3 of them, from 2 groups)
TEXTS_PER_ROW = 120  # texts a function scores per probed row (both passes), for the cost estimate
SPARE = 1.5  # estimates are taken this much above the calls timed (texts per pass vary, a loaded machine is slower)
PREP = 0.003  # seconds to build a row's variants, until measured
PASSES = 3  # calls a function gets in a probe (two passes, then a narrowing or a stability check), for the estimate


def pass_cost(calls: Any, pending: Sequence[Any]) -> float:
    """Expected seconds of a pass: one merged call per function over its texts, each ``alone`` call its own."""
    merged: dict[int, int] = {}
    cost = 0.0
    for call in pending:
        if call.alone:
            cost += calls.expected(call.fn, len(call.texts))
        else:
            merged[call.fn] = merged.get(call.fn, 0) + len(call.texts)
    return cost + sum(calls.expected(fn, n) for fn, n in merged.items())


def round_cost(calls: Any, functions: Sequence[tuple[int, str]], row_cost: float, prep: float) -> tuple[float, float]:
    """(seconds, seconds a row) a round is expected to cost: the last whole round's cost a row (``row_cost``) once
    there was one; before, a few calls per function (its passes) and each row's texts in them, with room to spare."""
    if row_cost:
        return 0.0, row_cost
    fixed = sum(PASSES * calls.per_call(i)[0] for i, _ in functions)
    per_row = sum(TEXTS_PER_ROW * calls.per_call(i)[1] for i, _ in functions) + (prep or PREP)
    return SPARE * fixed, SPARE * per_row


def calibrate(calls: Any, batch: RolloutBatch, held: list[int], functions: Sequence[tuple[int, str]],
              room: Callable[[], float]) -> None:  # fmt: skip
    """Time one call of a single text for each function timed at one call size only (the run's batches): what a
    call costs apart from its texts (a judge's round trip) decides how many rows a probe can take. Only when the
    budget (``room()`` seconds left) has room for such a call; it is a probe call like any other (bounded, timed)."""
    for index, _ in functions:
        timer = calls.timer(index)
        seen = timer.samples[-1][0] if timer.samples else 1
        if timer.sizes_seen != 1 or calls.expected(index, seen) > room():
            continue  # a single text may cost as much as the run's calls: only when that fits
        rows = probe_views.call_rows(batch, held[:1], None)
        try:
            calls(index, [rows[held[0]]], [probe_views.prompt_text(batch.completions[held[0]]) or " "])
        except Exception:  # a function that cannot score it: the probe itself will say
            continue


def rows_to_probe(batch: RolloutBatch, held: list[int], limit: int) -> list[int]:
    """Up to ``limit`` held rows of each task, taken in turn from its groups (those whose totals vary first; in each
    group the best rows first): several rows from several groups for the quorum."""
    totals = batch.weighted_totals
    by_task: dict[str, dict[int, list[int]]] = {}
    for row in held:
        by_task.setdefault(str(batch.tasks[row]), {}).setdefault(batch.group_of(row), []).append(row)
    chosen: list[int] = []
    for _, groups in sorted(by_task.items()):
        ordered = sorted((sorted(g, key=lambda r: (-totals[r], r)) for g in groups.values()),
                         key=lambda g: (-float(np.ptp(totals[g])), g[0]))  # fmt: skip
        order = [g[d] for d in range(max(len(g) for g in ordered)) for g in ordered if d < len(g)]
        chosen += order[:limit]
    return sorted(chosen)


def timed_seconds(action: Callable[[], Any]) -> float:
    """Seconds ``action()`` took."""
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


__all__ = ["LATER_ROWS", "PASSES", "PREP", "SPARE", "TEXTS_PER_ROW", "calibrate", "pass_cost", "round_cost",
           "rows_to_probe", "timed_seconds"]  # fmt: skip
