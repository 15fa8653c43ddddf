"""One self-contained HTML page per run: what the guards found (and what stopped the run) first, the behaviour drift
on the probe prompts, reward, dead-group and truncation curves per task (one colour per task on every chart), and
sampled rollouts at each checkpoint side by side per prompt, so a person sees behaviour change while the reward goes
up.

Sources: ``findings.jsonl`` next to the dumps (:mod:`rl_guards.rollouts.findings`), the drift records, the rollout
dumps (:class:`~rl_guards.rollouts.reader.RolloutStore`) and the newest readable
``trainer_state.json`` under the run folder (its ``log_history`` keys ``rl_guards_task/<task>/reward_mean``,
``.../dead_group_share`` (the dead-groups guard), ``.../truncated_rate`` and TRL's ``reward``, when present).
Inline CSS and SVG only: no script, no network; every text from the run is HTML-escaped (a lone surrogate shown
as ``⟨U+D800⟩``). Every file is untrusted input: one that cannot be read is named on the page and skipped.
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.metric_keys import parse_task_metric_key
from rl_guards.rollouts.findings import FindingsLog, find_findings_file, load_findings
from rl_guards.rollouts.reader import RolloutStore, has_anomaly
from rl_guards.rollouts.render import flags, fmt_number, tail, visible_whitespace
from rl_guards.rollouts.store import write_atomic
from rl_guards.rollouts.untrusted_json import UnreadableJSON, read_json

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
MAX_COLUMNS = 6  # dumps shown side by side
PROMPTS_PER_TASK = 3  # prompts per task in the side-by-side section
COMPLETIONS_PER_CELL = 2
CELL_CHARS = 1500  # completion characters per cell (the dump keeps everything)
CHART_METRICS = ("reward_mean", "dead_group_share", "dead_share", "truncated_rate")  # per-task log keys charted
# log_history metric -> chart key, where the guard's name differs from the dump statistic's
LOG_METRIC_CHART = {"dead_group_share": "dead_share"}
SPECIAL_TOKEN = re.compile(r"(&lt;\|[^|<>]{1,40}\|&gt;|&lt;/?think&gt;)")
_SURROGATE = re.compile("[\ud800-\udfff]")

STAT_COLUMNS = ["task", "group", "reward", "truncated", "think_anomalies"]  # what dump_stats reads
# float32's largest: TRL computes rewards in float32, so a logged value beyond it was inf there (or a non-finite
# reward turned into a huge finite number); charted as non-finite: left out and counted
CHART_MAX_ABS = 3.4028234663852886e38

Series = dict[str, list[tuple[float, float]]]


@dataclass
class RunData:
    """What the report shows, gathered from the dumps and the trainer state."""

    run_dir: Path
    dump_curves: dict[str, Series] = field(default_factory=dict)  # metric -> task -> [(step, value)]
    log_curves: dict[str, Series] = field(default_factory=dict)  # metric -> task -> [(step, value)]
    trainer_state: Path | None = None
    index: list[dict[str, Any]] = field(default_factory=list)
    columns: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)  # (title, rows) per dump shown
    skipped: dict[str, int] = field(default_factory=dict)  # chart metric -> non-finite values left out of it
    unreadable: list[str] = field(default_factory=list)  # files (and why) that could not be read
    notes: list[str] = field(default_factory=list)  # what a reader must know (prompts not decoded, and the fix)
    drift: list[dict[str, Any]] = field(default_factory=list)  # the drift guard's probe records, by step
    findings: FindingsLog = field(default_factory=FindingsLog)  # findings.jsonl: per kind, and the stop


def read_trainer_state(path: Path) -> dict[str, Any]:
    """A ``trainer_state.json`` as the report uses it, or :class:`UnreadableJSON` naming what is wrong: a JSON
    object whose ``global_step`` is a non-negative integer (absent: 0) and whose ``log_history`` is a list."""
    state = read_json(path)
    if not isinstance(state, dict):
        raise UnreadableJSON(f"a JSON {type(state).__name__}, not an object")
    step = state.get("global_step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UnreadableJSON(f"global_step {step!r} is no non-negative integer"[:200])
    if not isinstance(state.get("log_history", []), list):
        raise UnreadableJSON("log_history is not a list")
    return state


def find_trainer_state(run_dir: str | os.PathLike[str], unreadable: list[str] | None = None) -> Path | None:
    """The newest readable ``trainer_state.json`` under ``run_dir`` (also in ``checkpoint-*/``): highest global
    step, then newest file. The others that cannot be read are added to ``unreadable`` (path and why)."""
    best: tuple[int, float] | None = None
    found = None
    for path in Path(run_dir).rglob("trainer_state.json"):
        try:
            step = read_trainer_state(path).get("global_step", 0)
            key = (step, path.stat().st_mtime)
        except (UnreadableJSON, OSError) as exc:  # crafted or damaged: named, and the next newest is used
            if unreadable is not None:
                unreadable.append(f"{path} ({exc})")
            continue
        if best is None or key > best:
            best, found = key, path
    return found


def _number(value: Any) -> float | None:
    """A JSON number as a float (inf for an integer beyond float's range); None for anything else or NaN."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of 400 digits: as good as inf for a chart
        return math.inf if value > 0 else -math.inf
    return None if math.isnan(number) else number


def log_history_curves(state_path: Path, skipped: dict[str, int] | None = None) -> dict[str, Series]:
    """metric -> task -> [(step, value)] from ``log_history``; TRL's overall ``reward`` as task ``(all)``.

    Non-finite values (a reward of 1e300 is inf in float32) are left out of the charts and counted per chart
    metric in ``skipped``; entries that are no mapping with a finite step are skipped. :class:`UnreadableJSON`
    when the file is no trainer state (:func:`read_trainer_state`).
    """
    history = read_trainer_state(state_path).get("log_history", [])
    curves: dict[str, Series] = {}
    for entry in history:
        step = _number(entry.get("step")) if isinstance(entry, dict) else None
        if step is None or not math.isfinite(step):
            continue
        for key, raw in entry.items():
            value = _number(raw)
            if value is None:
                continue
            parsed = parse_task_metric_key(key)
            if parsed is not None and parsed[1] in CHART_METRICS:
                task, metric = str(parsed[0]), LOG_METRIC_CHART.get(parsed[1], parsed[1])
            elif key == "reward":
                metric, task = "reward_mean", "(all, TRL)"
            else:
                continue
            if not _chartable(value):
                if skipped is not None:
                    skipped[metric] = skipped.get(metric, 0) + 1
                continue
            curves.setdefault(metric, {}).setdefault(task, []).append((step, value))
    return curves


def dump_stats(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per task: reward_mean (scored rows), dead_share (groups whose rewards are all equal), truncated_rate,
    anomaly_rate."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    out: dict[str, dict[str, float]] = {}
    for task, task_rows in by_task.items():
        stats: dict[str, float] = {}
        rewards = [r["reward"] for r in task_rows if _finite(r.get("reward"))]
        if rewards:
            stats["reward_mean"] = sum(rewards) / len(rewards)
        groups: dict[int, list[float]] = {}
        for r in task_rows:
            if _finite(r.get("reward")) and isinstance(r.get("group"), int):
                groups.setdefault(int(r["group"]), []).append(float(r["reward"]))
        full = [g for g in groups.values() if len(g) > 1]
        if full:
            stats["dead_share"] = sum(1 for g in full if max(g) - min(g) < 1e-9) / len(full)
        stats["truncated_rate"] = sum(1 for r in task_rows if r.get("truncated")) / len(task_rows)
        stats["anomaly_rate"] = sum(1 for r in task_rows if has_anomaly(r)) / len(task_rows)
        out[task] = stats
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _chartable(value: float) -> bool:
    """Finite and within float32's range (see :data:`CHART_MAX_ABS`)."""
    return math.isfinite(value) and abs(value) <= CHART_MAX_ABS


def collect(run_dir: str | os.PathLike[str]) -> RunData:
    """Read everything the report needs; a file that cannot be read is named on the page, never a crash."""
    data = RunData(run_dir=Path(run_dir))
    try:
        data.findings = load_findings(find_findings_file(run_dir))
    except OSError as exc:  # an unreadable file: named on the page
        data.unreadable.append(f"findings.jsonl ({type(exc).__name__}: {str(exc)[:160]})")
    if data.findings.bad_lines:
        data.unreadable.append(f"{data.findings.path} ({data.findings.bad_lines} unreadable line(s) skipped)")
    data.trainer_state = find_trainer_state(run_dir, data.unreadable)
    if data.trainer_state is not None:
        try:
            data.log_curves = log_history_curves(data.trainer_state, data.skipped)
        except Exception as exc:  # changed since it was found: the dumps still make a report
            data.unreadable.append(f"{data.trainer_state} ({type(exc).__name__}: {str(exc)[:160]})")
            data.log_curves = {}
    try:
        from rl_guards.rollouts.drift_records import find_drift_dir, load_records

        data.drift, bad = load_records(find_drift_dir(run_dir))
        data.unreadable += [f"drift record {name}" for name in bad]
    except FileNotFoundError:
        data.drift = []
    try:
        store: RolloutStore | None = RolloutStore(run_dir)
    except FileNotFoundError:
        store = None
    if store is None:
        return data
    data.index = store.index()
    data.unreadable += store.unreadable()
    readable = []
    for entry in data.index:  # only the columns the curves need: a long run has many large dumps
        try:
            stats_by_task = dump_stats(store.load(entry["step"], STAT_COLUMNS))
        except Exception as exc:  # a corrupt data page behind a valid footer
            data.unreadable.append(f"{entry['file']} ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        readable.append(entry)
        for task, stats in stats_by_task.items():
            for metric, value in stats.items():
                data.dump_curves.setdefault(metric, {}).setdefault(task, []).append((float(entry["step"]), value))
    shown = [e for e in readable if e.get("checkpoint") is not None] or readable
    for entry in _spread(shown, MAX_COLUMNS):
        title = f"step {entry['step']}"
        if entry.get("checkpoint") is not None:  # one numbering (TRL's): checkpoint-k holds step k's batch
            same = entry["checkpoint"] == entry["step"]
            title = f"checkpoint-{entry['checkpoint']}" + ("" if same else f" (step {entry['step']})")
        try:
            data.columns.append((title, store.load(entry["step"])))
        except Exception as exc:
            data.unreadable.append(f"{entry['file']} ({type(exc).__name__}: {str(exc)[:160]})")
    data.notes += [note] if (note := store.decoder_note()) else []
    return data


def _spread(items: list[Any], k: int) -> list[Any]:
    """At most ``k`` items, evenly spaced, first and last included."""
    if len(items) <= k:
        return items
    picks = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in picks]


# ----- SVG ---------------------------------------------------------------------------------------------------
def _nice_ticks(lo: float, hi: float, count: int = 5, *, integer: bool = False) -> list[float]:
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, round(step))
    start = math.floor(lo / step) * step
    ticks = [round(start, 10)]
    # Up to the first tick at or above ``hi``: the axis must hold the largest value, not stop below it.
    while ticks[-1] < hi - step * 1e-6:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def task_colours(names: Any) -> dict[str, str]:
    """One colour per series name (task), the same on every chart of the page: names sorted, palette in turn."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(names)))}


def svg_line_chart(
    series: Series,
    title: str,
    width: int = 520,
    height: int = 260,
    *,
    share: bool = False,
    colours: dict[str, str] | None = None,
) -> str:
    """An inline SVG line chart (one polyline and marker set per series, legend on the right). ``share``: the
    values are fractions, so the y axis starts at 0. ``colours``: series name -> colour, shared by the page's
    charts (default: :func:`task_colours` of this chart's series)."""
    esc = html.escape
    series = {name: [p for p in values if _chartable(p[0]) and _chartable(p[1])] for name, values in series.items()}
    points = [p for values in series.values() for p in values]
    if not points:
        return f'<div class="empty">{esc(title)}: no data</div>'
    left, right, top, bottom = 52, 150, 28, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi - x_lo < 1e-12:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_min, y_max = min(ys), max(ys)
    if share:
        y_min, y_max = 0.0, max(y_max, 0.05)
    y_ticks = _nice_ticks(y_min, y_max)
    y_lo, y_hi = y_ticks[0], y_ticks[-1]
    if y_hi - y_lo < 1e-12:
        y_hi = y_lo + 1

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        f' role="img" aria-label="{esc(title)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="16" class="ct">{esc(title)}</text>',
    ]
    for t in y_ticks:
        y = sy(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tk">{t + 0.0:g}</text>')
    for t in _nice_ticks(x_lo, x_hi, 6, integer=True):
        if x_lo - 1e-9 <= t <= x_hi + 1e-9:
            x = sx(t)
            parts.append(f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" y2="{top + plot_h + 4}" stroke="#555"/>')
            parts.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" class="tk">{t:g}</text>')
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>'
        f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle" class="tk">step</text>'
    )
    colours = colours or task_colours(series)
    for i, (name, values) in enumerate(sorted(series.items())):
        color = colours.get(name, PALETTE[i % len(PALETTE)])
        values = sorted(values)
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in values)
        if len(values) > 1:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in values:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"><title>')
            parts.append(f"{esc(name)} step {x:g}: {y:.4g}</title></circle>")
        ly = top + 12 + i * 18
        parts.append(f'<rect x="{left + plot_w + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{left + plot_w + 30}" y="{ly + 1}" class="lg">{esc(tail(name, 18))}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ----- HTML --------------------------------------------------------------------------------------------------
CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px} .meta{color:#666;font-size:13px}
.charts{display:flex;flex-wrap:wrap;gap:12px} .charts svg{border:1px solid #ddd;background:#fff}
.ct{font-size:13px;font-weight:600;fill:#222} .tk{font-size:11px;fill:#555} .lg{font-size:11px;fill:#222}
table{border-collapse:collapse;font-size:13px;background:#fff} td,th{border:1px solid #ddd;padding:4px 8px;
vertical-align:top;text-align:left} th{background:#f0f0f0}
.grid td{min-width:260px;max-width:420px} .prompt{background:#f6f8fa}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;margin:4px 0;font-family:Menlo,Consolas,monospace}
.tok{color:#a0008f;background:#fbe9f8;border-radius:3px} .hdr{font-size:12px;color:#333;margin-top:6px}
.bad{color:#b00020;font-weight:600} .empty{color:#888;font-style:italic;padding:8px}
.cut{color:#888;font-size:11px} .info{color:#666}
.stop{background:#fde7ea;border:2px solid #b00020;border-radius:4px;padding:10px 14px;margin:12px 0}
.stop h2{border:none;margin:0 0 6px;color:#b00020} .sev-error{background:#f8c9cf} .sev-warning{background:#ffe8a8}
.sev-info{background:#e3ecf7} .findings td.msg{max-width:760px}
"""


def _pre(text: str) -> str:
    escaped = html.escape(visible_whitespace(text))
    return "<pre>" + SPECIAL_TOKEN.sub(r'<span class="tok">\1</span>', escaped) + "</pre>"


def _rollout_cell(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<span class="empty">prompt not in this dump</span>'
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    mean = sum(rewards) / len(rewards) if rewards else None
    parts = [f'<div class="hdr">{len(rows)} rollouts, mean reward <b>{html.escape(fmt_number(mean))}</b></div>']
    for row in rows[:COMPLETIONS_PER_CELL]:
        flag_html = "".join(
            f' <span class="{"bad" if _is_bad(mark) else "info"}">{html.escape(mark)}</span>' for mark in flags(row)
        )
        parts.append(
            f'<div class="hdr">group {row.get("group")} · reward {html.escape(fmt_number(row.get("reward")))} · '
            f"adv {html.escape(fmt_number(row.get('advantage'), signed=True))}{flag_html}</div>"
        )
        text = row.get("completion") or ""
        parts.append(_pre(text[:CELL_CHARS]))
        if len(text) > CELL_CHARS:
            parts.append(f'<div class="cut">… {len(text) - CELL_CHARS} more characters in the dump</div>')
    return "".join(parts)


def _is_bad(mark: str) -> bool:
    return mark == "TRUNCATED" or mark.startswith("anomalies=") or mark == "think=anomalous"


def _side_by_side(columns: list[tuple[str, list[dict[str, Any]]]]) -> str:
    if not columns:
        return '<div class="empty">no rollout dumps in this run</div>'
    indexed = []  # per column: task -> prompt -> rows
    for _, rows in columns:
        per_task: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for row in rows:
            per_task.setdefault(row["task"], {}).setdefault(row.get("prompt") or "", []).append(row)
        indexed.append(per_task)
    tasks = sorted({t for per_task in indexed for t in per_task})
    out = []
    head = "".join(f"<th>{html.escape(title)}</th>" for title, _ in columns)
    for task in tasks:
        presence: dict[str, int] = {}
        order: list[str] = []
        for per_task in indexed:
            for prompt in per_task.get(task, {}):
                if prompt not in presence:
                    order.append(prompt)
                presence[prompt] = presence.get(prompt, 0) + 1
        shared = sorted((p for p in order if presence[p] > 1), key=lambda p: (-presence[p], order.index(p)))
        out.append(f"<h3>task {html.escape(task)}</h3>")
        if shared:
            out.append(f'<table class="grid"><tr><th>prompt (tail)</th>{head}</tr>')
            for prompt in shared[:PROMPTS_PER_TASK]:
                cells = "".join(f"<td>{_rollout_cell(pt.get(task, {}).get(prompt, []))}</td>" for pt in indexed)
                out.append(f'<tr><td class="prompt">{_pre(tail(prompt, 400))}</td>{cells}</tr>')
            out.append("</table>")
        else:
            out.append(
                '<div class="meta">No prompt of this task appears in two of these dumps; showing the first '
                "prompts of each dump instead.</div>"
            )
            out.append(f'<table class="grid"><tr>{head}</tr><tr>')
            for pt in indexed:
                prompts = list(pt.get(task, {}).items())[:PROMPTS_PER_TASK]
                cell = "".join(
                    f'<div class="prompt">{_pre(tail(p, 200))}</div>{_rollout_cell(rows)}' for p, rows in prompts
                )
                out.append(f"<td>{cell or '<span class=empty>no rows</span>'}</td>")
            out.append("</tr></table>")
    return "".join(out)


def _index_table(index: list[dict[str, Any]]) -> str:
    if not index:
        return '<div class="empty">no rollout dumps found</div>'
    rows = "".join(
        f"<tr><td>{e['step']}</td><td>{e['rows']}</td><td>{html.escape(e['reason'])}</td>"
        f"<td>{'' if e.get('checkpoint') is None else e['checkpoint']}</td>"
        f"<td>{html.escape(', '.join(e['tasks']))}</td><td>{html.escape(e['file'])}</td></tr>"
        for e in index
    )
    head = "".join(f"<th>{name}</th>" for name in ("step", "rows", "reason", "checkpoint", "tasks", "file"))
    return f"<table><tr>{head}</tr>{rows}</table>"


CHARTS = (
    ("reward_mean", "reward (mean per task)"),
    ("dead_share", "dead-group share (all rewards equal)"),
    ("truncated_rate", "truncated share"),
    ("anomaly_rate", "think-markup anomaly share"),
)


def page_colours(data: RunData) -> dict[str, str]:
    """Series name (task) -> colour, one for every chart of the page."""
    curves = [*data.log_curves.values(), *data.dump_curves.values()]
    return task_colours(name for series in curves for name in series)


def render_html(data: RunData) -> str:
    """The whole page."""
    esc = html.escape
    colours = page_colours(data)
    charts_log = "".join(
        svg_line_chart(data.log_curves[m], f"{title} — training log", share=m != "reward_mean", colours=colours)
        for m, title in CHARTS
        if data.log_curves.get(m)
    )
    charts_dump = "".join(
        svg_line_chart(data.dump_curves[m], f"{title} — dumps", share=m != "reward_mean", colours=colours)
        for m, title in CHARTS
        if data.dump_curves.get(m)
    )
    stop = data.findings.stop
    if data.trainer_state:
        state = esc(str(data.trainer_state))
    elif stop is not None:
        state = f"none (the run stopped at step {esc(str(stop['step']))}, before its first checkpoint)"
    else:
        state = "none found"
    notes = "".join(
        f'<div class="meta">{esc(title)}: {n} non-finite value(s) (inf) left out of the chart</div>'
        for m, title in CHARTS
        if (n := data.skipped.get(m))
    )
    notes += "".join(f'<div class="meta">skipped unreadable file: {esc(item)}</div>' for item in data.unreadable)
    notes += "".join(f'<div class="meta bad">{esc(note)}</div>' for note in data.notes)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>rl_guards report — {esc(data.run_dir.name)}</title><style>{CSS}</style></head><body>"
        f"<h1>rl_guards report: {esc(str(data.run_dir))}</h1>"
        f'<div class="meta">trainer state: {state} · {len(data.index)} rollout dumps</div>{notes}'
        f"{_findings_section(data.findings)}"
        f"{_drift_section(data.drift)}"
        "<h2>Curves from the training log</h2>"
        f'<div class="charts">{charts_log or "<div class=empty>no rl_guards or reward keys in log_history</div>"}</div>'
        "<h2>Curves from the rollout dumps</h2>"
        f'<div class="charts">{charts_dump or "<div class=empty>no rollout dumps</div>"}</div>'
        "<h2>Rollouts side by side</h2>"
        '<div class="meta">Same rendered prompt across dumps (checkpoint dumps when there are any). Whitespace is '
        "visible: ↵ line break, ⇥ tab, · leading/trailing space; special tokens highlighted.</div>"
        f"{_side_by_side(data.columns)}"
        f"<h2>Dumps</h2>{_index_table(data.index)}"
        "</body></html>"
    )


FINDING_CHARS = 1200  # message characters shown per finding (the file keeps all)


def _findings_section(log: FindingsLog) -> str:
    """The stop reason (when a guard stopped the run), then one row per finding kind, most severe first."""
    esc = html.escape
    parts = []
    if log.stop is not None:
        stop = log.stop
        parts.append(
            f'<div class="stop" id="stop"><h2>Stopped by {esc(stop["guard"])}{"/" if stop["kind"] else ""}'
            f'{esc(stop["kind"])} at step '
            f"{esc(str(stop['step']))}</h2>{_pre(stop['message'][:FINDING_CHARS])}</div>"
        )
    parts.append('<h2 id="findings">Findings</h2>')
    if log.path is None:
        parts.append('<div class="empty">no findings (no findings.jsonl next to the dumps: the guards found nothing, '
                     "or the run was written by an rl_guards that did not record findings)</div>")  # fmt: skip
        return "".join(parts)
    if not log.findings:
        parts.append('<div class="empty">no findings</div>')
        return "".join(parts)
    head = "".join(f"<th>{name}</th>" for name in ("severity", "guard/kind", "first step", "count", "message"))
    rows = []
    stopped_by = (log.stop["guard"], log.stop["kind"]) if log.stop is not None else None
    for f in log.findings:
        message = f["message"] or "(message not recorded)"
        if (f["guard"], f["kind"]) == stopped_by:  # its whole message is in the stop box above
            message = message.strip().splitlines()[0] + " (the full message is in the stop box above)"
        cut = len(message) > FINDING_CHARS
        more = f'<div class="cut">… {len(message) - FINDING_CHARS} more characters in findings.jsonl</div>'
        rows.append(
            f'<tr class="sev-{esc(f["severity"])}"><td>{esc(f["severity"])}</td><td>{esc(f["guard"])}/'
            f"{esc(f['kind'])}</td><td>{esc(fmt_value(f['first_step']))}</td><td>{esc(fmt_value(f['count']))}</td>"
            f'<td class="msg">{_pre(message[:FINDING_CHARS])}{more if cut else ""}</td></tr>'
        )
    parts.append(f'<table class="findings"><tr>{head}</tr>{"".join(rows)}</table>')
    return "".join(parts)


def _drift_section(records: list[dict[str, Any]]) -> str:
    """Behaviour of the fixed probe prompts per checkpoint, the changes since the baseline, completions side by
    side (empty when the run has no drift records)."""
    from rl_guards.rollouts.drift_records import TABLE_STATS, changes, probe_pair, record_notes, stat_value, stats_of

    if not records:
        return ""
    esc = html.escape
    parts = [
        "<h2>Behaviour drift on the probe prompts</h2>",
        '<div class="meta">The same prompts generated at step 0 (baseline) and at every checkpoint.</div>',
        *(f'<div class="meta">{esc(note)}</div>' for note in record_notes(records)),
    ]
    tasks = sorted({t for r in records for t in r.get("stats", {})})
    for task in tasks:
        head = "".join(f"<th>{esc(label)}</th>" for _, label in TABLE_STATS)
        body = ""
        for record in records:
            stats = stats_of(record, task)
            if stats is None:
                continue
            alarm = any(a.get("task") == task for a in record.get("alarms", []))
            cells = "".join(f"<td>{esc(fmt_value(stat_value(record, task, key)))}</td>" for key, _ in TABLE_STATS)
            body += f"<tr{' class=bad' if alarm else ''}><td>{esc(str(record['step']))}</td>{cells}</tr>"
        parts.append(f"<h3>task {esc(task)}</h3><table><tr><th>step</th>{head}</tr>{body}</table>")
    for task, step, drifts in changes(records):
        if not drifts:
            continue
        items = "".join(f"<li>{esc(d.describe())}</li>" for d in drifts)
        parts.append(f"<h3>task {esc(task)}: changes since the baseline (step {step})</h3><ul>{items}</ul>")
        pair = probe_pair(records, task)
        if pair is not None:
            before, after = pair
            parts.append(
                f'<div class="meta">probe prompt: {esc(str(before.get("prompt", ""))[-300:])}</div>'
                "<table><tr><th>baseline</th><th>step " + esc(str(step)) + "</th></tr><tr>"
                f"<td>{_pre(str(before.get('completion', '')))}</td><td>{_pre(str(after.get('completion', '')))}</td>"
                "</tr></table>"
            )
    return "".join(parts)


def fmt_value(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def write_report(
    run_dir: str | os.PathLike[str], output: str | os.PathLike[str] | None = None, data: RunData | None = None
) -> Path:
    """Write the report of ``run_dir`` (default ``<run_dir>/rl_guards_report.html``) and return its path."""
    data = data if data is not None else collect(run_dir)
    path = Path(output) if output else Path(run_dir) / "rl_guards_report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    page = printable_page(render_html(data))
    write_atomic(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))  # no temp file left when it fails
    return path


def printable_page(page: str) -> str:
    """``page`` with each lone surrogate (a task name or message decoded from bad bytes, a crafted JSON escape)
    shown as ``⟨U+D800⟩``, as the terminal views show it: UTF-8 cannot encode it, so the page could not be written."""
    return _SURROGATE.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", page)
