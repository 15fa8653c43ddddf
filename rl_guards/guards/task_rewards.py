"""Per-task reward curves: which task is improving, and which is not."""

from __future__ import annotations

from typing import ClassVar

from rl_guards.core.batch import RolloutBatch
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
                                         are left out; absent when none was scored)
    ``reward_std``                       population std of the same totals
    ``reward/<func>/mean``               mean of one reward function over the task's rows it scored (absent
                                         when it scored none of them, e.g. a function routed to another task);
                                         for a 0/1 function this is its share of passes
    ``completion_length``                mean completion length in tokens (EOS included)
    ``rows``                             rows of the task in the batch
    ``groups``                           complete groups of the task in the batch
    ===================================  ==========================================================================

    The task's pass rate (one definition for the run) is the dead-groups guard's ``pass_rate``. At the default
    metrics level only ``reward_mean`` is logged (:mod:`rl_guards.core.metric_set`).
    """

    name: ClassVar[str] = "tasks"
    config_field: ClassVar[str] = "tasks"

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        for task, s in task_stats(batch).items():
            if s.reward_mean is not None and s.reward_std is not None:
                report.task_metric(task, "reward_mean", s.reward_mean)
                report.task_metric(task, "reward_std", s.reward_std)
            for func, values in s.func_values.items():
                report.task_metric(task, f"reward/{func}/mean", sum(values) / len(values))
            report.task_metric(task, "completion_length", s.completion_length_mean)
            report.task_metric(task, "rows", float(s.rows))
            report.task_metric(task, "groups", float(s.groups))
