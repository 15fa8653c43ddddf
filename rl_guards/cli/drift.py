"""``rl-guards drift RUN``: the behaviour statistics of the fixed probe prompts at each checkpoint, the biggest
changes since the baseline, and one probe prompt's completions at the baseline and now, side by side."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rl_guards.console import Column, is_terminal, print_table, side_by_side, width_of
from rl_guards.rollouts.drift_records import (
    TABLE_HEADER,
    changes,
    find_drift_dir,
    load_records,
    probe_pair,
    record_notes,
    task_rows,
    verdict,
)
from rl_guards.rollouts.render import printable, visible_whitespace


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
    for task in tasks:
        probes = len([p for p in records[0].get("probes", []) if p.get("task") == task])
        source = printable(records[0].get("source", "?"))
        title = f"task {printable(task)}: {probes} probe prompt(s), from the {source} set"
        rows = [[r["step"], *r["values"], "yes" if r["alarm"] else ""] for r in task_rows(records, task)]
        print_table([Column(h, "right") for h in TABLE_HEADER], rows, title=title)
    level, sentence = verdict(records, tasks)
    print(f"\nverdict: {level}: {sentence}")
    moved = [c for c in changes(records) if c[0] in tasks and c[2]]
    if not moved:
        return 0
    print(f"biggest changes since the baseline (step {records[0]['step']} -> {records[-1]['step']}):")
    for task, _, drifts in moved:
        for d in drifts:
            print(f"  {printable(task)}: {d.describe()}")
    width = args.width or width_of()
    for task, step, _ in moved[:2]:
        pair = probe_pair(records, task)
        if pair is None:
            continue
        before, after = pair
        print(f"\ntask {printable(task)}, probe prompt: ...{printable(str(before.get('prompt', ''))[-200:])}")
        left = visible_whitespace(str(before.get("completion", "")))
        right = visible_whitespace(str(after.get("completion", "")))
        titles = (f"baseline (step {records[0]['step']})", f"step {step}")
        print(side_by_side(left, right, width=width, titles=titles, styled=is_terminal()))
    return 0
