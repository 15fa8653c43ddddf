"""One list of start checks, one function, three routes (issue 23 #6): ``install()`` at train start,
``GuardsCallback`` on a loop it cannot install on, and ``rl-guards preflight``'s :func:`run_start_checks` find the
same things on the same planted problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from datasets import Dataset

import rl_guards
from rl_guards.cli.main import main
from rl_guards.config import GuardsConfig
from rl_guards.engine.start_checks import context_without_trainer, run_start_checks, start_check_classes
from rl_guards.guards.base import GuardSession
from rl_guards.testing.logs import shows
from rl_guards.trl.callback import GuardsCallback

CONFIG = {"template": {"mode": "warn"}, "rollouts": {"wandb_rows_per_task": 0}}


def _planted() -> Dataset:
    """An assistant prefill TRL closes as a finished turn (template), and task labels in a column not named
    ``task`` (task_rewards): two start checks of different guards."""
    prefill = {"role": "assistant", "content": "<think>\n"}
    prompts = [[{"role": "user", "content": f"What is {i}+1? Answer with the number."}, prefill] for i in range(8)]
    return Dataset.from_dict(
        {"prompt": prompts, "category": ["arith", "echo"] * 4, "answer": [str(i + 1) for i in range(8)]}
    )


def _begin_findings(session: GuardSession) -> set[tuple[str, str]]:
    return {(f.guard, f.kind) for f in session.findings if (f.guard, f.kind) in session.begin_keys}


@pytest.mark.slow
def test_the_three_routes_run_the_same_start_checks(make_grpo_trainer: Any, tiny: Any, tmp_path: Path) -> None:
    from torch.utils.data import DataLoader
    from transformers import TrainerControl, TrainerState

    from rl_guards.testing import tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct, echo_match

    names = [cls.name for cls in start_check_classes()]
    # install(): the guards' run at train start
    trainer = make_grpo_trainer(max_steps=1, train_dataset=_planted())
    run = rl_guards.install(trainer, CONFIG)
    trainer.train()
    installed = _begin_findings(run.session)
    assert [g.name for g in run.guards if g.name in names] == names

    # GuardsCallback where it cannot install (a custom loop dispatching the event: no Trainer on the stack)
    callback = GuardsCallback(CONFIG)
    loader = DataLoader(_planted(), batch_size=2, collate_fn=list)
    with shows("only the start-of-training checks run"):
        callback.on_train_begin(
            tiny_grpo_config(tmp_path / "loop"), TrainerState(), TrainerControl(),
            processing_class=tiny.load_tokenizer(), train_dataloader=loader,
        )  # fmt: skip
    assert [g.name for g in callback.guards] == names  # 437f4ff: preflight and template only
    fallback = _begin_findings(callback.session)

    # rl-guards preflight's function: the context built from the parts, no trainer
    ctx = context_without_trainer(
        tiny_grpo_config(tmp_path / "parts"), tiny.load_tokenizer(), train_dataset=_planted(),
        reward_funcs=[arith_correct, echo_match],
    )  # fmt: skip
    verdict = run_start_checks(ctx, GuardsConfig.from_dict(CONFIG))
    parts = {(f.guard, f.kind) for f in verdict.findings}

    # rl-guards preflight itself, on the trl grpo YAML of the same run
    data = tmp_path / "data"
    data.mkdir()
    _planted().to_json(str(data / "train.jsonl"))
    config = tmp_path / "grpo.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": tiny.model_dir,
                "dataset_name": str(data),
                "reward_funcs": ["rl_guards.testing.rewards.arith_correct", "rl_guards.testing.rewards.echo_match"],
                "output_dir": str(tmp_path / "cli"),
                "per_device_train_batch_size": 8,
                "num_generations": 4,
                "max_completion_length": 16,
                "guards": CONFIG,
            }
        ),
        encoding="utf-8",
    )
    report = tmp_path / "preflight.json"
    main(["preflight", str(config), "--json", str(report)])
    cli = {(f["guard"], f["kind"]) for f in json.loads(report.read_text())["start_checks"]["findings"]}

    assert ("template", "prefill_duplicates_template") in installed
    assert ("tasks", "task_column_missing") in installed
    assert installed == fallback == parts == cli
    assert verdict.guards == names
