"""``rl-guards`` command line: one subcommand module per concept, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

# Subcommand modules under rl_guards.cli; each defines register(subparsers) -> None.
COMMAND_MODULES: list[str] = ["check_template", "preflight", "probe_lengths", "rollouts", "report"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-guards", description="Guards for TRL GRPO runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"rl_guards.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def console_main() -> int:
    """The ``rl-guards`` executable: like :func:`main`, and ``... | head`` ends quietly as Unix tools do."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return main()


if __name__ == "__main__":
    sys.exit(console_main())
