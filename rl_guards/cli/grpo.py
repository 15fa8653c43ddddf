"""``rl-guards grpo``: ``trl grpo`` with every guard installed. Change one word of your command line::

    trl grpo --config grpo.yaml            ->   rl-guards grpo --config grpo.yaml

Everything ``trl grpo`` takes is taken the same way (TRL's own parser and script: GRPOConfig, model and dataset
fields, dataset mixtures, built-in or dotted reward-function paths, ``--accelerate_config`` and other
``accelerate launch`` arguments). rl_guards' settings come from a ``guards:`` section of the YAML (TRL never sees
it), ``--guards_config guards.yaml`` and ``--guards_set section.field=value ...``.

The launcher validates the guards config, writes the YAML without its ``guards:`` section and the guards config
next to each other in a temporary folder, and runs ``accelerate launch -m rl_guards.cli.grpo`` (as ``trl grpo``
runs its script). Each process runs TRL's own ``trl.scripts.grpo.main`` with ``trl.GRPOTrainer`` bound to a
subclass that calls :func:`rl_guards.install` right after ``__init__``.

Exit status: 0 the run finished, 2 the guards config is invalid, ``GUARD_STOP_EXIT_CODE`` (3) a guard stopped the
run (its message printed once, no traceback: the findings and the failing batch are on disk), anything else a crash
(the process's own traceback above; the launcher adds one line, not a ``CalledProcessError``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rl_guards.config import GuardsArguments, GuardsConfig
from rl_guards.errors import GUARD_STOP_EXIT_CODE, ConfigError, GuardError
from rl_guards.trl.script_args import GUARDS_KEYS

GUARDS_HELP = """
rl_guards (above: TRL's own arguments, then rl_guards'):
  --guards_config FILE           a guards YAML (the trl grpo YAML's guards: section is read too)
  --guards_set S.FIELD=VALUE     set any guard field, e.g. think_tags.mode=raise rollouts.every_steps=5
  --verbose                      print rl_guards' full detail (the whole preflight report, info findings, every status)
  --help_guards                  every guard field with its default and meaning (also: rl-guards config)"""


def register(subparsers: Any) -> None:
    """Add ``grpo`` to the help listing (its arguments are TRL's: :func:`launch` parses them)."""
    parser = subparsers.add_parser(
        "grpo", help="trl grpo with every guard installed (same YAML and flags, plus guards:)", add_help=False
    )
    parser.set_defaults(func=lambda ns: launch(list(ns.rest)))
    parser.add_argument("rest", nargs=argparse.REMAINDER)


def _pop_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of ``--name VALUE`` / ``--name=VALUE`` and argv without it."""
    out, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == name and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(name + "="):
            value, i = arg.split("=", 1)[1], i + 1
            continue
        out.append(arg)
        i += 1
    return value, out


def split_guards(argv: list[str], workdir: Path) -> tuple[list[str], GuardsConfig]:
    """argv with the YAML's ``guards:`` section moved out (a YAML TRL accepts), and the guards config it describes
    (``--guards_config`` / ``--guards_set`` still in argv apply on top in each process)."""
    import yaml

    config_path, rest = _pop_option(argv, "--config")
    section: Any = None
    if config_path is not None:
        from rl_guards.cli.preflight import read_config

        data = read_config(config_path)
        for key in GUARDS_KEYS:
            if key in data:
                section = data.pop(key)
        trl_yaml = workdir / "trl.yaml"
        trl_yaml.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        rest = ["--config", str(trl_yaml), *rest]
    guards_file, rest = _pop_option(rest, "--guards_config")
    sets: list[str] = []
    if "--guards_set" in rest:
        i = rest.index("--guards_set") + 1
        while i < len(rest) and not rest[i].startswith("--"):
            sets.append(rest[i])
            i += 1
    config = GuardsConfig.layered(section, guards_file, sets)  # section < file < --guards_set
    config.validate()
    # The merged config travels to the processes as one file (replacing --guards_config; --guards_set, still in
    # argv, applies again on top, to the same result).
    path = workdir / "guards.yaml"
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
    rest = [*rest, "--guards_config", str(path)]
    return rest, config


def launch(argv: list[str]) -> int:
    """Validate, then ``accelerate launch -m rl_guards.cli.grpo`` with TRL's arguments (as ``trl grpo`` does)."""
    if any(a in ("--help_guards", "--help-guards") for a in argv):  # the guards' fields, not TRL's 1,400 lines
        from rl_guards.cli.config import run as print_fields

        return print_fields(argparse.Namespace(section=None, yaml=False))
    if any(a in ("-h", "--help") for a in argv):
        from rl_guards.trl.script_args import grpo_parser

        grpo_parser((GuardsArguments,), prog="rl-guards grpo").print_help()
        print(GUARDS_HELP)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="rl-guards-grpo-"))
    try:
        try:
            argv, _ = split_guards(argv, workdir)
        except ConfigError as exc:
            print(f"rl-guards grpo: {exc}", file=sys.stderr)
            return 2
        from accelerate.commands.launch import launch_command, launch_command_parser

        from rl_guards.trl.script_args import grpo_parser

        parser = grpo_parser((GuardsArguments,), prog="rl-guards grpo")
        parsed = parser.parse_args_and_config(argv, return_remaining_strings=True)
        remaining = list(parsed[-1]) if isinstance(parsed[-1], list) else []
        launch_args = _accelerate_config(remaining)
        script_args = [a for a in argv if a not in remaining]
        accelerate_args = launch_command_parser().parse_args([*launch_args, "-m", "rl_guards.cli.grpo", *script_args])
        try:
            launch_command(accelerate_args)
        except subprocess.CalledProcessError as exc:  # one process: its own output already said why
            return _exit_status([exc.returncode])
        except Exception as exc:  # several processes: torch's ChildFailedError names each rank's exit code
            failures = getattr(exc, "failures", None)
            if not isinstance(failures, dict) or not failures:
                raise
            return _exit_status([getattr(f, "exitcode", 1) for f in failures.values()])
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _exit_status(codes: list[int]) -> int:
    """The launcher's status from its processes': a guard stop when every failed process stopped for a guard (its
    message is already printed, once), else the crash's status with one line pointing at the traceback above."""
    if codes and all(code == GUARD_STOP_EXIT_CODE for code in codes):
        return GUARD_STOP_EXIT_CODE
    code = next((c for c in codes if c not in (0, GUARD_STOP_EXIT_CODE)), 1)
    print(f"rl-guards grpo: the training process failed (exit status {code}); its traceback is above.", file=sys.stderr)
    return code if 0 < code < 256 else 1


def _accelerate_config(args: list[str]) -> list[str]:
    """``--accelerate_config NAME|PATH`` as TRL resolves it, into accelerate's ``--config_file``."""
    try:
        from trl.cli.accelerate_config import resolve_accelerate_config_argument
    except ImportError:  # an older TRL: pass the arguments on as they are
        return args
    return list(resolve_accelerate_config_argument(args))


def guarded_trainer_class(config: GuardsConfig) -> type:
    """``trl.GRPOTrainer`` with :func:`rl_guards.install` called at the end of ``__init__``."""
    from trl import GRPOTrainer

    import rl_guards

    class GuardedGRPOTrainer(GRPOTrainer):  # type: ignore[misc,valid-type]
        """TRL's GRPOTrainer with every rl_guards guard installed."""

        runs: list[Any] = []  # noqa: RUF012 (the runs of this process: the end-of-run table is theirs)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.rl_guards = rl_guards.install(self, config)
            GuardedGRPOTrainer.runs.append(self.rl_guards)

    GuardedGRPOTrainer.__name__ = GuardedGRPOTrainer.__qualname__ = "GRPOTrainer"
    return GuardedGRPOTrainer


def worker_main(argv: list[str] | None = None) -> int:
    """One process of the run: TRL's own script, with the guarded trainer in place of GRPOTrainer."""
    import trl
    from trl.scripts import grpo as trl_grpo

    from rl_guards.trl.script_args import grpo_parser

    parser = grpo_parser((GuardsArguments,), prog="rl-guards grpo")
    script_args, training_args, model_args, dataset_args, guard_args = parser.parse_args_and_config(
        argv, fail_with_unknown_args=False
    )[:5]
    trainer_class = guarded_trainer_class(guard_args.to_config())
    trl.GRPOTrainer = trainer_class  # trl.scripts.grpo.main imports it by name
    try:
        trl_grpo.main(script_args, training_args, model_args, dataset_args)
    except GuardError as exc:  # a guard stopped the run on purpose: not a crash, no traceback
        say_summary(trainer_class.runs)
        report_stop(exc)
        return GUARD_STOP_EXIT_CODE
    say_summary(trainer_class.runs)
    return 0


def say_summary(runs: list[Any]) -> None:
    """The end-of-run table (findings, per-task curves), as the library route prints ``run.summary()``: once, on the
    main process, for the last run."""
    if not runs or int(os.environ.get("RANK", "0") or 0) != 0:
        return
    from rl_guards.console import say

    try:
        say(runs[-1].summary())
    except Exception as exc:  # the table never hides how the run ended
        say(f"[rl_guards] the end-of-run table could not be built: {type(exc).__name__}: {exc}")


def report_stop(exc: GuardError) -> None:
    """Close the W&B run as failed, then say once (on the main process), last, which guard stopped the run, where,
    and why: the finding's message is said here only (the guards do not say a finding that stops the run)."""
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=GUARD_STOP_EXIT_CODE)
    except Exception:  # W&B trouble never hides the stop
        pass
    if int(os.environ.get("RANK", "0") or 0) == 0:
        where = f" at step {exc.step}" if exc.step is not None else ""
        print(
            f"\nrl-guards grpo: the {exc.guard or 'rl_guards'} guard stopped the run{where} (exit status "
            f"{GUARD_STOP_EXIT_CODE}: a guard stop, not a crash).\n{exc}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(worker_main())
