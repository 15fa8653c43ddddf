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


# ----- issue 38 #7 -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_python_m_rl_guards_is_the_command_line() -> None:
    """e1b9f62: ``No module named rl_guards.__main__``."""
    done = subprocess.run([sys.executable, "-m", "rl_guards", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("rl-guards "), done.stderr[-2000:]


@pytest.mark.slow
def test_check_template_renders_without_torch_or_transformers() -> None:
    """e1b9f62: 11-13 s, the tiny model's torch and transformers imported to render a template; now jinja2 alone."""
    import time

    code = (
        "import sys\nfrom rl_guards.cli.main import main\n"
        "code = main(['check-template', 'qwen3', '--prefill', '<think>\\\\n'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules)\n"
        "print('EXIT', code, 'HEAVY', heavy)\n"
    )
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - start
    assert "EXIT 1 HEAVY []" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "prefill_duplicates_template" in out.stdout
    print(f"check-template took {took:.2f} s")  # measured (the machine's load varies); the import list is the rule


def test_config_lists_every_guard_field_with_its_default_and_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    """e1b9f62: no way to list the guard fields (``rl-guards grpo --help`` is TRL's 1,400 lines)."""
    import dataclasses

    from rl_guards.config import GuardsConfig

    assert main(["config"]) == 0
    out = capsys.readouterr().out
    defaults = GuardsConfig()
    for section in (f.name for f in dataclasses.fields(GuardsConfig)):
        for field in dataclasses.fields(getattr(defaults, section)):
            assert f"{section}.{field.name}" in out, f"{section}.{field.name} not listed"
    assert "drift.terminated_drop" in out and "absolute drop of the share ending with EOS" in out
    assert main(["config", "truncation", "--yaml"]) == 0
    text = capsys.readouterr().out
    import yaml

    assert yaml.safe_load(text) == {"truncation": dataclasses.asdict(defaults.truncation)}
    assert main(["grpo", "--help_guards"]) == 0 and "probes.call_timeout" in capsys.readouterr().out


def test_every_guard_field_is_documented() -> None:
    from rl_guards.config import field_docs

    assert [f"{d.section}.{d.name}" for d in field_docs() if not d.doc] == []


@pytest.mark.parametrize("command", ["check-template", "preflight", "config"])
def test_help_is_plain_text_not_restructured_text(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """e1b9f62: ``check-template --help`` printed the module docstring's ``literal``s and ``::``."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "::" not in out and ":mod:" not in out and ":class:" not in out
