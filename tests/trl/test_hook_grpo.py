"""The TRL hook on a real GRPOTrainer: batches seen, metrics in log_history and W&B, modes, resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import pytest

import rl_guards
from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.errors import GuardError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.testing.logs import shows

pytestmark = pytest.mark.slow  # every test here builds a real GRPOTrainer on the tiny model


class ProbeGuard(Guard):
    """Records what the hook hands to guards, and logs two metrics."""

    name: ClassVar[str] = "probe"
    config_field: ClassVar[str] = "tasks"
    seen: ClassVar[list[RolloutBatch]] = []

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.batches = 0
        self.began = False

    def on_train_begin(self, report: Reporter) -> None:
        self.began = True

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        self.batches += 1
        ProbeGuard.seen.append(batch)
        report.metric("rows", float(len(batch)))
        report.task_metric(batch.tasks[0], "first_task_rows", float(batch.tasks.count(batch.tasks[0])))

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])


class BuggyGuard(Guard):
    """A guard with a bug of its own: it must never stop training."""

    name: ClassVar[str] = "buggy"
    config_field: ClassVar[str] = "tasks"

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        raise ZeroDivisionError("guard bug")


class AlwaysViolates(Guard):
    """Reports a violation on every batch, so the configured mode decides what happens."""

    name: ClassVar[str] = "always"
    config_field: ClassVar[str] = "truncation"

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        report.violation("planted", f"planted violation at step {batch.step}")


def _history_keys(trainer: Any) -> set[str]:
    return {k for row in trainer.state.log_history for k in row}


def test_guards_see_gathered_batches_and_metrics_reach_log_history(make_grpo_trainer: Any) -> None:
    ProbeGuard.seen.clear()
    trainer = make_grpo_trainer(max_steps=2)
    run = rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    trainer.train()

    probe = run.guard("probe")
    assert probe.began and probe.batches == 2
    batch = ProbeGuard.seen[0]
    g = trainer.num_generations
    assert len(batch) == trainer.args.per_device_train_batch_size and batch.num_generations == g
    # Rows of one group share the prompt and the task.
    for rows in batch.groups():
        assert len({batch.tasks[i] for i in rows}) == 1
        assert len({tuple(batch.prompt_ids[i]) for i in rows}) == 1
    assert set(batch.tasks) <= {"arith", "echo"}
    assert batch.reward_names == list(trainer.reward_func_names)
    # Routed fixture rewards: each row is scored by exactly one of the two task functions.
    assert all(sum(v is not None for v in row) == 1 for row in batch.rewards)
    assert all(isinstance(a, float) and not math.isnan(a) for a in batch.advantages)
    assert all(ids and isinstance(ids[0], int) for ids in batch.completion_ids)
    # truncated means: the last generated token is no EOS/pad.
    eos = set(run.ctx.eos_token_ids) | {run.ctx.pad_token_id}
    assert batch.truncated == [ids[-1] not in eos for ids in batch.completion_ids]
    keys = _history_keys(trainer)
    assert "rl_guards/probe/rows" in keys
    assert any(k.startswith("rl_guards_task/") and k.endswith("/first_task_rows") for k in keys)
    rows = [r["rl_guards/probe/rows"] for r in trainer.state.log_history if "rl_guards/probe/rows" in r]
    assert rows == [float(len(batch))] * 2


def test_guard_bug_is_counted_not_fatal(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=2)
    run = rl_guards.install(trainer, GuardsConfig(), guards=[BuggyGuard])
    with shows("guard bug"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert run.session.counts[("buggy", "internal_error")] == 2
    assert "rl_guards/buggy/internal_errors" in _history_keys(trainer)


@pytest.mark.parametrize("mode", ["raise", "warn", "log"])
def test_mode_decides_between_stop_warn_and_count(make_grpo_trainer: Any, mode: str) -> None:
    trainer = make_grpo_trainer(max_steps=2)
    run = rl_guards.install(trainer, {"truncation": {"mode": mode}}, guards=[AlwaysViolates])
    if mode == "raise":
        with pytest.raises(GuardError, match="planted violation at step 1") as info:  # TRL's step of the batch
            trainer.train()
        assert info.value.guard == "always" and info.value.step == 1
        assert trainer.state.global_step == 0
        return
    if mode == "warn":
        with shows("planted violation"):
            trainer.train()
    else:
        trainer.train()
    assert trainer.state.global_step == 2
    assert run.session.counts[("always", "planted")] == 2
    assert "always/planted" in run.summary()


def test_disabled_guard_is_not_installed(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=1)
    run = rl_guards.install(trainer, {"truncation": {"enabled": False}}, guards=[AlwaysViolates])
    trainer.train()
    assert run.guards == [] and not run.session.counts


def test_drifted_trainer_reports_unavailable_guards(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(max_steps=1)
    # Simulate a TRL version that renamed the private reward method.
    trainer._calculate_rewards = None
    run = rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    assert "probe" in run.unavailable and "_calculate_rewards" in run.unavailable["probe"]
    assert "unavailable" in run.summary()


def test_guard_state_survives_resume(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "resume"
    trainer = make_grpo_trainer(max_steps=2, save_strategy="steps", save_steps=2, output_dir=str(out))
    run = rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    trainer.train()
    assert run.guard("probe").batches == 2

    resumed = make_grpo_trainer(max_steps=3, save_strategy="no", output_dir=str(out))
    run2 = rl_guards.install(resumed, GuardsConfig(), guards=[ProbeGuard])
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    # Two batches restored from the checkpoint, one generated after the resume.
    assert run2.guard("probe").batches == 3
    assert run2.batches_seen == 3


@pytest.mark.slow
def test_metrics_reach_offline_wandb(make_grpo_trainer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "rl-guards-test")
    trainer = make_grpo_trainer(max_steps=2, report_to="wandb", run_name="hook-wandb")
    rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    trainer.train()
    import wandb

    wandb.finish()
    runs = find_offline_runs(tmp_path)
    assert runs, "no offline run written"
    back = read_offline_run(runs[-1])
    # rl_guards keys keep their own names (W&B sections of their own), not TRL's train/ section.
    values = [v for _, v in back.series("rl_guards/probe/rows")]
    assert values == [float(trainer.args.per_device_train_batch_size)] * 2
    assert any(k.startswith("rl_guards_task/") for k in back.keys())
    assert not any(k.startswith("train/rl_guards") for k in back.keys())


def test_stopping_batch_is_dumped_for_the_post_mortem(make_grpo_trainer: Any, tmp_path: Path) -> None:
    from rl_guards.guards.recorder import RolloutRecorder
    from rl_guards.rollouts.reader import RolloutStore

    out = tmp_path / "stopped"
    trainer = make_grpo_trainer(max_steps=2, output_dir=str(out))
    # every_steps=5: step 0 would be dumped anyway, so make the stop happen on a step the period skips.
    config = {"truncation": {"mode": "raise"}, "rollouts": {"every_steps": 5}}

    class ViolatesAtStep1(AlwaysViolates):
        def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
            if batch.step == 1:
                super().on_batch(batch, report)

    rl_guards.install(trainer, config, guards=[ViolatesAtStep1, RolloutRecorder])
    with pytest.raises(GuardError, match="step 1"):
        trainer.train()
    store = RolloutStore(out)
    entries = {e["step"]: e for e in store.index()}
    assert entries[1]["reason"] == "stopped"
    assert len(store.rows(1)) == trainer.args.per_device_train_batch_size


def test_installing_twice_is_refused(make_grpo_trainer: Any) -> None:
    from rl_guards.errors import ConfigError

    trainer = make_grpo_trainer(max_steps=1)
    rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    with pytest.raises(ConfigError, match="already installed"):
        rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])


def test_constructor_callback_runs_the_start_checks(make_grpo_trainer: Any) -> None:
    from datasets import Dataset

    from rl_guards.engine.start_checks import start_check_classes
    from rl_guards.errors import TemplateError
    from rl_guards.trl.callback import GuardsCallback

    prefilled = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\n"}]] * 4,
            "task": ["arith"] * 4,
            "answer": ["4"] * 4,
        }
    )
    callback = GuardsCallback({"template": {"mode": "raise"}})
    trainer = make_grpo_trainer(max_steps=1, train_dataset=prefilled, callbacks=[callback])
    with pytest.raises(TemplateError, match="prefill"):
        trainer.train()
    clean = GuardsCallback({"template": {"mode": "raise"}})
    trainer = make_grpo_trainer(max_steps=1, callbacks=[clean])
    trainer.train()
    assert not [f for f in clean.session.findings if f.guard == "template" and f.severity == "blocking"]
    assert [g.name for g in clean.guards] == [cls.name for cls in start_check_classes()]  # the one list


def test_eval_batches_are_guarded_and_logged_under_eval(tiny: Any, tmp_path: Path) -> None:
    from trl import GRPOTrainer

    from rl_guards.testing import make_dataset, tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct, echo_match

    ProbeGuard.seen.clear()
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=[arith_correct, echo_match],
        args=tiny_grpo_config(
            tmp_path / "eval", max_steps=2, eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=8
        ),
        train_dataset=make_dataset(),
        eval_dataset=make_dataset(n_per_task=2),
    )
    rl_guards.install(trainer, GuardsConfig(), guards=[ProbeGuard])
    trainer.train()
    modes = [b.mode for b in ProbeGuard.seen]
    assert modes.count("train") == 2 and modes.count("eval") >= 1
    eval_rows = [r for r in trainer.state.log_history if "eval_rl_guards/probe/rows" in r]
    assert eval_rows, "guard metrics of eval batches missing from the eval log"
