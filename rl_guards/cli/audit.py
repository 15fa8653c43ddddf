"""``rl-guards audit-rewards REWARD [REWARD ...] --dataset DATA``: check reward functions on a dataset's rows on a
CPU before a GPU hour (what each verdict means: ``docs/audit.md``). Exit 0: no warning/blocking finding; 1: one; 2: it
could not check (a function that cannot be loaded, a dataset that cannot be read, nothing to score, or the reward
code ended the audit's process).

The audit runs the user's code in a process of its own (:mod:`rl_guards.cli.audit_worker`) whose standard output goes to
standard error: a ``print`` in a reward function (or in a process pool it starts) never mixes into ``--json``, and a
crash, a killed process pool or an ``os._exit`` in the user's code becomes exit 2 with the cause and the check that
was running, never a silent exit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

FRAMEWORK_CHOICES = ("trl", "verl", "openrlhf", "verifiers", "plain")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit-rewards",
        help="check reward functions on a dataset's rows (reads a prefix / the thinking, hackable, inverted, raises, "
        "nondeterministic, slow)",
        description="Score reward functions (TRL, verl, OpenRLHF, verifiers or plain signatures) on a dataset's rows "
        "and controlled variants of their completions, and say what would go wrong in training. Exit 0 when no "
        "function has a warn/block finding, 1 when one does, 2 when it could not check.",
    )
    parser.add_argument("rewards", nargs="+", metavar="REWARD", help="path/to/file.py:fn or pkg.mod:fn")
    parser.add_argument("--dataset", required=True, help="jsonl / json / parquet / csv file or a datasets folder")
    parser.add_argument("--framework", choices=FRAMEWORK_CHOICES, default=None,
                        help="force one signature (default: detected from each function)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--completions", default=None, help="rl_guards run folder, TRL completions parquet, or a "
                        "jsonl of prompt/completion rows (default: built from the reference answers)")
    source.add_argument("--model", default=None, help="local model folder to sample completions from (HF generate)")
    parser.add_argument("--device", default="cpu", help="device for --model (cpu, cuda, cuda:1, ...)")
    parser.add_argument("--samples", type=int, default=4, help="completions per row sampled with --model (4)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="token cap of --model samples (256)")
    parser.add_argument("--rows", type=int, default=200, help="dataset rows to score (default 200)")
    parser.add_argument("--weights", type=float, nargs="+", default=None, help="one weight per REWARD")
    parser.add_argument("--reference", default=None, help="reference-answer column (default: found by name)")
    parser.add_argument("--input-key", default="input", help="OpenRLHF prompt column (default input)")
    parser.add_argument("--label-key", default="label", help="OpenRLHF label column (default label)")
    parser.add_argument("--probe-rows", type=int, default=12, help="rows the variant probes use (default 12)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds any one call of a function may take (default 60; a process pool's start-up "
                        "counts in its first call)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="completions per training step, for the projected reward seconds per step (default 256)")
    parser.add_argument("--slow-step-s", type=float, default=10.0,
                        help="projected reward seconds per step above which a function is slow (default 10)")
    parser.add_argument("--thinking", choices=("auto", "on", "off"), default="auto",
                        help="the policy writes a think block: on, off, or auto (as the completions do; built "
                        "completions come both ways)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--html", default=None, metavar="OUT", help="also write an HTML report to OUT")
    parser.set_defaults(func=cmd_audit, argv=None)


def cmd_audit(args: argparse.Namespace) -> int:
    """Run the audit in a worker process (see the module doc) and hand on its output and exit code."""
    from rl_guards.cli.audit_worker import run_isolated

    return run_isolated(args.argv)


def audit_here(args: argparse.Namespace, status: Any = None) -> tuple[int, str]:
    """The audit in this process: (exit code, what to print). ``status(phase)`` is told each check as it starts."""
    from rl_guards.audit import audit_rewards
    from rl_guards.audit.render import render_html, render_json, render_text
    from rl_guards.errors import ConfigError

    try:
        report = audit_rewards(
            args.rewards,
            args.dataset,
            weights=args.weights,
            framework=args.framework,
            completions=args.completions,
            model=args.model,
            device=args.device,
            samples=args.samples,
            max_new_tokens=args.max_new_tokens,
            rows=args.rows,
            probe_rows=args.probe_rows,
            timeout=args.timeout,
            batch_size=args.batch_size,
            slow_step_s=args.slow_step_s,
            input_key=args.input_key,
            label_key=args.label_key,
            reference=args.reference,
            thinking={"auto": None, "on": True, "off": False}[args.thinking],
            progress=True,
            status=status,
        )
    except ConfigError as exc:
        print(f"rl-guards audit-rewards: could not check: {exc}", file=sys.stderr)
        return 2, ""
    if args.html:
        Path(args.html).write_text(render_html(report), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    return report.exit_code, render_json(report) if args.json else render_text(report)
