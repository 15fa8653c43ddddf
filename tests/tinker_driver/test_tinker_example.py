"""examples/tinker_arithmetic.py: the cookbook's arithmetic recipe with rl_guards on the local backend."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinker_arithmetic.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("tinker_arithmetic", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_default_run_is_silent_and_a_short_cap_stops_it_with_exit_3(
    tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _example()
    assert example.main(["--log_path", str(tmp_path / "ok"), "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "rl_guards: no findings." in out
    assert (tmp_path / "ok" / "metrics.jsonl").is_file()
    assert not (tmp_path / "ok" / "rl_guards" / "findings.jsonl").exists()

    log = tmp_path / "cut"
    status = example.main(["--log_path", str(log), "--steps", "2", "--max_tokens", "2",
                           "--guards_set", "truncation.mode=raise"])  # fmt: skip
    assert status == 3
    captured = capsys.readouterr()
    assert "truncation/truncation_rate" in captured.out and "raise max_tokens" in captured.err
    records = [json.loads(line) for line in (log / "rl_guards" / "findings.jsonl").read_text().splitlines()]
    assert {r["type"] for r in records} >= {"finding", "stop"}
    assert {r["guard"] for r in records if r["type"] in ("finding", "stop")} == {"truncation"}
