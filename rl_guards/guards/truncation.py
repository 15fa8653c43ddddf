"""Completions that hit ``max_completion_length``, per task."""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

from rl_guards.config import TruncationConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.evidence import share_lower_bound
from rl_guards.core.templates import visible_tail
from rl_guards.core.truncation import all_cut_evidence, truncation_by_task
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

    Violation ``truncation_rate`` (:class:`~rl_guards.errors.TruncationError`) when, over a task's last
    ``truncation.window`` batches, either test says its share is above ``truncation.max_rate``:

    - **the share**, once the window holds ``truncation.min_rows`` rows: its 95 % lower bound (Wilson) exceeds
      ``max_rate``, so a truncated row or two in a small batch is not evidence that the cap is too low;
    - **prompts cut whole**, from the first batch on: the prompts all of whose completions were cut are too many for
      a share of at most ``max_rate`` (:func:`~rl_guards.core.truncation.all_cut_evidence`: their binomial tail is
      below ``truncation.early_alpha``). A debug run of a few steps whose task is cut in every row hears of it at
      once (6 of 6 prompts cut whole: p = 1e-6), while a share that is high but spread over prompts that also
      finish (19 of 24 rows, one prompt cut whole) waits for the window's rows.

    The message shows the live lengths and the tails of truncated completions.
    """

    name: ClassVar[str] = "truncation"
    config_field: ClassVar[str] = "truncation"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: TruncationConfig
        # "<mode>/<task>" -> recent (rows, truncated rows, groups, groups with every completion truncated)
        self.windows: dict[str, deque[tuple[int, int, int, int]]] = {}

    def _window(self, key: str) -> deque[tuple[int, int, int, int]]:
        if key not in self.windows:
            self.windows[key] = deque(maxlen=max(1, int(self.config.window)))
        return self.windows[key]

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        stats = truncation_by_task(batch)
        for task, s in stats.items():
            report.task_metric(task, "truncated_rate", s.rate)
        total = len(batch)
        report.metric("truncated_rate", sum(s.truncated for s in stats.values()) / total if total else 0.0)
        over: list[tuple[Any, tuple[int, ...]]] = []  # (this batch's stats, the window's sums)
        for task, s in stats.items():
            window = self._window(f"{batch.mode}/{task}")
            window.append((s.rows, s.truncated, s.groups, s.cut_groups))
            sums = tuple(sum(x[k] for x in window) for k in range(4))
            if s.truncated and self._too_many(*sums):
                over.append((s, sums))
        if over:
            shown = [row for s, _ in over for row in s.examples]
            report.violation("truncation_rate", lambda: self._message(batch, over), TruncationError, rows=shown)

    def _too_many(self, rows: int, cut: int, groups: int, cut_groups: int) -> bool:
        """Either test of the class docstring, on a window's sums."""
        max_rate = self.config.max_rate
        if rows >= self.config.min_rows and share_lower_bound(cut, rows) > max_rate:
            return True
        return cut_groups > 0 and all_cut_evidence(cut_groups, groups, max_rate) < self.config.early_alpha

    def state_dict(self) -> dict[str, Any]:
        return {"windows": {key: [list(x) for x in w] for key, w in self.windows.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.windows = {}
        for key, items in dict(state.get("windows") or {}).items():
            window = self._window(str(key))
            for item in items:  # a state saved before the group counts: (rows, truncated) only
                values = [int(x) for x in item] + [0, 0]
                window.append((values[0], values[1], values[2], values[3]))

    def _message(self, batch: RolloutBatch, over: list[tuple[Any, tuple[int, ...]]]) -> str:
        setting = self.ctx.length_cap_name
        cap = f"{setting}={batch.max_completion_length}" if batch.max_completion_length else "the cap"
        lengths = [int(n) for n in batch.completion_lengths]
        done = sorted(n for n, t in zip(lengths, batch.truncated, strict=False) if not t)
        finished = (
            f"completions that finished: median {done[len(done) // 2]}, longest {done[-1]} tokens"
            if done
            else "no completion of this batch finished"
        )
        lines = [
            f"completions hit {cap} more often than truncation.max_rate={self.config.max_rate:g} allows, beyond "
            f"sampling noise, at step {batch.step} ({batch.mode}; {finished}):"
        ]
        for s, (rows, cut, groups, cut_groups) in over:
            whole = f"; {cut_groups} of its {groups} prompts had every completion cut" if cut_groups else ""
            lines.append(
                f"  task {s.task!r}: {cut}/{rows} truncated over its last {len(self._window(f'{batch.mode}/{s.task}'))}"
                f" batch(es) ({cut / rows:.0%}; this batch {s.truncated}/{s.rows}{whole})"
            )
            for row in s.examples:
                text = batch.completions[row]
                tail = visible_tail(text, width=TAIL_CHARS) if isinstance(text, str) else "(text on another rank)"
                lines.append(f"    row {row} ({batch.completion_lengths[row]} tokens) ends {tail}")
        if setting != "max_completion_length":  # another framework's cap (the cookbook's Config.max_tokens)
            lines.append(
                f"Fix: raise {setting} (a completion cut at the cap never reaches its stop sequence: a ProblemEnv "
                "scores it format 0 and parses an unfinished answer), or shorten the task's expected answers."
            )
            return "\n".join(lines)
        lines.append(
            "Fix: raise max_completion_length (measure first: `rl-guards probe-lengths --model DIR --dataset DATA "
            "--output probe.json`, then `rl-guards preflight grpo.yaml --length_probe probe.json`), or set "
            "mask_truncated_completions=True so cut completions carry no loss, or shorten the task."
        )
        return "\n".join(lines)
