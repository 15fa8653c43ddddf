"""``rl-guards report RUN_DIR [-o report.html]``: one self-contained HTML page of a run's findings, drift, curves and
rollouts. Exit 0: written; 2: the folder is no run (nothing rl_guards or the trainer wrote is in it: the message says
what was looked for) or no folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rl_guards.rollouts.render import printable
from rl_guards.rollouts.report import collect, not_a_run, write_report


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write an HTML report (curves per task, rollouts at each checkpoint)",
        description="Write one self-contained HTML page (inline CSS/SVG, no scripts) from a run's rollout dumps "
        "and its trainer_state.json.",
    )
    parser.add_argument("run_dir", help="trainer output_dir")
    parser.add_argument("-o", "--output", default=None, help="HTML file (default RUN_DIR/rl_guards_report.html)")
    parser.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.run_dir).is_dir():
        print(f"rl-guards report: {printable(args.run_dir)} is not a folder", file=sys.stderr)
        return 2
    data = collect(args.run_dir)
    missing = not_a_run(data)
    if missing is not None:
        print(f"rl-guards report: {printable(args.run_dir)} is not a run folder: {missing}", file=sys.stderr)
        return 2
    for item in data.unreadable:
        print(f"rl-guards report: skipped unreadable file {printable(item)}", file=sys.stderr)
    for note in data.notes:
        print(f"rl-guards report: {printable(note)}", file=sys.stderr)
    path = write_report(args.run_dir, args.output, data)
    print(f"wrote {printable(path)}")
    return 0
