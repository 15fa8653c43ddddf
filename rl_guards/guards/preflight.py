"""PreflightGuard: one report before step 0 on template paths, optimisation choices, group size, length cap.

::

    setup(ctx)                  # the trainer's args, tokenizer, datasets, rendering path
    on_train_begin(report)      # build the report; main process: one summary line (the whole report in verbose
                                # mode), the report written next to the findings, counts + W&B panel;
                                # blocking findings -> PreflightError (raise) / warn once each / count;
                                # the finding kind is the preflight code in every mode

On the console (main process): ``[rl_guards] preflight: 0 blocking, 1 warning, 9 info; full report:
<rollouts folder>/preflight.txt``; each warning and blocking finding follows in full, once (the session says it);
``console.verbose`` prints the whole report (choices, every info row with its fix, the group-size table, the rendered
prompts) as well.

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
from pathlib import Path
from typing import ClassVar

from rl_guards.config import GuardsConfig, PreflightConfig
from rl_guards.console import say
from rl_guards.core.preflight import PreflightFinding, PreflightReport
from rl_guards.core.severity import worst
from rl_guards.errors import PreflightError
from rl_guards.guards.base import Guard, Reporter

logger = logging.getLogger("rl_guards")

WANDB_TABLE_KEY = "rl_guards/preflight/findings"
WANDB_REPORT_KEY = "rl_guards/preflight/report"
REPORT_FILE = "preflight.txt"  # the whole report, next to findings.jsonl


class PreflightGuard(Guard):
    """Builds, prints and logs the preflight report at train start; blocking findings stop a raise-mode run."""

    name: ClassVar[str] = "preflight"
    config_field: ClassVar[str] = "preflight"

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: PreflightConfig = config.preflight
        self.last_report: PreflightReport | None = None
        # write the report into the run's folder (training); False where the checks run without a run to write to
        # (rl-guards preflight prints the whole report itself and never writes to the run's folder)
        self.write_report = True
        self.report_path: Path | None = None  # where the report was written

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
            self._say(result)
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


    def _say(self, result: PreflightReport) -> None:
        """One summary line (counts by severity, where the whole report is); the whole report in verbose mode."""
        where = ""
        path = self._report_file() if self.write_report else None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(result.render() + "\n", encoding="utf-8")
                self.report_path = path
                where = f"; full report: {path}"
            except OSError as exc:  # a read-only output folder: the line says so, the run goes on
                where = f"; full report not written ({type(exc).__name__}: {exc}); console.verbose prints it"
        elif not self.guards_config.console.verbose:
            where = "; console.verbose prints the full report"
        headline = result.headline().replace("rl_guards preflight", "[rl_guards] preflight", 1)
        level = worst(f.severity for f in result.findings if f.severity != "info")
        say(headline + where, severity=level, level=logging.INFO)
        if self.guards_config.console.verbose:
            say(result.render())

    def _report_file(self) -> Path | None:
        """``preflight.txt`` in the rollouts folder (next to ``findings.jsonl``); None without a trainer output folder
        to put it in (a context built by hand)."""
        from rl_guards.rollouts.store import default_rollouts_dir

        output_dir = getattr(self.ctx.args, "output_dir", None)
        if self.guards_config.rollouts.output_dir:
            return Path(self.guards_config.rollouts.output_dir) / REPORT_FILE
        return default_rollouts_dir(output_dir) / REPORT_FILE if output_dir else None


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
