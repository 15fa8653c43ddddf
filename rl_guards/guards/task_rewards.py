"""Per-task reward curves: which task is improving, and which is not."""

from __future__ import annotations

from typing import Any, ClassVar

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.task_labels import (
    MIN_ROWS_NEARLY,
    constant_task_column,
    not_task_column,
    task_column_candidates,
    task_like_name,
)
from rl_guards.core.task_stats import task_stats
from rl_guards.guards.base import Guard, Reporter

SAMPLE_ROWS = 2000  # dataset rows read at train start to name task-like columns (spread over the dataset)


def _sample_rows(dataset: Any, limit: int, keep: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """Up to ``limit`` rows spread evenly over a sized dataset (a dataset sorted by source shows every source),
    else its first ``limit`` rows; None when it cannot be read here. Only the string columns (and ``keep``) are
    read where the dataset declares its features: task labels are strings, and images or audio cost a decode."""
    try:
        features = getattr(dataset, "features", None) or {}
        text = [c for c, f in features.items() if c in keep or getattr(f, "dtype", None) in ("string", "large_string")]
        if features and hasattr(dataset, "select_columns"):
            if not text:
                return []
            dataset = dataset.select_columns(text)
        try:
            n = len(dataset)
        except TypeError:
            n = None
        if n is not None and n > limit and hasattr(dataset, "select"):
            picked = dataset.select([i * n // limit for i in range(limit)])
            return [row for row in picked if isinstance(row, dict)]
        return [row for _, row in zip(range(limit), dataset, strict=False) if isinstance(row, dict)]
    except Exception:
        return None


def _rows_in(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        return 0


def _counts_text(counts: dict[str, int], shown: int = 6) -> str:
    items = list(counts.items())
    more = f", ... ({len(items)} values)" if len(items) > shown else ""
    return ", ".join(f"{k!r} {v}" for k, v in items[:shown]) + more


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
        """The task column is missing, or says one task, while other columns look like task labels: say so, once."""
        dataset = self.ctx.train_dataset
        columns = list(getattr(dataset, "column_names", None) or [])
        if not columns:
            return
        # a small dataset's prompts too: with few rows, a constant task column is judged with them (task_labels)
        keep = (self.guards_config.tasks.task_column,)
        if 0 < _rows_in(dataset) < MIN_ROWS_NEARLY:
            keep += ("prompt",)
        rows = _sample_rows(dataset, SAMPLE_ROWS, keep)
        if not rows:  # a streaming dataset that cannot be read here: nothing to suggest
            return
        config = self.guards_config.tasks
        if config.task_column in columns:
            self._constant_column(rows, columns, report)
            return
        exclude = tuple(c for c in columns if not_task_column(c))
        candidates = task_column_candidates(rows, columns, max_values=config.max_tasks, exclude=exclude)
        if not candidates:
            return
        shown = "; ".join(
            f"{column!r} ({len(values)} values: {', '.join(map(repr, values[:5]))}{', ...' if len(values) > 5 else ''})"
            for column, values in candidates[:3]
        )
        message = (
            f"the dataset has no {config.task_column!r} column, so every per-task metric (reward, pass rate, dead "
            f"groups) is for one task {config.default_task!r}. Columns that look like task labels: {shown}. "
            f"Fix: set tasks.task_column: {candidates[0][0]} (or rename the column to {config.task_column!r})."
        )
        if task_like_name(candidates[0][0]):
            report.notice("task_column_missing", message)
        else:  # label-like values under another name (a language, a license): worth a line, not a warning
            report.note("task_column_missing", message + " If the rows are one task, nothing to do.")

    def _constant_column(self, rows: list[dict[str, Any]], columns: list[str], report: Reporter) -> None:
        config = self.guards_config.tasks
        found = constant_task_column(
            rows, config.task_column, columns, default=config.default_task, max_values=config.max_tasks
        )
        if found is None:
            return
        counts, candidates = found
        n = len(rows)
        top, top_count = next(iter(counts.items()))
        rest = dict(list(counts.items())[1:])
        says = f"{top!r} on {top_count / n:.0%} of {n} rows"
        if rest:
            says += f" ({_counts_text(rest, 3)} on the rest)"
        sampled = ", sampled" if n < _rows_in(self.ctx.train_dataset) else ""
        named = [(column, labels) for column, labels in candidates if task_like_name(column)]
        shown = "; ".join(f"{column!r} ({_counts_text(labels)})" for column, labels in (named or candidates)[:3])
        column = (named or candidates)[0][0]
        message = (
            f"the task column {config.task_column!r} says one task ({says}{sampled}), "
            f"so every per-task metric (reward, pass rate, dead groups, drift) is for that one task, while other "
            f"columns look like the real task labels: {shown}. Fix: set tasks.task_column: {column} (or fill "
            f"{config.task_column!r} from it); if the rows really are one task, ignore this."
        )
        if named:
            report.notice("task_column_constant", message)
        else:  # label-like values under another name (a language, a license): worth a line, not a warning
            report.note("task_column_constant", message)

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
