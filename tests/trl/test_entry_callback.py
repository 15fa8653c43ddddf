"""The constructor route gives every guard (``callbacks=[GuardsCallback(config)]``), on GRPO and RLOO trainers alike;
where the batch guards cannot run, one warning names what is off and the fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.testing.logs import shows
from rl_guards.trl.callback import GuardsCallback
from rl_guards.trl.hook import GuardRun

pytestmark = pytest.mark.slow


def _batch_keys(history: list[dict[str, Any]]) -> set[str]:
    return {k for row in history for k in row if k.startswith(("rl_guards/", "rl_guards_task/"))}


def test_callback_route_gives_the_batch_guards(make_grpo_trainer: Any) -> None:
    callback = GuardsCallback({"rollouts": {"wandb_rows_per_task": 0}})
    trainer = make_grpo_trainer(max_steps=2, callbacks=[callback])
    trainer.train()
    assert isinstance(callback.run, GuardRun) and callback.run.batches_seen == 2  # 0.1: no batch guard at all
    keys = _batch_keys(trainer.state.log_history)
    assert "rl_guards/masking/checked_batches" in keys and any(k.startswith("rl_guards_task/") for k in keys)
    assert callback.session is callback.run.session
    assert (Path(trainer.args.output_dir) / "rl_guards" / "rollouts" / "step_000001.parquet").is_file()


def test_callback_route_and_install_are_one_run(make_grpo_trainer: Any) -> None:
    callback = GuardsCallback()
    trainer = make_grpo_trainer(max_steps=1, callbacks=[callback])
    run = rl_guards.install(trainer)  # both routes on one trainer: the callback reuses the installed guards
    trainer.train()
    assert callback.run is run
    assert sum(isinstance(cb, GuardRun) for cb in trainer.callback_handler.callbacks) == 1


def test_callback_without_a_trainer_says_exactly_what_is_off(tiny: Any, tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState

    from rl_guards.testing import tiny_grpo_config

    callback = GuardsCallback()
    args = tiny_grpo_config(tmp_path)
    with shows("only the start-of-training checks run") as caught:
        # A custom loop dispatching the event itself: no transformers.Trainer on the stack.
        callback.on_train_begin(args, TrainerState(), TrainerControl(), processing_class=tiny.tokenizer)
    message = caught.messages[0]
    for name in ("masking", "think_tags", "dead_groups", "rollouts", "truncation", "routing"):
        assert name in message.split("Off:")[1]
    assert "rl_guards.install(trainer, config)" in message and callback.run is None


def test_rloo_trainer_gets_the_batch_guards(tiny: Any, tmp_path: Path) -> None:
    from trl import RLOOConfig, RLOOTrainer

    from rl_guards.testing import TINY_GRPO_DEFAULTS, make_dataset
    from rl_guards.testing.rewards import arith_correct, echo_match

    fields = {f.name for f in dataclasses.fields(RLOOConfig)}
    settings = {k: v for k, v in TINY_GRPO_DEFAULTS.items() if k in fields}
    trainer = RLOOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=[arith_correct, echo_match],
        args=RLOOConfig(output_dir=str(tmp_path / "rloo"), **{**settings, "max_steps": 2}),
        train_dataset=make_dataset(),
    )
    run = rl_guards.install(trainer, {"rollouts": {"wandb_rows_per_task": 0}})
    trainer.train()
    assert not run.unavailable and run.batches_seen == 2
    assert "rl_guards/masking/checked_batches" in _batch_keys(trainer.state.log_history)
    report = run.guard("preflight").last_report  # the preflight report ran on the RLOO run (notes only: no finding)
    assert report is not None
    advice = " ".join(f.message for f in report.findings)
    assert "scale_rewards" not in advice  # GRPO-only advice is not given to RLOO (RLOOConfig has no such field)
