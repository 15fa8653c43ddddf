"""``rl-guards`` command line: one subcommand module per concept, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

# Subcommand modules under rl_guards.cli; each defines register(subparsers) -> None.
COMMAND_MODULES: list[str] = [
    "grpo", "config", "check_template", "preflight", "probe_lengths", "rollouts", "drift", "report", "audit",
]  # fmt: skip
ROLLOUT_ACTIONS = ("list", "show", "compare")


def build_parser() -> argparse.ArgumentParser:
    from rl_guards import __version__  # not the TRL adapter's: --version and --help never import torch

    parser = argparse.ArgumentParser(prog="rl-guards", description="Guards for TRL GRPO runs.")
    parser.add_argument("--version", action="version", version=f"rl-guards {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"rl_guards.cli.{name}").register(sub)
    underscore_flags(parser)
    return parser


def underscore_flags(parser: argparse.ArgumentParser) -> None:
    """One flag style, TRL's (``--max_new_tokens``): every dashed long flag is shown with underscores; the dashed
    spelling still parses (a hidden alias), so older command lines keep working."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                underscore_flags(sub)
            continue
        shown = []
        for option in action.option_strings:
            if option.startswith("--") and "-" in option[2:]:
                under = "--" + option[2:].replace("-", "_")
                parser._option_string_actions[under] = action  # both spellings parse; help shows one
                shown.append(under)
            else:
                shown.append(option)
        action.option_strings = list(dict.fromkeys(shown))


def _normalise(argv: list[str]) -> list[str]:
    """``rollouts list RUN`` means ``rollouts RUN list`` (both orders are accepted)."""
    if len(argv) >= 3 and argv[0] == "rollouts" and argv[1] in ROLLOUT_ACTIONS and argv[2] not in ROLLOUT_ACTIONS:
        return [argv[0], argv[2], argv[1], *argv[3:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "grpo":  # TRL's arguments: its own parser reads them
        from rl_guards.cli.grpo import launch

        return launch(argv[1:])
    parser = build_parser()
    args = parser.parse_args(_normalise(argv))
    if hasattr(args, "argv"):  # a command that runs itself again in a worker process (audit-rewards)
        args.argv = _normalise(argv)
    return int(args.func(args) or 0)


def console_main() -> int:
    """The ``rl-guards`` executable: like :func:`main`, and ``... | head`` ends quietly as Unix tools do."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return main()


if __name__ == "__main__":
    sys.exit(console_main())
