"""verl's legacy trainer path (``trainer.use_v1=false``) on CPU under one local Ray for the module: the agent loop
manager class verl loads from ``agent_loop_manager_class`` (GuardedAgentLoopManager), its agent loop worker (the tiny
model generating through TinyRolloutServer), verl's reward loop workers running GuardedRewardManager, and the
generation batch built as ``RayPPOTrainer.fit`` builds it (dataset, collate, uid, ``_get_gen_batch``, repeat)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.protocol")  # "verl" alone would find this folder (tests/ is on sys.path)

from _verl_rows import SCORER

from rl_guards.errors import MaskingError, RewardFunctionError, RewardProbeError
from rl_guards.testing.verl_run import ARITH, ECHO, compose_config, verl_row, write_parquet

pytestmark = pytest.mark.slow

ADD = "What is 3+4? Answer with the number."
ADD2 = "What is 2+5? Answer with the number."
CANNED = {"[empty]": ("", False)}  # an empty response (the model stopped at once, its EOS stripped by the server)


@pytest.fixture(scope="module")
def legacy(verl_ray: Any, tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.utils.import_utils import load_class_from_fqn

    from rl_guards.testing.verl_server import TinyRolloutServer

    out = tmp_path_factory.mktemp("legacy")
    config = compose_config(
        tiny.model_dir,
        out,
        scorer=SCORER + ":compute_score",
        response_length=32,
        overrides=[
            "trainer.use_v1=false",
            "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=rl_guards.verl.GuardedAgentLoopManager",
        ],
    )
    rewards = RewardLoopManager(config)
    cls = load_class_from_fqn(config.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "AgentLoopManager")
    manager = cls.create(
        config=config,
        llm_client=TinyRolloutServer(tiny.model_dir, 32, seed=2, canned=CANNED),
        reward_loop_worker_handles=rewards.reward_loop_workers,
    )
    return manager, config, tiny


def generation_batch(config: Any, tokenizer: Any, rows: list[dict[str, Any]], step: int, tmp: Path) -> Any:
    """The generation batch of one step as ``RayPPOTrainer.fit`` makes it."""
    import uuid

    import numpy as np
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = create_rl_dataset(write_parquet(tmp / f"step{step}.parquet", rows), config.data, tokenizer, None)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)  # uses no trainer state
    gen_batch.meta_info["global_steps"] = step
    return gen_batch.repeat(repeat_times=config.actor_rollout_ref.rollout.n, interleave=True)


def fresh_run(legacy: Any, tmp_path: Path, **section: Any) -> Any:
    """The manager's guards anew, with ``section`` (the reward workers keep their settings)."""
    from omegaconf import OmegaConf, open_dict

    from rl_guards.verl.run import VerlGuardRun

    manager, config, _ = legacy
    with open_dict(config):
        config.reward.rl_guards = OmegaConf.create({"output_dir": str(tmp_path), **section})
    manager.run = VerlGuardRun(config)
    return manager.run


def found(run: Any) -> set[tuple[str, str]]:
    return {(f.guard, f.kind) for f in run.findings if f.severity != "info"}


def test_a_clean_step_returns_verls_batch_and_logs_the_metrics_to_the_wandb_run(
    legacy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

    manager, config, tiny = legacy
    run = fresh_run(legacy, tmp_path / "run")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    wandb.init(project="rl_guards", mode="offline")  # the legacy trainer's Tracking starts the process's run
    rows = [verl_row(ADD, ARITH, 7, 0), verl_row("Repeat the word: river", ECHO, "river", 1)]
    out = manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 5, tmp_path))
    wandb.finish()
    assert out.batch["rm_scores"].shape == out.batch["responses"].shape and "rl_guards" in out.non_tensor_batch
    assert found(run) == set() and manager.delivered_to == "wandb"
    history = read_offline_run(find_offline_runs(tmp_path)[0])
    assert [s for s, _ in history.series("rl_guards/masking/checked_batches")] == [5]
    batch = run.engine.last_batch
    assert batch.step == 5 and batch.tasks.count(ARITH) == 4 and batch.reward_names == ["compute_score"]


def test_an_empty_responses_reward_on_padding_stops_the_step(legacy: Any, tmp_path: Path) -> None:
    """verl writes an empty response's reward on its last padding column (``rm_scores[i, valid_length - 1]`` with
    length 0); a scorer that gives every response a format credit puts 0.1 there. Caught before the batch trains."""
    manager, config, tiny = legacy
    fresh_run(legacy, tmp_path / "planted")
    rows = [verl_row(ADD + " [empty]", "plant/credit", 7, 0), verl_row(ADD, ARITH, 7, 1)]
    with pytest.raises(MaskingError, match=r"reward_position: 4 of 8 rows carry their reward on a position") as stop:
        manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 1, tmp_path))
    assert "⟨!" in str(stop.value)  # the offending padding position shown
    twin = fresh_run(legacy, tmp_path / "twin")  # an empty response the scorer pays nothing: no reward anywhere
    rows = [verl_row(ADD + " [empty]", ARITH, 7, 0), verl_row(ADD, ARITH, 7, 1)]
    manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 1, tmp_path))
    assert ("masking", "reward_position") not in found(twin)


def test_raise_mode_stops_the_step_with_the_guards_message(legacy: Any, tmp_path: Path) -> None:
    manager, config, tiny = legacy
    fresh_run(legacy, tmp_path, reward_errors={"mode": "raise"})
    rows = [verl_row(ADD, ARITH, 7, 0), verl_row(ADD, "plant/parse", "n/a", 1)]
    with pytest.raises(RewardFunctionError, match=r"raised on 4 of 8 rows at step 3") as stop:
        manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 3, tmp_path))
    assert "ValueError: invalid literal for int() with base 10: 'n/a'" in str(stop.value)


def test_the_probes_run_in_the_legacy_hook_and_stop_the_step_in_raise_mode(legacy: Any, tmp_path: Path) -> None:
    """The scorer that grades the thinking (planted_scorer.py), probed in ``generate_sequences`` after the rollout;
    the run's clock started before it (the probes' budget counts the rollout)."""
    manager, config, tiny = legacy
    fresh_run(legacy, tmp_path, probes={"budget": 100.0, "mode": "raise"})
    rows = [verl_row(ADD, "plant/thinking", 7, 0), verl_row(ADD2, "plant/thinking", 7, 1)]
    with pytest.raises(RewardProbeError, match="reads the thinking"):
        manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 4, tmp_path))
    twin = fresh_run(legacy, tmp_path / "twin", probes={"budget": 100.0, "mode": "raise"})
    rows = [verl_row(ADD, ARITH, 7, 0), verl_row(ADD2, ARITH, 7, 1)]
    manager.generate_sequences(generation_batch(config, tiny.tokenizer, rows, 4, tmp_path))
    assert found(twin) == set() and "probes: 1 round(s)" in twin.summary()


def test_validation_batches_pass_unguarded(legacy: Any, tmp_path: Path) -> None:
    manager, config, tiny = legacy
    run = fresh_run(legacy, tmp_path)
    batch = generation_batch(config, tiny.tokenizer, [verl_row(ADD, "my_dataset/v2", 7, 0)], 4, tmp_path)
    batch.meta_info["validate"] = True
    manager.generate_sequences(batch)
    assert run.steps_seen == 0 and found(run) == set()


def test_the_legacy_hook_refuses_the_v1_trainer(legacy: Any) -> None:
    from rl_guards.verl.agent_loop import GuardedAgentLoopManager

    _, config, _ = legacy
    config.trainer.use_v1 = True
    try:
        with pytest.raises(ValueError, match="GuardedReplayBuffer"):
            GuardedAgentLoopManager(config, llm_client=None)
    finally:
        config.trainer.use_v1 = False
