"""Rollout dumps that cannot be written never stop training: counted, warned once, the run finishes.

Tests run as root, so a read-only folder would not stop a write; the dump folder is put under a regular FILE,
where creating it fails for every user (``NotADirectoryError``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import rl_guards
from rl_guards.guards.base import RLGuardsWarning

MAX_STEPS = 3


def test_unwritable_dump_folder_keeps_training(make_grpo_trainer: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    folder = blocker / "rollouts"
    trainer = make_grpo_trainer(max_steps=MAX_STEPS)
    run = rl_guards.install(trainer, {"rollouts": {"every_steps": 1, "output_dir": str(folder), "mode": "warn"}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()

    assert trainer.state.global_step == MAX_STEPS
    assert run.session.counts[("rollouts", "write_failed")] == MAX_STEPS  # one failed dump per step
    logged = [
        e["rl_guards/rollouts/write_errors"]
        for e in trainer.state.log_history
        if "rl_guards/rollouts/write_errors" in e
    ]
    # Failed writes so far; the writer reports in the background, the last step's by the final log at the latest.
    assert logged == sorted(logged) and logged[-1] == MAX_STEPS
    dump_warnings = [w for w in caught if issubclass(w.category, RLGuardsWarning) and "rollouts" in str(w.message)]
    assert len(dump_warnings) == 1, [str(w.message) for w in dump_warnings]  # warned once, then only counted
    message = str(dump_warnings[0].message)
    assert str(folder) in message and "Training goes on" in message and "rollouts.output_dir" in message
    assert blocker.read_text() == "not a folder\n" and not folder.exists()
    assert not any(f.kind == "internal_error" for f in run.session.findings)
