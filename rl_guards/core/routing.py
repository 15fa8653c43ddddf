"""Task -> reward function routing, checked on a scored batch.

A route says which reward functions must score a task's rows. A function that appears in any route is
*routed*: it must return a value for its tasks' rows and ``None`` for every other row. A function in no
route is *global* and is not checked. Holes are what matters: TRL turns ``None`` into NaN, leaves it out of
that function's statistics and counts it 0 in the total, so a missed or misrouted score trains silently.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


def _scored(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def check_routing(batch: RolloutBatch, table: RoutingTable | None) -> RoutingReport:
    """Count unscored, misrouted, all-skipped and unrouted rows. With no table only all-skipped rows count."""
    report = RoutingReport()
    names = batch.reward_names
    routed = table is not None and not table.empty
    for row, task in enumerate(batch.tasks):
        report.rows_per_task[task] += 1
        values = batch.rewards[row]
        missing = misrouted = False
        if not any(_scored(v) for v in values):
            report.all_skipped[task] += 1
            report.examples.setdefault(("all_skipped", task), row)
            missing = True
        if routed:
            assert table is not None
            if task not in table.declared_tasks:
                report.unrouted[task] += 1
                report.examples.setdefault(("unrouted", task), row)
            for i, tasks in table.serves.items():
                if i >= len(values):
                    continue
                if task in tasks and not _scored(values[i]):
                    report.unscored[(task, names[i])] += 1
                    report.examples.setdefault(("unscored", task), row)
                    missing = True
                elif task not in tasks and _scored(values[i]):
                    report.misrouted[(task, names[i])] += 1
                    report.examples.setdefault(("misrouted", task), row)
                    misrouted = True
        report.unscored_rows += missing
        report.misrouted_rows += misrouted
    return report
