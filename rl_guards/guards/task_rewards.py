"""Per-task reward curves: which task is improving, and which is not."""

from __future__ import annotations

from typing import ClassVar

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.task_labels import task_column_candidates
from rl_guards.core.task_stats import task_stats
from rl_guards.guards.base import Guard, Reporter


class TaskRewardMonitor(Guard):
    """Logs reward statistics per task on every batch; never stops a run.

    A mixed-task run's overall reward hides where improvement comes from. TRL logs rewards per function, not
    per task; this splits them by the task column (``tasks.task_column``).

    Keys, all ``rl_guards_task/<task>/...`` (task names encoded: :mod:`rl_guards.core.metric_keys`):

    ===================================  ==========================================================================
    key                                  value
    ===================================  ==========================================================================
    ``reward_mean``                      mean weighted total reward of the task's rows (rows no function scored
                                         and non-finite totals are left out; absent when none is left)
    ``reward_std``                       population std of the same totals
    ``reward/<func>/mean``               mean of one reward function over the task's rows it scored (absent
                                         when it scored none of them, e.g. a function routed to another task);
                                         for a 0/1 function this is its share of passes
    ``nonfinite_rewards``                scored rows whose total is inf or NaN (left out of the means; logged
                                         when non-zero)
    ``completion_length``                mean completion length in tokens (EOS included)
    ``rows``                             rows of the task in the batch
    ``groups``                           complete groups of the task in the batch
    ===================================  ==========================================================================

    The task's pass rate (one definition for the run) is the dead-groups guard's ``pass_rate``. At the default
    metrics level only ``reward_mean`` is logged (:mod:`rl_guards.core.metric_set`).
    """

    name: ClassVar[str] = "tasks"
    config_field: ClassVar[str] = "tasks"

    def on_train_begin(self, report: Reporter) -> None:
        """No task column in the dataset: name the columns that look like task labels, once."""
        dataset = self.ctx.train_dataset
        columns = list(getattr(dataset, "column_names", None) or [])
        task_column = self.guards_config.tasks.task_column
        if not columns or task_column in columns:
            return
        try:
            rows = [row for _, row in zip(range(2000), dataset, strict=False) if isinstance(row, dict)]
        except Exception:  # a streaming dataset that cannot be read here: nothing to suggest
            return
        exclude = ("prompt", "completion", "messages", "answer", "solution", "enable_thinking")
        candidates = task_column_candidates(
            rows, columns, max_values=self.guards_config.tasks.max_tasks, exclude=exclude
        )
        if not candidates:
            return
        shown = "; ".join(
            f"{column!r} ({len(values)} values: {', '.join(map(repr, values[:5]))}{', ...' if len(values) > 5 else ''})"
            for column, values in candidates[:3]
        )
        report.notice(
            "task_column_missing",
            f"the dataset has no {task_column!r} column, so every per-task metric (reward, pass rate, dead groups) "
            f"is for one task {self.guards_config.tasks.default_task!r}. Columns that look like task labels: {shown}. "
            f"Fix: set tasks.task_column: {candidates[0][0]} (or rename the column to {task_column!r}).",
        )

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        for task, s in task_stats(batch).items():
            if s.reward_mean is not None and s.reward_std is not None:
                report.task_metric(task, "reward_mean", s.reward_mean)
                report.task_metric(task, "reward_std", s.reward_std)
            for func, values in s.func_values.items():
                report.task_metric(task, f"reward/{func}/mean", sum(values) / len(values))
            if s.nonfinite_rows:  # inf / NaN totals: kept out of the means above, counted here
                report.task_metric(task, "nonfinite_rewards", float(s.nonfinite_rows))
            report.task_metric(task, "completion_length", s.completion_length_mean)
            report.task_metric(task, "rows", float(s.rows))
            report.task_metric(task, "groups", float(s.groups))
