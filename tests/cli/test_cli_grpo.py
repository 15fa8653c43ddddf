"""``rl-guards grpo --config grpo.yaml``: the YAML ``trl grpo`` takes plus a ``guards:`` section, launched through
accelerate like ``trl grpo``, trains the tiny fixture with every guard installed (read back from the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_guards.cli.grpo import split_guards
from rl_guards.rollouts.findings import find_findings_file, load_findings
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.testing import make_dataset
from rl_guards.trl.script_args import parse_trl_yaml


def _yaml(tiny: Any, root: Path, **extra: Any) -> dict[str, Any]:
    data_dir = root / "data"
    data_dir.mkdir(exist_ok=True)
    make_dataset(thinking=True).to_json(str(data_dir / "train.jsonl"))
    return {
        "model_name_or_path": tiny.model_dir,
        "dataset_name": str(data_dir),
        "reward_funcs": ["rl_guards.testing.rewards.arith_correct", "rl_guards.testing.rewards.echo_match"],
        "output_dir": str(root / "out"),
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 16,
        "max_steps": 2,
        "save_steps": 2,
        "logging_steps": 1,
        "report_to": "none",
        "chat_template_kwargs": {"enable_thinking": True},
        **extra,
    }


@pytest.mark.slow
def test_trl_accepts_the_yaml_once_the_guards_section_is_moved_out(tiny: Any, tmp_path: Path) -> None:
    data = _yaml(tiny, tmp_path, guards={"rollouts": {"every_steps": 1}, "think_tags": {"mode": "raise"}})
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    argv, config = split_guards(["--config", str(path), "--guards_set", "dead_groups.warn_after_steps=2"], tmp_path)
    assert config.rollouts.every_steps == 1 and config.think_tags.mode == "raise"
    assert config.dead_groups.warn_after_steps == 2
    trl_yaml = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
    assert "guards" not in trl_yaml
    parse_trl_yaml(trl_yaml)  # TRL's own parser accepts it; unknown keys are refused
    with pytest.raises(Exception, match="rejected"):
        parse_trl_yaml({**trl_yaml, "guards": {"rollouts": {}}})


@pytest.mark.slow
def test_rl_guards_grpo_trains_with_every_guard(tiny: Any, tmp_path: Path) -> None:
    data = _yaml(tiny, tmp_path, guards={"rollouts": {"every_steps": 1}, "dead_groups": {"warn_after_steps": 2}})
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "rl_guards.cli.main", "grpo", "--config", str(path)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert "GuardRunState" in state["stateful_callbacks"]  # the guards' state is saved with the checkpoint
    logged = {k for entry in state["log_history"] for k in entry}
    assert {"rl_guards/masking/checked_batches", "rl_guards_task/arith/reward_mean"} <= logged
    assert RolloutStore(out).steps() == [1, 2]  # rollouts.every_steps=1 from the guards: section (TRL's steps)
    printed = done.stdout + done.stderr
    assert "dead_groups/dead_task" in printed  # warn_after_steps=2 from the guards: section
    # Issue 38 #1: each finding said once (e1b9f62: a Python warning pointing at rl_guards' source, then the same
    # text from the logger), and the end-of-run findings table, as the library route prints it
    said = [line for line in printed.splitlines() if line.startswith("[rl_guards/dead_groups] warning: task ")]
    assert len(said) == len({line.split("'")[1] for line in said}), said  # once per task
    assert "RLGuardsWarning" not in printed and "session.py" not in printed
    table = printed[printed.index("rl_guards findings") :]
    assert "severity" in table and "dead_groups/dead_task" in table and "per task (first -> last" in table


def test_guards_section_file_and_sets_are_layered(tmp_path: Path) -> None:
    """Issue 23 #7: the YAML's guards: section < --guards_config < --guards_set, field by field (the file used to
    replace the section whole: rollouts.every_steps came out 10, not the section's 2)."""
    from rl_guards.cli.grpo import split_guards
    from rl_guards.config import GuardsConfig

    grpo_yaml = tmp_path / "grpo.yaml"
    grpo_yaml.write_text(
        "output_dir: out\nguards:\n  rollouts: {every_steps: 2}\n  think_tags: {mode: log, max_anomaly_rate: 0.4}\n"
    )
    guards_yaml = tmp_path / "guards.yaml"
    guards_yaml.write_text("think_tags: {mode: raise}\ntruncation: {max_rate: 0.2}\n")
    work = tmp_path / "work"
    work.mkdir()
    argv = ["--config", str(grpo_yaml), "--guards_config", str(guards_yaml), "--guards_set", "truncation.max_rate=0.3"]
    rest, config = split_guards(argv, work)
    assert config.rollouts.every_steps == 2  # the section, untouched by the file
    assert config.think_tags.mode == "raise" and config.think_tags.max_anomaly_rate == 0.4  # file over section
    assert config.truncation.max_rate == 0.3  # --guards_set over the file
    assert rest.count("--guards_config") == 1  # the merged config travels as one file
    shipped = GuardsConfig.from_yaml(rest[rest.index("--guards_config") + 1])
    assert shipped.with_overrides(["truncation.max_rate=0.3"]) == config


@pytest.mark.slow
def test_a_healthy_rl_guards_grpo_run_is_silent(tiny: Any, tmp_path: Path) -> None:
    """Issue 20: the healthy corpus through the CLI route too: default guards, no warning, every status line ok."""
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(_yaml(tiny, tmp_path)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "rl_guards.cli.main", "grpo", "--config", str(path)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    assert "RLGuardsWarning" not in printed, printed[-3000:]
    status = [line for line in printed.splitlines() if line.startswith("[rl_guards] step ")]
    assert status and all(line.endswith(": ok") for line in status), status


STOPPER = '''
def fails_from_step_3(completions, trainer_state=None, **kwargs):
    """Pays nothing; raises on every row of the batch generated at global step 2 (TRL's step 3) and later."""
    if trainer_state is not None and trainer_state.global_step >= 2:
        raise ValueError("planted reward failure")
    return [0.0] * len(completions)
'''


@pytest.mark.slow
def test_a_guard_stop_is_one_message_its_own_exit_status_and_its_own_step(tiny: Any, tmp_path: Path) -> None:
    """Issue 23 #2: a guard stop under rl-guards grpo used to exit 1 with three tracebacks ending in a
    CalledProcessError, and logged the failing batch's metrics at the previous step's x."""
    from rl_guards.errors import GUARD_STOP_EXIT_CODE
    from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

    (tmp_path / "stopper.py").write_text(STOPPER)
    data = _yaml(tiny, tmp_path, guards={"reward_errors": {"mode": "raise"}, "rollouts": {"every_steps": 1}})
    data.update(
        reward_funcs=[*data["reward_funcs"], "stopper.fails_from_step_3"],
        max_steps=4, report_to="wandb", run_name="stopped",
    )  # fmt: skip
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    cmd = [sys.executable, "-m", "rl_guards.cli.main", "grpo", "--config", str(path)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    printed = done.stdout + done.stderr
    assert done.returncode == GUARD_STOP_EXIT_CODE == 3, printed[-3000:]
    assert "Traceback" not in printed and "CalledProcessError" not in printed, printed[-3000:]
    # The guard's message, once: the stop line names the guard and TRL's step of the failing batch.
    assert printed.count("the reward_errors guard stopped the run at step 3") == 1, printed[-3000:]
    assert printed.count("[rl_guards/reward_errors] reward function 'fails_from_step_3' raised") == 1, printed[-3000:]
    # W&B: one point per step, the failing batch's metrics at its own step (3), not a second point at step 2.
    run = read_offline_run(find_offline_runs(tmp_path)[-1])
    xs = [row["train/global_step"] for row in run.history if "train/reward" in row]
    assert xs == [1, 2, 3], run.history
    assert run.summary.get("rl_guards/stopped_by") == "reward_errors/raised:fails_from_step_3 at step 3"
    last = RolloutStore(tmp_path / "out").index()[-1]
    assert (last["step"], last["reason"]) == (3, "stopped")  # the failing batch, on disk under its own step
    stop = load_findings(find_findings_file(tmp_path / "out")).stop  # and the stop, next to it (issue 23 #3)
    assert stop is not None and (stop["guard"], stop["step"]) == ("reward_errors", 3)


@pytest.mark.slow
def test_a_crash_under_rl_guards_grpo_keeps_its_traceback_and_is_no_guard_stop(tiny: Any, tmp_path: Path) -> None:
    """The other side of issue 23 #2: a real crash (here a reward function raising, with reward_errors off) still
    shows its own traceback and exits with a crash's status, and the launcher adds one line, not a second traceback."""
    (tmp_path / "stopper.py").write_text(STOPPER)
    data = _yaml(tiny, tmp_path, guards={"reward_errors": {"enabled": False}})
    data.update(reward_funcs=[*data["reward_funcs"], "stopper.fails_from_step_3"], max_steps=4)
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    cmd = [sys.executable, "-m", "rl_guards.cli.main", "grpo", "--config", str(path)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    printed = done.stdout + done.stderr
    assert done.returncode not in (0, 2, 3), printed[-3000:]
    assert "Traceback" in printed and "ValueError: planted reward failure" in printed, printed[-3000:]
    assert "CalledProcessError" not in printed and "guard stopped the run" not in printed, printed[-3000:]
    assert printed.count("rl-guards grpo: the training process failed") == 1, printed[-3000:]
