"""Per-task reward curves: which task is improving, and which is not."""

from __future__ import annotations

from typing import Any, ClassVar

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.task_stats import is_binary, task_stats
from rl_guards.guards.base import Guard, Reporter


class TaskRewardMonitor(Guard):
    """Logs reward statistics per task on every batch; never stops a run.

    A mixed-task run's overall reward hides where improvement comes from. TRL logs rewards per function, not
    per task; this splits them by the task column (``tasks.task_column``).

    Keys, all ``rl_guards_task/<task>/...`` (slashes in task names become ``_``):

    ===================================  ==========================================================================
    key                                  value
    ===================================  ==========================================================================
    ``reward_mean``                      mean weighted total reward of the task's rows (rows no function scored
                                         are left out; absent when none was scored)
    ``reward_std``                       population std of the same totals
    ``reward/<func>/mean``               mean of one reward function over the task's rows it scored (absent
                                         when it scored none of them, e.g. a function routed to another task)
    ``reward/<func>/pass_rate``          share of 1.0 among those values, while every value that function has
                                         returned in the run so far is 0 or 1
    ``completion_length``                mean completion length in tokens (EOS included)
    ``rows``                             rows of the task in the batch
    ``groups``                           complete groups of the task in the batch
    ===================================  ==========================================================================

    State: the names of functions seen returning a value other than 0 or 1 (restored on resume, so a function
    that was once non-binary never gets a ``pass_rate`` again).
    """

    name: ClassVar[str] = "tasks"
    config_field: ClassVar[str] = "tasks"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.non_binary: set[str] = set()

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        stats = task_stats(batch)
        for s in stats.values():
            for func, values in s.func_values.items():
                if func not in self.non_binary and not is_binary(values):
                    self.non_binary.add(func)
        for task, s in stats.items():
            if s.reward_mean is not None and s.reward_std is not None:
                report.task_metric(task, "reward_mean", s.reward_mean)
                report.task_metric(task, "reward_std", s.reward_std)
            for func, values in s.func_values.items():
                mean = sum(values) / len(values)
                report.task_metric(task, f"reward/{func}/mean", mean)
                if func not in self.non_binary:  # for a 0/1 function the mean is the share of 1.0
                    report.task_metric(task, f"reward/{func}/pass_rate", mean)
            report.task_metric(task, "completion_length", s.completion_length_mean)
            report.task_metric(task, "rows", float(s.rows))
            report.task_metric(task, "groups", float(s.groups))

    def state_dict(self) -> dict[str, Any]:
        return {"non_binary": sorted(self.non_binary)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.non_binary = set(state.get("non_binary", []))
