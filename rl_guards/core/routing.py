"""Task -> reward function routing, checked on a scored batch.

A route says which reward functions must score a task's rows. A function that appears in any route is
*routed*: it must return a value for its tasks' rows and ``None`` for every other row. A function in no
route is *global* and is not checked. Holes are what matters: TRL turns ``None`` into NaN, leaves it out of
that function's statistics and counts it 0 in the total, so a missed or misrouted score trains silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rl_guards.core.batch import RolloutBatch


@dataclass
class RoutingTable:
    """Which function indices serve which tasks (indices into ``RolloutBatch.reward_names``)."""

    serves: dict[int, frozenset[str]]  # routed function index -> tasks it serves
    declared_tasks: frozenset[str]  # every task named in the routes (possibly with no function)
    unknown_names: list[str] = field(default_factory=list)  # routed names that are no reward function

    def required(self, task: str) -> list[int]:
        """Function indices that must score a row of ``task``."""
        return sorted(i for i, tasks in self.serves.items() if task in tasks)

    @property
    def empty(self) -> bool:
        return not self.declared_tasks


def table_from_names(routes: dict[str, list[str]], reward_names: Sequence[str]) -> RoutingTable:
    """Routes given by reward function names (duplicate names all get the route)."""
    serves: dict[int, set[str]] = {}
    unknown: list[str] = []
    for task, names in routes.items():
        for name in names:
            indices = [i for i, n in enumerate(reward_names) if n == name]
            if not indices and name not in unknown:
                unknown.append(name)
            for i in indices:
                serves.setdefault(i, set()).add(task)
    return RoutingTable({i: frozenset(t) for i, t in serves.items()}, frozenset(routes), unknown)


def table_from_funcs(funcs: Sequence[Any]) -> RoutingTable:
    """Routes recorded on reward function wrappers (``tasks`` and ``rl_guards_routes`` attributes)."""
    serves: dict[int, frozenset[str]] = {}
    declared: set[str] = set()
    for i, fn in enumerate(funcs):
        routes = getattr(fn, "rl_guards_routes", None)
        tasks = getattr(fn, "tasks", None)
        if isinstance(routes, dict) and tasks is not None:
            declared.update(str(t) for t in routes)
            serves[i] = frozenset(str(t) for t in tasks)
    return RoutingTable(serves, frozenset(declared))


@dataclass
class RoutingReport:
    """Routing holes in one batch, counted in rows."""

    rows_per_task: Counter[str] = field(default_factory=Counter)
    unscored: Counter[tuple[str, str]] = field(default_factory=Counter)  # (task, function) -> rows it skipped
    misrouted: Counter[tuple[str, str]] = field(default_factory=Counter)  # (task, function) -> rows it scored
    all_skipped: Counter[str] = field(default_factory=Counter)  # task -> rows no function scored
    unrouted: Counter[str] = field(default_factory=Counter)  # task (absent from the routes) -> rows
    unscored_rows: int = 0  # rows missing a routed score, or scored by no function at all
    misrouted_rows: int = 0  # rows scored by a function routed to other tasks
    examples: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, task) -> first row index

    @property
    def clean(self) -> bool:
        return not (self.unscored or self.misrouted or self.all_skipped or self.unrouted)


def _count(report_counter: Counter[Any], key_of: Any, names: list[str], index: np.ndarray, mask: np.ndarray) -> None:
    for t, n in enumerate(np.bincount(index[mask], minlength=len(names))):
        if n:
            report_counter[key_of(names[t])] += int(n)


def _first_rows(report: RoutingReport, kind: str, names: list[str], index: np.ndarray, mask: np.ndarray) -> None:
    for row in np.flatnonzero(mask):  # only rows with a hole: cheap on a clean batch
        report.examples.setdefault((kind, names[index[row]]), int(row))


def check_routing(
    batch: RolloutBatch, table: RoutingTable | None, raised: np.ndarray | None = None
) -> RoutingReport:
    """Count unscored, misrouted, all-skipped and unrouted rows. With no table only all-skipped rows count.

    ``raised`` (rows x functions, bool): cells a function raised on and that were scored None for it. They belong
    to the reward_errors guard (one verdict per row), so here they count as scored.
    """
    report = RoutingReport()
    names, index = batch.task_index
    reward_names = batch.reward_names
    scored = batch.scored
    n = len(batch)
    if raised is not None and raised.shape == scored.shape:
        scored = scored | raised
    for t, rows in enumerate(np.bincount(index, minlength=len(names))):
        report.rows_per_task[names[t]] += int(rows)
    all_skipped = ~scored.any(axis=1) if scored.shape[1] else np.ones(n, dtype=bool)
    _count(report.all_skipped, lambda task: task, names, index, all_skipped)
    _first_rows(report, "all_skipped", names, index, all_skipped)
    holes = np.zeros(n, dtype=bool)  # rows a routed function skipped
    misrouted = np.zeros(n, dtype=bool)
    if table is not None and not table.empty:
        declared = np.array([task in table.declared_tasks for task in names], dtype=bool)
        unrouted = ~declared[index] if n else np.zeros(0, dtype=bool)
        _count(report.unrouted, lambda task: task, names, index, unrouted)
        _first_rows(report, "unrouted", names, index, unrouted)
        for i, tasks in sorted(table.serves.items()):
            if i >= scored.shape[1]:
                continue
            serves = np.array([task in tasks for task in names], dtype=bool)[index] if n else np.zeros(0, dtype=bool)
            hole = serves & ~scored[:, i]
            wrong = ~serves & scored[:, i]
            name = reward_names[i]
            _count(report.unscored, lambda task, name=name: (task, name), names, index, hole)
            _count(report.misrouted, lambda task, name=name: (task, name), names, index, wrong)
            holes |= hole
            misrouted |= wrong
        _first_rows(report, "unscored", names, index, holes)
        _first_rows(report, "misrouted", names, index, misrouted)
    report.unscored_rows = int((all_skipped | holes).sum())
    report.misrouted_rows = int(misrouted.sum())
    return report
