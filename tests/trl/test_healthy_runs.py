"""Precision (issue 20): healthy runs, written as users write them, are silent at the default config.

Each case of ``rl_guards.testing.healthy.HEALTHY_CASES`` trains a real GRPOTrainer on the tiny fixture with every
guard on and W&B offline, then reads the run back: no warn/raise finding, nothing said at warning level, no W&B
alert, and the run trained to its last step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rl_guards.testing.healthy import HEALTHY_CASES, HealthyCase, run_healthy
from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", HEALTHY_CASES, ids=[c.name for c in HEALTHY_CASES])
def test_a_healthy_run_is_silent(case: HealthyCase, tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    outcome = run_healthy(
        case, tiny.model_dir, tiny.load_tokenizer(), tmp_path / "out", report_to="wandb", run_name=case.name
    )
    import wandb

    wandb.finish()
    [run_dir] = find_offline_runs(tmp_path)
    run = read_offline_run(run_dir)
    assert outcome.steps == case.args.get("max_steps", 3), outcome.summary
    assert outcome.findings == [], outcome.summary
    assert outcome.warnings == [], outcome.warnings
    assert run.alerts == [], run.alerts
    assert not any(k.startswith("rl_guards/findings/") for k in run.summary), run.summary


def test_the_corpus_covers_what_users_write() -> None:
    """At least 15 configurations: several attach routes, prompt kinds, thinking modes, reward styles."""
    assert len(HEALTHY_CASES) >= 15
    assert {c.attach for c in HEALTHY_CASES} == {"install", "callback"}
    assert any(c.per_row_thinking for c in HEALTHY_CASES)
