"""A guard observes: with one seed, a run with every guard on (drift probing at train start and at each checkpoint,
reward probes and the reward sanity check making extra reward calls) samples, scores and trains exactly as the
same run without rl_guards."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rl_guards
from rl_guards.core.rng import forked_rng
from rl_guards.testing import make_dataset

# Keys that measure time, not the run.
TIMING = ("step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "samples_per_second",
          "steps_per_second")  # fmt: skip


def _history(trainer: Any) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if not k.startswith("rl_guards") and not any(t in k for t in TIMING)}
        for row in trainer.state.log_history
    ]


def test_forked_rng_restores_every_generator() -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with forked_rng():
        random.random(), np.random.rand(), torch.rand(3), torch.randint(0, 9, (5,))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    random.seed(1)
    with pytest.raises(RuntimeError), forked_rng():
        random.random()
        raise RuntimeError("restored on the way out too")
    assert random.random() == random.Random(1).random()


@pytest.mark.slow
def test_guards_on_and_off_train_identically(make_grpo_trainer: Any, tmp_path: Path) -> None:
    settings = {
        "max_steps": 4,
        "save_strategy": "steps",
        "save_steps": 2,  # drift probes at train start and before checkpoints 2 and 4
        "max_completion_length": 24,
        "learning_rate": 1e-5,
        "seed": 7,
    }
    runs = []
    for guarded in (False, True):
        trainer = make_grpo_trainer(
            train_dataset=make_dataset(n_per_task=8, thinking=True), output_dir=tmp_path / str(guarded), **settings
        )
        run = None
        if guarded:
            # the probes' budget lifted: a tiny step leaves 2 % no room for a round, and they must run here
            probes = {"every_steps": 1, "budget": 100.0}
            run = rl_guards.install(trainer, {"drift": {"mode": "warn"}, "probes": probes})
        trainer.train()
        runs.append((trainer, run))
    (plain, _), (guarded_trainer, run) = runs
    assert run is not None
    drift = run.guard("drift")
    assert drift.baseline and drift.checkpoints == [2, 4], run.summary()
    assert run.guard("probes").rounds >= 1, run.summary()
    assert not [f for f in run.findings if f.kind == "internal_error"], run.summary()
    off, on = _history(plain), _history(guarded_trainer)
    assert len(off) == len(on) == 5  # 4 steps + the train summary
    for step, (a, b) in enumerate(zip(off, on, strict=True)):
        assert a == b, f"row {step} differs: " + str(
            {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        )
