"""PreflightGuard: one report before step 0 on template paths, optimisation choices, group size, length cap.

::

    setup(ctx)                  # the trainer's args, tokenizer, datasets, rendering path
    on_train_begin(report)      # build the report, print it (main process), log counts + W&B panel,
                                # blocking findings -> PreflightError (raise) / warn once each / count;
                                # the finding kind is the preflight code in every mode

Metrics (logged once, at train start):

=================================  =====================================================
key                                meaning
=================================  =====================================================
``rl_guards/preflight/blocking``   blocking findings (eval rendered differently, cap far below the probe)
``rl_guards/preflight/warnings``   warnings (length bias, warm-up ignored, small groups, no length probe, ...)
=================================  =====================================================

W&B (when a run is active, main process): ``rl_guards/preflight/findings`` (a table: severity, topic, code,
message, fix) and ``rl_guards/preflight/report`` (the rendered report as HTML). Warnings are warned once each
(``report.notice``; counted only in mode log) and appear in the end-of-run summary; only blocking findings are
violations (they stop a raise-mode run).
"""

from __future__ import annotations

import html
import logging
from typing import ClassVar

from rl_guards.config import GuardsConfig, PreflightConfig
from rl_guards.core.preflight import PreflightFinding, PreflightReport
from rl_guards.errors import PreflightError
from rl_guards.guards.base import Guard, Reporter

logger = logging.getLogger("rl_guards")

WANDB_TABLE_KEY = "rl_guards/preflight/findings"
WANDB_REPORT_KEY = "rl_guards/preflight/report"


class PreflightGuard(Guard):
    """Builds, prints and logs the preflight report at train start; blocking findings stop a raise-mode run."""

    name: ClassVar[str] = "preflight"
    config_field: ClassVar[str] = "preflight"

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: PreflightConfig = config.preflight
        self.last_report: PreflightReport | None = None

    def _build_report(self) -> PreflightReport:
        """The report for the run in ``self.ctx`` (rendering goes through the trainer's own path)."""
        # The adapter only duck-types the tokenizer; imported here to keep this module framework-free.
        from rl_guards.chat.preflight import build_report_from_context

        return build_report_from_context(self.ctx, self.config, task_column=self.guards_config.tasks.task_column)

    def on_train_begin(self, report: Reporter) -> None:
        if self.ctx.tokenizer is None or self.ctx.args is None:
            report.note("skipped", "no preflight report: the run context has no trainer args or tokenizer")
            return
        result = self._build_report()
        self.last_report = result
        counts = result.counts()
        report.metric("blocking", float(counts["blocking"]))
        report.metric("warnings", float(counts["warning"]))
        if self.ctx.is_main_process:
            print(result.render(), flush=True)
            log_to_tracker(result, report)
        for finding in result.warnings:  # warned once each (mode log: counted only)
            text = f"{finding.message} Fix: {finding.fix}"
            if self.config.mode == "log":
                report.info(finding.code, text)
            else:
                report.notice(finding.code, text)
        # One finding kind per code, whatever the mode; in raise mode the first one's error lists them all.
        blocking = result.blocking
        for i, finding in enumerate(blocking):
            shown = blocking if i == 0 and self.config.mode == "raise" else [finding]
            report.violation(finding.code, blocking_message(shown), PreflightError)


def blocking_message(findings: list[PreflightFinding]) -> str:
    """Error text for blocking findings: what, how to fix, and the diff when there is one."""
    lines = [f"{len(findings)} blocking preflight finding(s) before step 0:"]
    for f in findings:
        lines.append(f"- [{f.topic}/{f.code}] {f.message}")
        if f.fix:
            lines.append(f"  fix: {f.fix}")
        if f.detail:
            lines.append("  " + f.detail.replace("\n", "\n  "))
    return "\n".join(lines)


def log_to_tracker(result: PreflightReport, report: Reporter) -> bool:
    """Log the findings table, the rendered report and the summary counts to the run's tracker; never raises."""
    rows = [[f.severity, f.topic, f.code, f.message, f.fix] for f in result.sorted_findings()]
    logged = report.html(WANDB_REPORT_KEY, f"<pre>{html.escape(result.render())}</pre>")
    logged = report.table(WANDB_TABLE_KEY, ["severity", "topic", "code", "message", "fix"], rows) and logged
    counts = result.counts()
    report.summary(
        {"rl_guards/preflight/blocking": counts["blocking"], "rl_guards/preflight/warnings": counts["warning"]}
    )
    return logged


__all__ = ["PreflightGuard", "blocking_message", "log_to_tracker"]
