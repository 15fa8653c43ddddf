"""``rl-guards preflight`` takes the ``trl grpo`` YAML and reaches the verdict training start reaches, by the same
code path (the guards' start checks on the context install() builds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import rl_guards
from rl_guards.cli.main import main
from rl_guards.errors import TemplateError
from rl_guards.testing import make_dataset

pytestmark = pytest.mark.slow  # every test here builds a real GRPOTrainer on the tiny model


def _config(tiny: Any, root: Path, thinking: Any, **extra: Any) -> Path:
    data_dir = root / "data"
    data_dir.mkdir(exist_ok=True)
    make_dataset(thinking=thinking).to_json(str(data_dir / "train.jsonl"))
    data = {
        "model_name_or_path": tiny.model_dir,
        "dataset_name": str(data_dir),
        "reward_funcs": ["rl_guards.testing.rewards.arith_correct", "rl_guards.testing.rewards.echo_match"],
        "output_dir": str(root / "out"),
        "chat_template_kwargs": {"enable_thinking": True},
        "loss_type": "dr_grpo",
        "max_completion_length": 16,
        **extra,
    }
    path = root / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _train_start(make_grpo_trainer: Any, thinking: Any) -> Any:
    trainer = make_grpo_trainer(
        train_dataset=make_dataset(thinking=thinking), max_steps=1, chat_template_kwargs={"enable_thinking": True}
    )
    run = rl_guards.install(trainer)
    return trainer, run


def test_mixed_thinking_column_same_verdict_as_training(
    tiny: Any, tmp_path: Path, make_grpo_trainer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", str(_config(tiny, tmp_path, "mixed"))]) == 1
    out = capsys.readouterr().out
    assert "template/thinking_flag_ignored" in out and "blocking: training would stop" in out
    trainer, run = _train_start(make_grpo_trainer, "mixed")
    with pytest.raises(TemplateError, match=r"thinking_flag_ignored|global chat_template_kwargs"):
        trainer.train()
    assert {f.kind for f in run.findings if f.severity == "blocking"} == {"thinking_flag_ignored"}


def test_clean_data_passes_both(
    tiny: Any, tmp_path: Path, make_grpo_trainer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", str(_config(tiny, tmp_path, True))]) == 0
    assert "ok: training would start" in capsys.readouterr().out
    trainer, run = _train_start(make_grpo_trainer, True)
    trainer.train()
    assert not [f for f in run.findings if f.severity == "blocking"]


def test_guards_section_and_overrides_apply(tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tiny, tmp_path, "mixed", guards={"template": {"mode": "warn"}})
    assert main(["preflight", str(path)]) == 0  # the template guard only warns: training would start
    assert "thinking_flag_ignored" in capsys.readouterr().out
    assert main(["preflight", str(path), "--guards_set", "template.mode=raise"]) == 1


def test_per_row_thinking_from_the_config_passes_both(
    tiny: Any, tmp_path: Path, make_grpo_trainer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fix the mixed-column message names, reachable without code (rl-guards grpo, callbacks): the guards config.
    path = _config(tiny, tmp_path, "mixed", guards={"think_tags": {"per_row_thinking": True}})
    assert main(["preflight", str(path)]) == 0
    assert "thinking_flag_ignored" not in capsys.readouterr().out
    trainer = make_grpo_trainer(
        train_dataset=make_dataset(thinking="mixed"), max_steps=1, chat_template_kwargs={"enable_thinking": True}
    )
    run = rl_guards.install(trainer, {"think_tags": {"per_row_thinking": True}})
    trainer.train()
    assert not [f for f in run.findings if f.severity == "blocking"], run.summary()
    prompts = [trainer.processing_class.decode(ids) for ids in run.last_batch.prompt_ids if ids]
    assert any(p.rstrip().endswith("</think>") for p in prompts)  # non-thinking rows rendered with the empty block
    assert any(not p.rstrip().endswith("</think>") for p in prompts)  # thinking rows without it


def test_reward_sanity_runs_on_the_scripts_reward_functions(
    tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tiny, tmp_path, True)
    data = yaml.safe_load(path.read_text())
    data["reward_funcs"] = ["test_preflight_cli.inverted_arith", "rl_guards.testing.rewards.echo_match"]
    path.write_text(yaml.safe_dump(data))
    assert main(["preflight", str(path)]) == 1
    assert "reward_sanity/reference_pairs" in capsys.readouterr().out


def inverted_arith(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    from rl_guards.testing.rewards import arith_correct

    return [None if v is None else 1.0 - v for v in arith_correct(completions, answer, task)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reward_funcs": ["no_such_module.reward"]}, "could not check"),
        ({"not_a_trl_field": 1}, "rejected"),
        ({"model_name_or_path": "/nonexistent/model"}, "not a local directory"),
    ],
)
def test_what_cannot_be_checked_exits_2(
    tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    path = _config(tiny, tmp_path, True)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **change}))
    assert main(["preflight", str(path)]) == 2
    assert message in capsys.readouterr().err
