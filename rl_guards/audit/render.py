"""The audit's report: a readable table per function (verdict, evidence, fix), JSON, and an HTML page in the style
of ``rl-guards report``."""

from __future__ import annotations

import html
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
    """One self-contained page (inline CSS, no script); every text from the functions is escaped."""
    from rl_guards.rollouts.report import CSS

    esc = html.escape
    audits = [*report.functions, *([report.total] if report.total else [])]
    summary = "".join(
        f"<tr><td>{esc(a.name)}</td><td>{esc(a.framework)}</td><td class='{'bad' if a.verdict != 'ok' else ''}'>"
        f"{a.verdict}</td><td>{esc(', '.join(f.kind for f in a.findings if f.severity != 'info') or '-')}</td>"
        f"<td>{esc(_speed_text(a)) if a.framework != '-' else ''}</td></tr>"
        for a in audits
    )
    sections = ""
    for a in audits:
        rows = "".join(
            f"<tr><td class='{'bad' if f.severity == 'blocking' else ''}'>{f.severity}</td><td>{esc(f.kind)}</td>"
            f"<td><pre>{esc(f.message)}</pre></td><td>{esc(FIXES[f.kind])}</td></tr>"
            for f in a.findings
        )
        table = (
            "<table><tr><th>severity</th><th>kind</th><th>evidence</th><th>fix</th></tr>" + rows + "</table>"
            if rows
            else "<div class=empty>no finding</div>"
        )
        sections += f"<h3>{esc(a.name)} — {a.verdict}</h3>{table}"
    costs = ", ".join(f"{esc(k)} {v:.2f} s" for k, v in report.costs.items())
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>rl_guards reward audit</title>"
        f"<style>{CSS}</style></head><body><h1>rl_guards reward audit</h1>"
        f"<div class='meta'>{report.rows} rows · completions {esc(report.completions)} · reference column "
        f"{esc(report.reference or '(none)')} · {report.seconds:.2f} s · {costs}</div>"
        "<h2>Verdicts</h2><table><tr><th>function</th><th>framework</th><th>verdict</th><th>findings</th>"
        f"<th>speed</th></tr>{summary}</table><h2>Findings</h2>{sections}</body></html>"
    )


__all__ = ["render_html", "render_json", "render_text"]
