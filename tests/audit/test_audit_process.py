"""``rl-guards audit-rewards`` keeps its output and exit codes whatever the reward code does: prints (and processes
it starts) go to stderr under ``--json``; a spawn process pool works; a crash, a segfault or ``os._exit`` is exit 2
with the cause and the check that was running; ``--timeout`` bounds each call."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "audit_rewards" / "pool_rewards.py"
pytestmark = pytest.mark.slow  # each test starts the command (and its worker) as a user would


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audit_process") / "d.jsonl"
    rows = [{"prompt": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)} for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cli(fn: str, dataset: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rl_guards.cli.main", "audit-rewards", f"{HERE}:{fn}", "--dataset", str(dataset),
         "--rows", "8", "--probe_rows", "4", *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_prints_never_reach_the_json(dataset: Path) -> None:
    result = _cli("chatty", dataset, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # nothing but the report on stdout
    assert report["functions"][0]["name"] == "chatty"
    assert "DEBUG scoring" in result.stderr and "from-a-subprocess" in result.stderr


def test_a_spawn_process_pool_is_audited(dataset: Path) -> None:
    result = _cli("pooled", dataset, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["functions"][0]["rows_scored"] == 8


@pytest.mark.parametrize(("fn", "cause"), [("exits", "exit code 7"), ("segfaults", "killed by SIGSEGV")])
def test_a_process_taken_down_is_exit_2_with_the_cause(dataset: Path, fn: str, cause: str) -> None:
    result = _cli(fn, dataset, "--json")
    assert result.returncode == 2 and result.stdout == ""
    assert f"could not check: the reward code ended the audit's process ({cause}) during the rows check" in (
        result.stderr
    )


def test_timeout_bounds_each_call(dataset: Path) -> None:
    start = time.perf_counter()
    result = _cli("hangs_on_long_texts", dataset, "--json", "--timeout", "1")
    spent = time.perf_counter() - start
    report = json.loads(result.stdout)["functions"][0]
    kinds = {f["kind"] for f in report["findings"]}
    assert result.returncode == 1 and "timeout" in kinds, report
    message = next(f["message"] for f in report["findings"] if f["kind"] == "timeout")
    assert "did not return within 1 s; the last text it read:" in message
    assert spent < 30, spent  # one call waited for, not one per completion (start-up of two processes included)
