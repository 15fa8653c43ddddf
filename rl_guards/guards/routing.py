"""Reward routing on live batches: every task scored by its functions, and only by them."""

from __future__ import annotations

from typing import Any, ClassVar

from rl_guards.config import RoutingConfig
from rl_guards.console import Column, render_table
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.routing import RoutingReport, RoutingTable, check_routing, table_from_funcs, table_from_names
from rl_guards.core.templates import visible_tail
from rl_guards.errors import RoutingError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.guards.reward_errors import raised_cells

TAIL_CHARS = 80  # characters of a completion's end shown in a message


def _typo_note(unrouted: list[str], declared: list[str], present: set[str]) -> str:
    """``routes name 'arihm', close to 'arith' ...`` for declared tasks that match no row but look like one."""
    import difflib

    absent = [d for d in declared if d not in present]
    pairs = []
    for task in unrouted:
        close = difflib.get_close_matches(task, absent, n=1, cutoff=0.6)
        if close:
            pairs.append(f"route key {close[0]!r} matches no row, and looks like the task {task!r}")
    return ("Likely typo: " + "; ".join(pairs) + ".\n") if pairs else ""


class RoutingGuard(Guard):
    """Checks each batch against the declared task -> reward function routes (default mode: raise).

    Routes come from ``routing.routes`` (task -> function names) when set, else from wrappers made by
    :func:`rl_guards.rewards.routing.route` among the trainer's reward functions. Functions in no route are global and
    unchecked. With no routes at all, only rows that every function skipped are caught.

    Violations (:class:`~rl_guards.errors.RoutingError`):

    - ``unscored_rows``: a routed function returned None for a row of its task, or no function scored a row
      (TRL then gives the row's whole group zero advantage, with a log warning at most);
    - ``misrouted_score``: a function returned a value for a row of a task it is not routed to;
    - ``unrouted_task``: rows of a task the routes do not name (declare it, with ``[]`` if only global
      functions should score it);
    - ``unknown_reward_func``: a route names a function the trainer does not have.

    ======================================  ====================================================
    key                                     value
    ======================================  ====================================================
    ``rl_guards/routing/unscored_rows``     rows missing a routed score or scored by no function
    ``rl_guards/routing/misrouted_rows``    rows scored by a function routed to other tasks
    ``rl_guards/routing/unrouted_rows``     rows of tasks absent from the routes
    ======================================  ====================================================
    """

    name: ClassVar[str] = "routing"
    config_field: ClassVar[str] = "routing"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: RoutingConfig
        self._table: RoutingTable | None = None
        self._table_names: tuple[str, ...] | None = None
        self._noted_unrouted_run = False

    def _routes_table(self, reward_names: list[str], report: Reporter) -> RoutingTable | None:
        if self._table_names == tuple(reward_names):
            return self._table
        if self.config.routes:
            table: RoutingTable | None = table_from_names(self.config.routes, reward_names)
        elif self.ctx.reward_funcs and len(self.ctx.reward_funcs) == len(reward_names):
            table = table_from_funcs(self.ctx.reward_funcs)
        else:
            table = None
        self._table, self._table_names = table, tuple(reward_names)
        if table is not None and table.unknown_names:
            report.violation(
                "unknown_reward_func",
                f"routing.routes names reward function(s) {table.unknown_names} that the trainer does not have; "
                f"its reward functions are {list(reward_names)}. Fix the names in routing.routes (they are TRL's "
                f"names: each function's __name__).",
                RoutingError,
            )
        return table

    def on_train_begin(self, report: Reporter) -> None:
        if self.ctx.reward_func_names:
            self._routes_table(list(self.ctx.reward_func_names), report)

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        table = self._routes_table(batch.reward_names, report)
        result = check_routing(batch, table, raised_cells(batch))
        report.metric("unscored_rows", float(result.unscored_rows))
        report.metric("misrouted_rows", float(result.misrouted_rows))
        report.metric("unrouted_rows", float(sum(result.unrouted.values())))
        if (table is None or table.empty) and len(result.rows_per_task) > 1 and not self._noted_unrouted_run:
            self._noted_unrouted_run = True
            report.note(
                "no_routes",
                f"{len(result.rows_per_task)} tasks ({', '.join(sorted(result.rows_per_task))}) but no routes "
                "declared: only rows that every reward function skipped are checked. Declare routes with "
                "routing.routes or rl_guards.rewards.routing.route() to check which function scores which task.",
            )
        rows = sorted(set(result.examples.values()))
        # A route naming a task that never comes (a typo of a real task) shows up as rows of an unrouted task, and
        # as holes or misrouted scores for the real one: the cause comes first, so raise mode stops with it.
        if result.unrouted:
            report.violation("unrouted_task", self._unrouted_message(batch, result, table), RoutingError)
        if result.unscored or result.all_skipped:
            report.violation("unscored_rows", lambda: self._unscored_message(batch, result), RoutingError, rows=rows)
        if result.misrouted:
            report.violation(
                "misrouted_score", lambda: self._misrouted_message(batch, result, table), RoutingError, rows=rows
            )

    # ----- messages ---------------------------------------------------------------------------------------
    @staticmethod
    def _table_text(rows: list[tuple[str, str, int, int]]) -> str:
        columns = ["task", "function", Column("rows", "right"), "of"]
        return _indent(render_table(columns, [list(r) for r in rows], styled=False))

    @staticmethod
    def _example(batch: RolloutBatch, result: RoutingReport, kind: str, task: str) -> str:
        row = result.examples.get((kind, task))
        if row is None or not isinstance(batch.completions[row], str):
            return ""
        tail = visible_tail(batch.completions[row], width=TAIL_CHARS)
        return f"\nExample: row {row} (task {task!r}), completion {tail}"

    def _unscored_message(self, batch: RolloutBatch, result: RoutingReport) -> str:
        total = result.rows_per_task
        rows = [(t, f, n, total[t]) for (t, f), n in sorted(result.unscored.items())]
        rows += [(t, "(every function)", n, total[t]) for t, n in sorted(result.all_skipped.items())]
        first_task = rows[0][0]
        kind = "unscored" if result.unscored else "all_skipped"
        text = (
            f"rows of a task were left unscored at step {batch.step} ({batch.mode}): a None from a function routed "
            f"to the task, or no score at all. TRL counts a None as 0 in the total and gives a group with no "
            f"scores zero advantage, so these rows train on nothing or on a wrong reward.\n"
            f"{self._table_text(rows)}{self._example(batch, result, kind, first_task)}\n"
            "Fix: make each routed function return a float for every row of its tasks (None only means "
            "'not my task'), and route every task to at least one function."
        )
        return text

    def _misrouted_message(self, batch: RolloutBatch, result: RoutingReport, table: RoutingTable | None) -> str:
        total = result.rows_per_task
        rows = [(t, f, n, total[t]) for (t, f), n in sorted(result.misrouted.items())]
        first_task = rows[0][0]
        serves = ""
        if table is not None:
            names = batch.reward_names
            serves = "; ".join(
                f"{names[i]} -> {sorted(tasks)}" for i, tasks in sorted(table.serves.items()) if i < len(names)
            )
        return (
            f"reward functions scored rows of tasks they are not routed to at step {batch.step} ({batch.mode}): "
            f"those rows get another task's reward.\n{self._table_text(rows)}"
            f"{self._example(batch, result, 'misrouted', first_task)}\nDeclared routes: {serves}\n"
            "Fix: return None for rows whose task the function does not serve (or wrap the functions with "
            "rl_guards.rewards.routing.route({task: [functions]}) so they only see their own rows)."
        )

    def _unrouted_message(self, batch: RolloutBatch, result: RoutingReport, table: RoutingTable | None) -> str:
        total = result.rows_per_task
        rows = [(t, "(no route)", n, total[t]) for t, n in sorted(result.unrouted.items())]
        declared = sorted(table.declared_tasks) if table is not None else []
        return (
            f"rows of tasks that no route names at step {batch.step} ({batch.mode}); declared tasks: {declared}.\n"
            f"{self._table_text(rows)}\n{_typo_note(sorted(result.unrouted), declared, set(total))}"
            "Fix: add the task to routing.routes (or to route({...})) with the functions that must score it; use "
            "an empty list if only unrouted (global) functions should. Or check the dataset's task column."
        )


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
