"""Completions that hit ``max_completion_length``, per task."""

from __future__ import annotations

from typing import Any, ClassVar

from rl_guards.config import TruncationConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.templates import visible_tail
from rl_guards.core.truncation import truncation_by_task
from rl_guards.errors import TruncationError
from rl_guards.guards.base import Guard, Reporter

TAIL_CHARS = 120  # characters of a truncated completion's end shown in a message


class TruncationGuard(Guard):
    """Share of each task's completions that ended without EOS (cut at ``max_completion_length``).

    A truncated completion is usually scored as a failure and, unless ``mask_truncated_completions=True``,
    trained on: the model learns from text it never finished. Choose the cap from measured lengths
    (``rl-guards probe-lengths``).

    ==========================================  ==============================================
    key                                         value
    ==========================================  ==============================================
    ``rl_guards_task/<task>/truncated_rate``    share of the task's completions with no EOS
    ``rl_guards/truncation/truncated_rate``     the same over the whole batch
    ==========================================  ==============================================

    Violation ``truncation_rate`` (:class:`~rl_guards.errors.TruncationError`) when a task's share exceeds
    ``truncation.max_rate``; the message shows the tails of truncated completions.
    """

    name: ClassVar[str] = "truncation"
    config_field: ClassVar[str] = "truncation"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: TruncationConfig

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        stats = truncation_by_task(batch)
        for task, s in stats.items():
            report.task_metric(task, "truncated_rate", s.rate)
        total = len(batch)
        report.metric("truncated_rate", sum(s.truncated for s in stats.values()) / total if total else 0.0)
        over = [s for s in stats.values() if s.rate > self.config.max_rate]
        if over:
            rows = [row for s in over for row in s.examples]
            report.violation("truncation_rate", lambda: self._message(batch, over), TruncationError, rows=rows)

    def _message(self, batch: RolloutBatch, over: list[Any]) -> str:
        cap = f"max_completion_length={batch.max_completion_length}" if batch.max_completion_length else "the cap"
        lines = [
            f"completions hit {cap} above truncation.max_rate={self.config.max_rate:g} at step {batch.step} "
            f"({batch.mode}):"
        ]
        for s in over:
            lines.append(f"  task {s.task!r}: {s.truncated}/{s.rows} truncated ({s.rate:.0%})")
            for row in s.examples:
                text = batch.completions[row]
                tail = visible_tail(text, width=TAIL_CHARS) if isinstance(text, str) else "(text on another rank)"
                lines.append(f"    row {row} ({batch.completion_lengths[row]} tokens) ends {tail}")
        lines.append(
            "Fix: raise max_completion_length (measure with `rl-guards probe-lengths --model ... --dataset ...`), "
            "or set mask_truncated_completions=True so cut completions carry no loss, or shorten the task."
        )
        return "\n".join(lines)
