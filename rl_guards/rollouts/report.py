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

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.metric_keys import parse_task_metric_key
from rl_guards.rollouts.findings import FindingsLog, find_findings_file, load_findings
from rl_guards.rollouts.html import render_macro, render_page
from rl_guards.rollouts.reader import RolloutStore, has_anomaly
from rl_guards.rollouts.render import flags, fmt_number, tail
from rl_guards.rollouts.store import write_atomic
from rl_guards.rollouts.untrusted_json import UnreadableJSON, read_json

MAX_COLUMNS = 6  # dumps shown side by side
PROMPTS_PER_TASK = 3  # prompts per task in the side-by-side section
COMPLETIONS_PER_CELL = 2
CELL_CHARS = 1500  # completion characters per cell (the dump keeps everything)
CHART_METRICS = ("reward_mean", "dead_group_share", "dead_share", "truncated_rate")  # per-task log keys charted
# log_history metric -> chart key, where the guard's name differs from the dump statistic's
LOG_METRIC_CHART = {"dead_group_share": "dead_share"}
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


def not_a_run(data: RunData) -> str | None:
    """What a run folder would have and this one lacks (None: a run, something to report): a ``trainer_state.json``
    (the trainer's), rollout dumps, ``findings.jsonl``, drift records (rl_guards')."""
    from rl_guards.rollouts.store import default_rollouts_dir

    found = data.trainer_state is not None or data.index or data.findings.path is not None or data.drift
    if found or data.unreadable:  # an unreadable file of a run is still a run: the page names it
        return None
    rollouts = default_rollouts_dir(data.run_dir)
    return (
        f"no trainer_state.json (in it or a checkpoint-*/ folder), no rollout dumps or findings.jsonl (in it, "
        f"{rollouts} or {rollouts.parent}), no drift records ({rollouts / 'drift'}). Pass the trainer's output_dir "
        "(or the rollouts folder) of a run made with rl_guards."
    )


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


# A categorical palette (Tableau 20's dark shades first): each series name picks its colour by a stable hash, so a
# task keeps its colour from one report to the next; two names on one page that hash to the same colour take the next
# free one, in name order.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip


def name_colour(name: str) -> str:
    """The colour of a series name on its own: the same on every page (a stable hash of the name)."""
    digest = hashlib.blake2s(name.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return PALETTE[int.from_bytes(digest, "big") % len(PALETTE)]


def task_colours(names: Any) -> dict[str, str]:
    """One colour per series name (task), the same on every chart of the page and from one report to the next
    (:func:`name_colour`); a name whose colour another name of the page already has takes the next free one."""
    taken: dict[str, str] = {}
    for name in sorted(set(names)):
        start = PALETTE.index(name_colour(name))
        free = [PALETTE[(start + i) % len(PALETTE)] for i in range(len(PALETTE))]
        used = set(taken.values())
        taken[name] = next((c for c in free if c not in used), free[0])
    return taken


def chart_geometry(
    series: Series,
    title: str,
    width: int = 520,
    height: int = 260,
    *,
    share: bool = False,
    colours: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What the ``chart`` macro draws: axes, ticks, one polyline and marker set per series, the legend. ``share``:
    the values are fractions, so the y axis starts at 0. ``colours``: series name -> colour, shared by the page's
    charts (default: :func:`task_colours` of this chart's series)."""
    series = {name: [p for p in values if _chartable(p[0]) and _chartable(p[1])] for name, values in series.items()}
    points = [p for values in series.values() for p in values]
    chart: dict[str, Any] = {"title": title, "width": width, "height": height, "series": []}
    if not points:
        return chart
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

    colours = colours or task_colours(series)
    chart.update(
        left=left, top=top, plot_w=plot_w, plot_h=plot_h,
        y_ticks=[{"y": sy(t), "label": f"{t + 0.0:g}"} for t in y_ticks],
        x_ticks=[
            {"x": sx(t), "label": f"{t:g}"}
            for t in _nice_ticks(x_lo, x_hi, 6, integer=True)
            if x_lo - 1e-9 <= t <= x_hi + 1e-9
        ],
        series=[
            {
                "name": name,
                "legend": tail(name, 18),
                "colour": colours.get(name) or name_colour(name),
                "legend_y": top + 12 + i * 18,
                "points": [{"x": sx(x), "y": sy(y), "label": f"{x:g}: {y:.4g}"} for x, y in sorted(values)],
            }
            for i, (name, values) in enumerate(sorted(series.items()))
        ],
    )  # fmt: skip
    return chart


def svg_line_chart(series: Series, title: str, width: int = 520, height: int = 260, **kwargs: Any) -> str:
    """An inline SVG line chart (:func:`chart_geometry` drawn by the ``chart`` macro)."""
    return render_macro("chart", chart_geometry(series, title, width, height, **kwargs))


# ----- HTML --------------------------------------------------------------------------------------------------
def _is_bad(mark: str) -> bool:
    return mark == "TRUNCATED" or mark.startswith("anomalies=") or mark == "think=anomalous"


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One prompt's rollouts in one dump: how many, their mean reward, the first few with their flags."""
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    mean = sum(rewards) / len(rewards) if rewards else None
    shown = []
    for row in rows[:COMPLETIONS_PER_CELL]:
        text = row.get("completion") or ""
        shown.append(
            {
                "group": row.get("group"),
                "reward": fmt_number(row.get("reward")),
                "advantage": fmt_number(row.get("advantage"), signed=True),
                "flags": [{"text": mark, "bad": _is_bad(mark)} for mark in flags(row)],
                "completion": text[:CELL_CHARS],
                "cut": max(0, len(text) - CELL_CHARS),
            }
        )
    return {"rows": len(rows), "mean": fmt_number(mean), "shown": shown}


def _grid(columns: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per task: the prompts two or more dumps share, each a row of cells (one per dump); else each dump's first."""
    indexed = []  # per column: task -> prompt -> rows
    for _, rows in columns:
        per_task: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for row in rows:
            per_task.setdefault(row["task"], {}).setdefault(row.get("prompt") or "", []).append(row)
        indexed.append(per_task)
    out = []
    for task in sorted({t for per_task in indexed for t in per_task}):
        presence: dict[str, int] = {}
        order: list[str] = []
        for per_task in indexed:
            for prompt in per_task.get(task, {}):
                if prompt not in presence:
                    order.append(prompt)
                presence[prompt] = presence.get(prompt, 0) + 1
        shared = sorted((p for p in order if presence[p] > 1), key=lambda p: (-presence[p], order.index(p)))
        rows = [
            {"prompt": tail(prompt, 400), "cells": [_cell(pt.get(task, {}).get(prompt, [])) for pt in indexed]}
            for prompt in shared[:PROMPTS_PER_TASK]
        ]
        first = [
            [
                {"prompt": tail(p, 200), "cell": _cell(found)}
                for p, found in list(pt.get(task, {}).items())[:PROMPTS_PER_TASK]
            ]
            for pt in indexed
        ]
        out.append({"task": task, "shared": bool(shared), "rows": rows, "first": first})
    return out


CHARTS = (
    ("reward_mean", "reward (mean per task)"),
    ("dead_share", "dead-group share (all rewards equal)"),
    ("truncated_rate", "truncated share"),
    ("anomaly_rate", "think-markup anomaly share"),
)
FINDING_CHARS = 1200  # message characters shown per finding (the file keeps all)


def page_colours(data: RunData) -> dict[str, str]:
    """Series name (task) -> colour, one for every chart of the page."""
    curves = [*data.log_curves.values(), *data.dump_curves.values()]
    return task_colours(name for series in curves for name in series)


def page_context(data: RunData) -> dict[str, Any]:
    """Everything ``report.html.j2`` shows, as plain values (the template escapes every text)."""
    colours = page_colours(data)
    stop = data.findings.stop
    if data.trainer_state:
        state = str(data.trainer_state)
    elif stop is not None:
        state = f"none (the run stopped at step {stop['step']}, before its first checkpoint)"
    else:
        state = "none found"
    return {
        "run_name": data.run_dir.name,
        "run_dir": str(data.run_dir),
        "state": state,
        "skipped_notes": [
            f"{title}: {n} non-finite value(s) (inf) left out of the chart"
            for m, title in CHARTS
            if (n := data.skipped.get(m))
        ],
        "unreadable": data.unreadable,
        "notes": data.notes,
        "stop": _stop(data.findings),
        "findings_file": data.findings.path is not None,
        "findings": _findings(data.findings),
        "drift": _drift(data.drift),
        "charts_log": [
            chart_geometry(data.log_curves[m], f"{title} — training log", share=m != "reward_mean", colours=colours)
            for m, title in CHARTS
            if data.log_curves.get(m)
        ],
        "charts_dump": [
            chart_geometry(data.dump_curves[m], f"{title} — dumps", share=m != "reward_mean", colours=colours)
            for m, title in CHARTS
            if data.dump_curves.get(m)
        ],
        "columns": [title for title, _ in data.columns],
        "grid": _grid(data.columns),
        "dumps": [_dump_entry(e) for e in data.index],
    }


def _dump_entry(e: dict[str, Any]) -> dict[str, Any]:
    checkpoint = "" if e.get("checkpoint") is None else e["checkpoint"]
    return {
        **{k: e[k] for k in ("step", "rows", "reason", "file")},
        "checkpoint": checkpoint,
        "tasks": ", ".join(e["tasks"]),
    }


def render_html(data: RunData) -> str:
    """The whole page."""
    return render_page("report.html.j2", **page_context(data))


def _stop(log: FindingsLog) -> dict[str, Any] | None:
    """The stop box: the stop record, the finding whose error stopped the run (one source: the session's stop)."""
    if log.stop is None:
        return None
    stop = log.stop
    message = stop["message"] or "(message not recorded)"
    return {
        "name": f"{stop['guard']}/{stop['kind']}" if stop["kind"] else stop["guard"],
        "step": stop["step"],
        "message": message[:FINDING_CHARS],
        "cut": max(0, len(message) - FINDING_CHARS),
    }


def _findings(log: FindingsLog) -> list[dict[str, Any]]:
    """One row per finding kind, most severe first; the stopping kind's message points at the stop box."""
    stopped_by = (log.stop["guard"], log.stop["kind"]) if log.stop is not None else None
    rows = []
    for f in log.findings:
        message = f["message"] or "(message not recorded)"
        if (f["guard"], f["kind"]) == stopped_by:  # its whole message is in the stop box above
            message = message.strip().splitlines()[0] + " (the full message is in the stop box above)"
        rows.append(
            {
                "severity": f["severity"],
                "name": f"{f['guard']}/{f['kind']}",
                "first_step": fmt_value(f["first_step"]),
                "count": fmt_value(f["count"]),
                "message": message[:FINDING_CHARS],
                "cut": max(0, len(message) - FINDING_CHARS),
            }
        )
    return rows


def _drift(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The drift section, with the same table (alarm column included) and verdict as ``rl-guards drift``."""
    from rl_guards.rollouts.drift_records import TABLE_HEADER, changes, probe_pair, record_notes, task_rows, verdict

    if not records:
        return None
    level, sentence = verdict(records)
    tasks = sorted({t for r in records for t in r.get("stats", {})})
    moved = []
    for task, step, drifts in changes(records):
        if not drifts:
            continue
        pair = probe_pair(records, task)
        moved.append(
            {
                "task": task,
                "step": step,
                "drifts": [d.describe() for d in drifts],
                "pair": None
                if pair is None
                else {
                    "prompt": str(pair[0].get("prompt", ""))[-300:],
                    "before": str(pair[0].get("completion", "")),
                    "after": str(pair[1].get("completion", "")),
                },
            }
        )
    return {
        "notes": record_notes(records),
        "level": level,
        "verdict": sentence,
        "header": TABLE_HEADER,
        "tasks": [{"name": task, "rows": task_rows(records, task)} for task in tasks],
        "changes": moved,
    }


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
