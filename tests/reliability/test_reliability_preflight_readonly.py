"""Issue 22 item 5: ``rl-guards preflight`` on a finished run's own YAML (its ``output_dir`` is the run's folder, the
usual case) only reads. Start checks are an explicit list: what prepares a run at start (the rollout recorder moving
a resumed run's later dumps aside and rewriting the index, the drift baseline) is never run by a check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import rl_guards
from rl_guards.cli.main import main
from rl_guards.engine.start_checks import prepare_at_start_classes, start_check_classes, start_guards
from rl_guards.guards.base import Guard
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.testing import make_dataset


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, byte for byte."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_guard_with_a_train_begin_is_a_check_or_prepares_the_run() -> None:
    checks, prepare = start_check_classes(), prepare_at_start_classes()
    assert not set(checks) & set(prepare)
    with_begin = [cls for cls in BATCH_GUARDS if cls.on_train_begin is not Guard.on_train_begin]
    assert sorted(c.__name__ for c in with_begin) == sorted(c.__name__ for c in checks + prepare)
    names = {g.name for g in start_guards(rl_guards.GuardsConfig())}
    assert "rollouts" not in names and "drift" not in names and "preflight" in names


@pytest.mark.slow
def test_preflight_on_a_finished_runs_yaml_changes_nothing_in_its_folder(
    make_grpo_trainer: Any, tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    dataset = make_dataset(thinking=True)
    dataset.to_json(str(data_dir / "train.jsonl"))
    trainer = make_grpo_trainer(
        train_dataset=dataset,
        output_dir=str(out),
        max_steps=3,
        save_strategy="steps",
        save_steps=2,
        chat_template_kwargs={"enable_thinking": True},
    )
    rl_guards.install(trainer, {"rollouts": {"every_steps": 1}})
    trainer.train()
    store = RolloutStore(out)
    assert store.steps() == [1, 2, 3] and (store.folder / "index.jsonl").read_text().count("\n") == 3
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()

    config = {
        "model_name_or_path": tiny.model_dir,
        "dataset_name": str(data_dir),
        "reward_funcs": ["rl_guards.testing.rewards.arith_correct", "rl_guards.testing.rewards.echo_match"],
        "output_dir": str(out),  # the run's own folder
        "chat_template_kwargs": {"enable_thinking": True},
        "max_completion_length": 16,
        "guards": {"rollouts": {"every_steps": 1}},
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(config))
    before = _files(out)
    capsys.readouterr()
    assert main(["preflight", str(path)]) in (0, 1)
    printed = capsys.readouterr()
    assert "start-of-training checks" in printed.out, printed.err[-2000:]
    after = _files(out)
    # 437f4ff: every dump moved to superseded/resumed_at_000000/ and index.jsonl emptied (3 dumps before, 0 after)
    assert sorted(after) == sorted(before)
    changed = [name for name in before if before[name] != after[name]]
    assert changed == []
    assert RolloutStore(out).steps() == [1, 2, 3]
