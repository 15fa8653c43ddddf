"""Task guards on a real GRPOTrainer with the tiny offline model: clean run, planted misrouting, planted dead task."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import rl_guards
from rl_guards.config import GuardsConfig
from rl_guards.errors import DeadGradientError, RoutingError, TruncationError
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.reward_sanity import RewardSanityGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.rewards.routing import route
from rl_guards.testing import TinySetup, make_dataset
from rl_guards.testing.rewards import arith_correct, completion_text, echo_match, length_penalty

MIXED = make_dataset(thinking="mixed")
TASK_GUARDS = [TaskRewardMonitor, RoutingGuard, DeadGroupGuard, TruncationGuard, SlicingGuard, RewardSanityGuard]


def arith_anywhere(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """The planted routing bug: an arith reward that scores every row, echo rows included."""
    return [float(str(a) in completion_text(c)) for c, a in zip(completions, answer, strict=True)]


def echo_always_passes(completions: list[Any], task: list[str], **kwargs: Any) -> list[float | None]:
    """The planted dead task: 1.0 for every echo row, so every echo group has zero advantage."""
    return [1.0 if t == "echo" else None for t in task]


@pytest.mark.slow
def test_clean_routed_run_is_silent_and_logs_per_task_keys(make_grpo_trainer: Any, tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        yaml.safe_dump(
            [
                {
                    "task": "arith",
                    "prompt": [{"role": "user", "content": "What is 2+2?"}],
                    "answer": "4",
                    "good": ["<think>\n2+2=4\n</think>\n\n4"],
                    "bad": ["<think>\n2+2=5\n</think>\n\n5", "<think>\n4"],
                },
                {
                    "task": "echo",
                    "prompt": [{"role": "user", "content": "Repeat the word: apple"}],
                    "answer": "apple",
                    "good": ["apple"],
                    "bad": ["pear"],
                },
            ]
        )
    )
    config = GuardsConfig.from_dict(
        {
            "tasks": {"mode": "raise"},
            "dead_groups": {"mode": "raise"},
            "truncation": {"mode": "raise", "max_rate": 0.5},
            "slicing": {"mode": "raise"},
            "reward_sanity": {"cases_file": str(cases)},
            "metrics": "full",  # every per-task key is checked below
        }
    )
    trainer = make_grpo_trainer(
        reward_funcs=route({"arith": [arith_correct], "echo": [echo_match]}), dataset=MIXED, max_steps=3
    )
    run = rl_guards.install(trainer, config, guards=TASK_GUARDS)
    trainer.train()

    assert run.findings == [], run.summary()
    assert ("reward_sanity", "reward_sanity_ok") in run.session.notes
    keys = {k for row in trainer.state.log_history for k in row}
    for task in ("arith", "echo"):
        for name in ("reward_mean", "reward_std", "completion_length", "rows", "groups", "dead_group_share",
                     "dead_all_pass", "dead_all_fail", "live_groups", "zero_adv_token_share",
                     "truncated_rate"):  # fmt: skip (pass_rate / expected_dead_share: once a pass/fail score is known)
            assert f"rl_guards_task/{task}/{name}" in keys
    assert "rl_guards_task/arith/reward/arith_correct/mean" in keys
    assert "rl_guards_task/arith/reward/echo_match/mean" not in keys  # routed: never scores arith rows
    assert "rl_guards/routing/misrouted_rows" in keys
    rows = [r for r in trainer.state.log_history if "rl_guards_task/arith/rows" in r]
    assert all(r["rl_guards/routing/misrouted_rows"] == 0 and r["rl_guards/routing/unscored_rows"] == 0 for r in rows)
    # what the guards computed matches what TRL logged for the same batches
    for row in trainer.state.log_history:
        if (
            "rl_guards_task/arith/reward/arith_correct/mean" in row
            and row.get("rewards/arith_correct/mean") is not None
        ):
            assert row["rl_guards_task/arith/reward/arith_correct/mean"] == pytest.approx(
                row["rewards/arith_correct/mean"]
            )


@pytest.mark.slow
def test_planted_misrouted_reward_stops_the_run(make_grpo_trainer: Any) -> None:
    config = GuardsConfig.from_dict({"routing": {"routes": {"arith": ["arith_anywhere"], "echo": ["echo_match"]}}})
    trainer = make_grpo_trainer(reward_funcs=[arith_anywhere, echo_match], dataset=MIXED, max_steps=2)
    rl_guards.install(trainer, config, guards=[RoutingGuard])
    with pytest.raises(RoutingError, match="arith_anywhere") as err:
        trainer.train()
    assert "  echo  arith_anywhere" in str(err.value)  # the table row: task, function, rows
    assert trainer.state.global_step < 2  # stopped at the first batch holding echo rows


@pytest.mark.slow
def test_planted_dead_task_is_caught(make_grpo_trainer: Any) -> None:
    config = GuardsConfig.from_dict({"dead_groups": {"mode": "raise", "warn_after_steps": 2}})
    funcs = [*route({"arith": [length_penalty]}), echo_always_passes]  # arith stays live: lengths vary
    trainer = make_grpo_trainer(reward_funcs=funcs, dataset=MIXED, max_steps=4)
    run = rl_guards.install(trainer, config, guards=[DeadGroupGuard])
    with pytest.raises(DeadGradientError, match="task 'echo' contributed no gradient for 2") as err:
        trainer.train()
    # A reward that never varied is suspected before the task's difficulty; a constant is no pass/fail evidence,
    # so no pass rate is claimed (issue 20 #7: a metric means what its name says).
    assert "first check the reward function" in str(err.value)
    guard = run.guard("dead_groups")
    assert guard.streaks["echo"] == 2 and guard._pass_rate("echo") is None


@pytest.mark.slow
def test_length_probe_cli_on_the_tiny_model(tiny: TinySetup, tmp_path: Path, capsys: Any) -> None:
    from rl_guards.cli import probe_lengths

    make_dataset(n_per_task=4).save_to_disk(str(tmp_path / "ds"))
    parser = argparse.ArgumentParser()
    probe_lengths.register(parser.add_subparsers())
    out = tmp_path / "probe.json"
    args = parser.parse_args(
        [
            "probe-lengths",
            "--model",
            tiny.model_dir,
            "--dataset",
            str(tmp_path / "ds"),
            "--samples",
            "6",
            "--max-new-tokens",
            "4",
            "--output",
            str(out),
        ]
    )
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "completion lengths over 6 samples" in text and "true p99 is unknown" in text
    numbers = json.loads(out.read_text())
    # a 4-token cap: the tiny model's completions (6-16 tokens) all hit it
    assert numbers["num_completions"] == 6 and numbers["share_at_cap"] == 1.0 and numbers["lower_bound"] is True


@pytest.mark.slow
def test_probe_lengths_measures_completions_that_end(tiny: TinySetup, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from rl_guards.chat.length_probe import load_prompts, probe_lengths

    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text("\n".join(json.dumps({"prompt": p}) for p in make_dataset(n_per_task=4)["prompt"]))
    prompts = load_prompts(jsonl, samples=8)
    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir)
    probe = probe_lengths(model, tiny.tokenizer, prompts, max_new_tokens=48)
    assert len(probe.lengths) == 8 and not any(probe.hit_cap)
    assert probe.summary.max == max(probe.lengths) < 48 and not probe.summary.lower_bound
    assert probe.summary.recommended >= probe.summary.p99 * 1.25


@pytest.mark.slow
def test_planted_completion_slice_is_caught_on_a_real_run(make_grpo_trainer: Any) -> None:
    """Issue 25: the length bounds that spare decoding whole rows still let a ``completion[:N]`` cut through to the
    check. The cut sits between the model and the reward functions (wrapped after install, as user code would)."""
    config = GuardsConfig.from_dict({"slicing": {"mode": "raise"}})
    trainer = make_grpo_trainer(reward_funcs=[length_penalty], dataset=MIXED, max_steps=2)
    run = rl_guards.install(trainer, config, guards=[SlicingGuard])
    assert run.guard("slicing")._bounds is not None
    scored = trainer._calculate_rewards

    def cut(c: Any) -> Any:
        if isinstance(c, str):
            return c[:3]
        return [{**m, "content": m["content"][:3]} if m.get("role") == "assistant" else m for m in c]

    def sliced(inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        return scored(inputs, prompts, [cut(c) for c in completions], completion_ids_list)

    trainer._calculate_rewards = sliced
    with pytest.raises(TruncationError, match="cut short"):
        trainer.train()
    assert trainer.state.global_step == 0
