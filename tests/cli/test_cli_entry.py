"""The command line's own surface: --version, one flag style (TRL's underscores; dashes still parse), and
``rollouts list RUN`` as well as ``rollouts RUN list``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rl_guards.cli.main import build_parser, main


@pytest.mark.slow
def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "rl_guards.cli.main", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("rl-guards ")


def _flags(parser: object) -> list[str]:
    import argparse

    out = []
    for action in parser._actions:  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _flags(sub)
        else:
            out += [o for o in action.option_strings if o.startswith("--")]
    return out


def test_every_long_flag_uses_underscores() -> None:
    assert [f for f in _flags(build_parser()) if "-" in f[2:]] == []


def test_dashed_spellings_still_parse() -> None:
    parser = build_parser()
    a = parser.parse_args(["probe-lengths", "--model", "m", "--dataset", "d", "--max-new-tokens", "7"])
    b = parser.parse_args(["probe-lengths", "--model", "m", "--dataset", "d", "--max_new_tokens", "7"])
    assert a.max_new_tokens == b.max_new_tokens == 7


def test_rollouts_list_takes_the_run_after_the_action(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rl_guards" / "rollouts").mkdir(parents=True)
    assert main(["rollouts", "list", str(tmp_path)]) == main(["rollouts", str(tmp_path), "list"])
    out = capsys.readouterr()
    assert "invalid choice" not in out.err


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["rollouts", "--help"], ["preflight", "--help"], ["audit-rewards", "--help"],
     ["probe-lengths", "--help"], ["report", "--help"], ["check-template", "--help"], ["drift", "--help"]],
)  # fmt: skip
def test_version_and_help_never_import_torch(argv: list[str]) -> None:
    """Issue 23 #4: printing a version or a usage must not pay torch/transformers' import (6-8 s before)."""
    code = (
        "import sys\nfrom rl_guards.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "HEAVY []" in out.stdout, out.stdout[-2000:]
