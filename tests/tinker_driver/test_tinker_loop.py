"""The cookbook's own, unmodified ``rl.train.main`` with rl_guards, against the local backend on the tiny fixture."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow


def _params(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_arithmetic_recipe_trains_for_real_and_a_healthy_run_is_silent(
    tiny: Any, tmp_path: Path, local: Any
) -> None:
    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
    from tinker_cookbook.rl import train

    import rl_guards.tinker
    from rl_guards.cli.main import main as cli_main
    from rl_guards.rollouts.reader import RolloutStore
    from rl_guards.tinker.backend.trainer import load_model

    log_path = tmp_path / "arith"
    config = train.Config(
        learning_rate=1e-3,
        dataset_builder=ArithmeticDatasetBuilder(
            batch_size=4,
            model_name_for_tokenizer=tiny.model_dir,
            renderer_name="qwen3_disable_thinking",
            n_batches=10,
            group_size=4,
        ),
        model_name=tiny.model_dir,
        recipe_name="rl_guards_test",
        renderer_name="qwen3_disable_thinking",
        max_tokens=12,
        log_path=str(log_path),
        max_steps=3,
        save_every=2,
        eval_every=0,
        num_groups_to_log=1,
    )
    config, run = rl_guards.tinker.guard(config, backend=local)
    assert config.base_url == local.url
    asyncio.run(run.main())

    calls = local.calls
    assert calls["/forward_backward"] == 3 and calls["/optim_step"] == 3 and calls["/asample"] == 3 * 16
    (trained,) = local.service._trained.values()
    assert trained.steps == 3
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    # the tiny model never adds two-digit numbers: every reward is 0, every advantage 0, so AdamW's steps move
    # nothing (the tiny tasks below do train: their rewards vary)
    assert all(r["env/all/reward/total"] == 0.0 for r in rows[:3])
    assert torch.equal(_params(trained.model), _params(load_model(tiny.model_dir)))
    assert [r["step"] for r in rows[:3]] == [0, 1, 2]
    assert all(abs(r["optim/kl_sample_train_v1"]) < 1e-4 for r in rows[:3])  # the sampler's logprobs are the trainer's
    # rl_guards' metrics reach the cookbook's own logger, in the iteration's row; the datums as sent are checked at
    # forward_backward, so their count shows in the next row
    assert "env/all/rl_guards/dead_groups/zero_adv_token_share" in rows[0]
    assert [r.get("env/all/rl_guards/masking/checked_batches") for r in rows[:3]] == [None, 1.0, 2.0]
    assert not [k for r in rows for k in r if k.startswith("rl_guards")]  # only under env/...
    assert run.findings == [], run.summary()  # healthy: silent
    checkpoints = [json.loads(line)["name"] for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints == ["000002", "final"]

    store = RolloutStore(log_path / "rl_guards")
    index = {e["step"]: e for e in store.index()}
    assert sorted(index) == [0, 1, 2]  # step 0 (every 10 steps), then the batch each checkpoint trained last
    assert index[1]["checkpoint"] == 2 and index[2]["checkpoint"] == 3
    rows0 = store.load(0)
    assert len(rows0) == 16 and {r["task"] for r in rows0} == {"problems"}  # the recipe's logging tag
    assert cli_main(["rollouts", str(log_path / "rl_guards"), "list"]) == 0
    assert not (log_path / "rl_guards" / "findings.jsonl").exists()  # nothing found, nothing written


def test_per_tag_metrics_agree_with_the_cookbook_and_see_the_groups_it_drops(cookbook_run: Any) -> None:
    result = cookbook_run(
        steps=2,
        guards_set=["metrics.level=full"],
        config_overrides={"remove_constant_reward_groups": True},
    )
    assert result.error is None, result.error
    # the cookbook counts the groups it kept; rl_guards saw every group before any was dropped
    key = "env/all/rl_guards_task/{}/dead_group_share"
    shares = [row[key.format(tag)] for row in result.metrics[:2] for tag in ("arith", "echo")]
    assert any(share > 0 for share in shares)
    # every group reached the guards: 8 groups x 4 rollouts per batch, whatever the loop dropped
    assert result.run.engine.last_batch is not None and len(result.run.engine.last_batch) == 32
    dropped = [32 - r["env/all/total_episodes"] for r in result.metrics[:2]]
    assert any(d > 0 for d in dropped), "some groups were constant and dropped by the loop"


def test_without_dropped_groups_the_dead_share_is_the_cookbooks_all_good_plus_all_bad(
    cookbook_run: Any, tiny: Any
) -> None:
    from rl_guards.tinker.backend.trainer import load_model

    result = cookbook_run(steps=2, guards_set=["metrics.level=full"])
    assert result.error is None, result.error
    (trained,) = result.backend.service._trained.values()
    assert trained.steps == 2 and not torch.equal(_params(trained.model), _params(load_model(tiny.model_dir)))
    for row in result.metrics[:2]:
        for tag in ("arith", "echo"):
            cookbook = row[f"env/{tag}/by_group/frac_all_good"] + row[f"env/{tag}/by_group/frac_all_bad"]
            assert row[f"env/all/rl_guards_task/{tag}/dead_group_share"] == pytest.approx(cookbook)
            assert row[f"env/all/rl_guards_task/{tag}/reward_mean"] == pytest.approx(row[f"env/{tag}/reward/total"])
            # per-task keys ride on the task's own groups: under the other tag they do not exist
            other = "echo" if tag == "arith" else "arith"
            assert f"env/{other}/rl_guards_task/{tag}/pass_rate" not in row
    default = cookbook_run(steps=1)
    keys = [k for k in default.metrics[0] if "rl_guards_task" in k]
    assert keys and not [k for k in keys if k.endswith(("/reward_mean", "/dead_group_share"))]  # the cookbook's twins


def test_a_stop_ends_the_cookbooks_own_main_with_the_guards_error_before_the_batch_trains(
    tiny: Any, tmp_path: Path, local: Any
) -> None:
    from tinker_cookbook.rl import train

    import rl_guards.tinker
    from rl_guards.errors import GroupIntegrityError
    from rl_guards.testing.tinker_envs import TinyTasksDatasetBuilder

    config = train.Config(
        learning_rate=1e-3,
        dataset_builder=TinyTasksDatasetBuilder(
            batch_size=4,
            group_size=4,
            model_name_for_tokenizer=tiny.model_dir,
            renderer_name="qwen3",
            mixed_groups=True,
        ),
        model_name=tiny.model_dir,
        recipe_name="rl_guards_test",
        renderer_name="qwen3",
        max_tokens=16,
        log_path=str(tmp_path / "stop"),
        base_url=local.url,
        max_steps=2,
        eval_every=0,
        num_groups_to_log=0,
    )
    config, run = rl_guards.tinker.guard(config)
    with pytest.raises(GroupIntegrityError, match="hold rollouts of different prompts"):
        asyncio.run(train.main(config))  # the cookbook's own main, called directly
    assert "/forward_backward" not in local.calls  # the failing batch never trained
    run.end()
    findings = tmp_path / "stop" / "rl_guards" / "findings.jsonl"
    records = [json.loads(line) for line in findings.read_text().splitlines()]
    assert {(r["type"], r.get("kind")) for r in records} >= {("finding", "mixed_group"), ("stop", "mixed_group")}


def test_a_stop_a_tolerant_strategy_swallows_is_raised_at_the_next_batch(cookbook_run: Any) -> None:
    from rl_guards.errors import GroupIntegrityError

    tolerant = {"rollout_error_tolerance": True}
    result = cookbook_run(steps=2, renderer="qwen3", mixed_groups=True, config_overrides=tolerant)
    assert isinstance(result.error, GroupIntegrityError)
    # the strategy dropped the last group (its compute_group_rewards raised) and trained the others; the next
    # get_batch raised the held stop before the second batch was sampled
    assert [r["step"] for r in result.metrics] == [0]
    assert result.backend.calls["/forward_backward"] == 1


def test_the_stray_think_penalty_is_a_reward_term_of_the_cookbook_env(cookbook_run: Any) -> None:
    result = cookbook_run(steps=1, tasks=("echo",), prefill="<think>\n", stray_think_penalty=True)
    assert result.error is None, result.error
    row = result.metrics[0]
    assert row["env/all/stray_think_penalty"] < -0.5  # most rows write think tags in a non-thinking run
    batch = result.run.engine.last_batch
    assert "stray_think_penalty" in batch.reward_names
    totals = [batch.total_reward(i) for i in range(len(batch))]
    assert sum(totals) / len(totals) == pytest.approx(row["env/all/reward/total"])  # the cookbook trained on it


def test_the_grader_seam_calls_the_envs_own_check_as_its_step_does(cookbook_run: Any) -> None:
    result = cookbook_run(steps=1, tasks=("echo",))
    assert result.error is None, result.error
    calls = result.run.grader_calls()
    batch = result.run.engine.last_batch
    assert len(calls) == len(batch) and [c.row for c in calls] == list(range(len(batch)))
    for call in calls:
        assert call.stateful is None and call.reference == batch.columns["answer"][call.row]
        correct = batch.rewards[call.row][batch.reward_names.index("correct")]
        assert call.grade(call.response) == correct  # the env's own check_answer, on the text its step graded


def test_a_resumed_run_restores_the_guards_state_saved_with_its_checkpoint(cookbook_run: Any, tmp_path: Path) -> None:
    log_path = tmp_path / "resumed"
    dead_tag = {
        "tasks": ("echo",), "tags": ("echo", "echo_dead"), "planted_tasks": ("echo_dead",), "grader": "never",
        # "never" pays no answer: reward sanity stops it (test_tinker_planted); off here, a task that cannot learn yet
        "guards_set": ["dead_groups.warn_after_steps=3", "reward_sanity.enabled=false"],
        "save_every": 1, "log_path": log_path,
    }  # fmt: skip
    first = cookbook_run(steps=2, **dead_tag)
    assert first.error is None and first.kinds() == set(), first.run.summary()  # a streak of 2: not yet
    assert {p.name for p in (log_path / "rl_guards" / "state").glob("*.json")} == {"000001.json", "000002.json",
                                                                                  "final.json"}  # fmt: skip
    second = cookbook_run(steps=3, **dead_tag)  # the cookbook resumes at batch 2 from its last checkpoint
    assert second.error is None, second.error
    assert second.run.start_step == 2
    assert [r["step"] for r in second.metrics if "env/all/reward/total" in r] == [0, 1, 2]
    # the streak of 2 came back with the checkpoint's state: the third dead batch is the warn_after_steps-th
    assert ("dead_groups", "dead_task") in second.kinds(), second.run.summary()
