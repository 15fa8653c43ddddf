"""The failure-mode benchmark's own code on two representative cases: a GRPO bug caught by a batch guard over
several steps (dead task), and a start-of-training finding (eval template path). Full run:
``python benchmarks/failure_modes/run.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.failure_modes import run

    return run


@pytest.mark.slow
def test_two_cases_caught_without_false_alarms(tiny: Any, bench: Any) -> None:
    rows = bench.run_all(["dead_task", "eval_template_differs"])
    by = {row["name"]: row for row in rows}
    dead, preflight = by["dead_task"], by["eval_template_differs"]

    assert dead["caught"] and dead["caught_by"][0] == "dead_groups/dead_task (warning)", dead
    assert dead["caught_step"] == 3 and dead["planted"]["steps"] == 3  # warn_after_steps=3: the third batch, step 3
    assert preflight["caught"] and preflight["caught_by"][0].startswith("preflight/eval_external_template_mismatch")
    for row in rows:
        assert row["false_alarm_count"] == 0, row["clean"]
        assert row["clean"]["crashed"] is None and row["clean"]["raised"] is None
        assert row["clean"]["steps"] == row["planted"]["steps"]  # the clean twin trains as long
    table = bench.table(rows)
    assert "caught 2/2; clean false alarms 0" in table


def test_unknown_case_names_are_refused(bench: Any) -> None:
    with pytest.raises(SystemExit, match="available: misrouted_reward"):
        bench.select("no_such_case")
