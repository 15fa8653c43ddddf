"""``trainer.train()`` again on the same trainer (a notebook: Ctrl-C, then train again): the guards start over,
unless the new run resumes from a checkpoint, which restores the checkpoint's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

import rl_guards

pytestmark = pytest.mark.slow  # real GRPOTrainer runs on the tiny model


class CtrlC(TrainerCallback):
    """Interrupts the run at the end of ``step``, once (a KeyboardInterrupt, as Ctrl-C in a notebook)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.step = -1
            raise KeyboardInterrupt


def _dumped_steps(out: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in (out / "rl_guards" / "rollouts").glob("step_*.parquet"))


def test_a_second_train_after_an_interrupt_starts_the_guards_over(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, max_steps=4, callbacks=[CtrlC(3)])
    run = rl_guards.install(trainer, {"rollouts": {"every_steps": 1}})
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert _dumped_steps(out) == [1, 2, 3]

    trainer.train()

    # every step of the new run is dumped (the first run's schedule said: next at step 4); the interrupted run's
    # dumps were moved aside as an abandoned trajectory
    assert _dumped_steps(out) == [1, 2, 3, 4]
    assert list((out / "rl_guards" / "rollouts" / "superseded").glob("*/step_*.parquet"))
    assert run.batches_seen == 4
    dead = run.guard("dead_groups")
    assert all(len(w) <= 4 for w in dead.dead_windows.values()), dead.dead_windows  # no batch of the first run
    assert run.guard("masking").checked == 4


def test_a_second_train_resuming_from_a_checkpoint_restores_its_state(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, max_steps=4, save_strategy="steps", save_steps=2, callbacks=[CtrlC(3)])
    run = rl_guards.install(trainer, {"rollouts": {"every_steps": 1}})
    with pytest.raises(KeyboardInterrupt):
        trainer.train()

    trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))

    assert run.batches_seen == 4  # 2 restored from the checkpoint, 2 trained since
    assert run.guard("masking").checked == 4
    assert _dumped_steps(out) == [1, 2, 3, 4]  # step 3 of the interrupted run moved aside, then dumped again
