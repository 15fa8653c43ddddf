"""``rl-guards drift RUN``: the behaviour statistics of the fixed probe prompts at each checkpoint, the biggest
changes since the baseline, and one probe prompt's completions at the baseline and now, side by side."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from rl_guards.rollouts.drift_records import (
    TABLE_STATS,
    changes,
    find_drift_dir,
    load_records,
    probe_pair,
    record_notes,
    stat_value,
    stats_of,
)
from rl_guards.rollouts.render import fmt_number, printable, side_by_side, visible_whitespace


def register(subparsers: Any) -> None:
    """Add the ``drift`` subcommand."""
    parser = subparsers.add_parser(
        "drift", help="behaviour of the fixed probe prompts per checkpoint, biggest changes, completions side by side"
    )
    parser.add_argument("run_dir", help="trainer output_dir, the rollouts folder, or its drift folder")
    parser.add_argument("--task", default=None, help="one task only")
    parser.add_argument("--width", type=int, default=0, help="total width (default: the terminal's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        folder = find_drift_dir(args.run_dir)
    except FileNotFoundError as exc:
        print(f"rl-guards drift: {printable(exc)}", file=sys.stderr)
        return 2
    records, bad = load_records(folder)
    for name in bad:
        print(f"rl-guards drift: skipped unreadable record {printable(name)}", file=sys.stderr)
    if not records:
        print(f"rl-guards drift: no readable record in {printable(folder)}", file=sys.stderr)
        return 2
    for line in record_notes(records):
        print(f"rl-guards drift: {line}", file=sys.stderr)
    tasks = sorted({t for r in records for t in r.get("stats", {})})
    if args.task:
        tasks = [t for t in tasks if t == args.task]
    header = ["step", *(label for _, label in TABLE_STATS), "alarm"]
    for task in tasks:
        print(f"task {printable(task)}: {len([p for p in records[0].get('probes', []) if p.get('task') == task])} "
              f"probe prompt(s), from the {printable(records[0].get('source', '?'))} set")  # fmt: skip
        rows = []
        for record in records:
            stats = stats_of(record, task)
            if stats is None:
                continue
            alarm = any(a.get("task") == task for a in record.get("alarms", []))
            values = [fmt_number(stat_value(record, task, key)) for key, _ in TABLE_STATS]
            rows.append(
                [str(record["step"]) + (" (baseline)" if record is records[0] else ""), *values, "yes" if alarm else ""]
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  " + "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
        for row in rows:
            print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    found = [c for c in changes(records) if c[0] in tasks]
    moved = [c for c in found if c[2]]
    print()
    if not moved:
        print(
            f"no statistic moved beyond its threshold between step {records[0]['step']} and step {records[-1]['step']}"
        )
        return 0
    print(f"biggest changes since the baseline (step {records[0]['step']} -> {records[-1]['step']}):")
    for task, _, drifts in moved:
        for d in drifts:
            print(f"  {printable(task)}: {d.describe()}")
    width = args.width or shutil.get_terminal_size((160, 40)).columns
    col = max(24, (width - 3) // 2)
    for task, step, _ in moved[:2]:
        pair = probe_pair(records, task)
        if pair is None:
            continue
        before, after = pair
        print("═" * min(width, 2 * col + 3))
        print(f"task {printable(task)}, probe prompt: ...{printable(str(before.get('prompt', ''))[-200:])}")
        left = f"baseline (step {records[0]['step']})\n" + visible_whitespace(str(before.get("completion", "")))
        right = f"step {step}\n" + visible_whitespace(str(after.get("completion", "")))
        print(side_by_side(left, right, col))
    return 0
