"""The audit's report: a readable table per function (verdict, evidence, fix), JSON, and an HTML page in the style
of ``rl-guards report``."""

from __future__ import annotations

import json
import textwrap

from rl_guards.audit.runner import FIXES, AuditReport, FunctionAudit
from rl_guards.console import render_table


def _speed_text(audit: FunctionAudit) -> str:
    s = audit.speed
    if not s:
        return "speed: not measured"
    return (
        f"speed: {s['rows_per_s']:g} completions/s, p50 {s['p50_ms']:g} ms, p99 {s['p99_ms']:g} ms; "
        f"{s['step_s']:g} s per step at {s['batch_size']} completions"
    )


def render_text(report: AuditReport, width: int = 118, *, styled: bool = False) -> str:
    """The audit as text: the verdicts table, then one block per function, each finding with its evidence and fix."""
    audits = [*report.functions, *([report.total] if report.total else [])]
    verdicts = render_table(
        ["function", "framework", "verdict", "findings"],
        [[a.name, a.framework, a.verdict, ", ".join(f.kind for f in a.findings if f.severity != "info") or "-"]
         for a in audits],
        width=width,
        styled=styled,
        severity_column=2,
    )  # fmt: skip
    lines = [
        f"rl-guards audit-rewards: {report.rows} rows, completions {report.completions}, reference column "
        f"{report.reference or '(none)'}; {report.seconds:.2f} s",
        "",
        verdicts,
    ]
    for a in audits:
        lines += ["", f"== {a.name} ({a.framework}, weight {a.weight:g}): {a.verdict}"]
        if a.framework != "-":
            lines.append(f"   {_speed_text(a)}")
        for f in a.findings:
            lines += textwrap.wrap(f"[{f.severity}] {f.kind}: {f.message}", width, initial_indent="   ",
                                   subsequent_indent="      ")
            if FIXES[f.kind] and f.severity != "info":
                lines += textwrap.wrap(f"fix: {FIXES[f.kind]}", width, initial_indent="      ",
                                       subsequent_indent="      ")
        if not a.findings:
            lines.append("   no finding")
    costs = ", ".join(f"{k} {v:.2f} s" for k, v in report.costs.items())
    lines += ["", f"cost of each check: {costs}"]
    return "\n".join(lines)


def render_json(report: AuditReport) -> str:
    """The ``--json`` object: ``{"functions": [{"name", "framework", "verdict", "findings", "speed"}, ...], ...}``."""
    return json.dumps(report.to_dict(), indent=2, default=str)


def render_html(report: AuditReport) -> str:
    """One self-contained page (inline CSS, no script) from ``audit.html.j2``: every text is escaped by the template."""
    from rl_guards.rollouts.html import render_page

    audits = [*report.functions, *([report.total] if report.total else [])]
    return render_page(
        "audit.html.j2",
        rows=report.rows,
        completions=report.completions,
        reference=report.reference or "(none)",
        seconds=f"{report.seconds:.2f}",
        costs=", ".join(f"{k} {v:.2f} s" for k, v in report.costs.items()),
        audits=[
            {
                "name": a.name,
                "framework": a.framework,
                "verdict": a.verdict,
                "kinds": ", ".join(f.kind for f in a.findings if f.severity != "info") or "-",
                "speed": _speed_text(a) if a.framework != "-" else "",
                "findings": [
                    {"severity": f.severity, "kind": f.kind, "message": f.message, "fix": FIXES[f.kind]}
                    for f in a.findings
                ],
            }
            for a in audits
        ],
    )


__all__ = ["render_html", "render_json", "render_text"]
