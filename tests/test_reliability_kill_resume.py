"""Randomised kill-and-resume: a guarded GRPO run SIGKILLed at 20+ random points across seeds (inside a dump write,
mid-checkpoint, right after a checkpoint, between steps), resumed each time from its newest complete checkpoint.

For each seed, once the run finally finishes (``tests/reliability/kill_campaign.py``):

- every step of the final trajectory has exactly one dump, of one batch of distinct rows; no temp file is left;
- every checkpoint has exactly one tagged dump, the one of its last step;
- the guards' saved state and finding counts equal an uninterrupted accounting: the same guards replayed in one
  process over the final trajectory's rows (TRL's own data order after a resume may differ from an uninterrupted
  run's, so the rows, not a second run, are the reference);
- the per-task curves in ``log_history`` have one entry per step that adds up to the batch and matches the dump.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.metric_keys import parse_task_metric_key
from rl_guards.guards.base import GuardSession, RunContext, run_hook
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.rollouts.reader import RolloutStore

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "reliability" / "kill_campaign.py"
SEEDS = (11, 12, 13, 14)
KILLS_PER_SEED = 5
MAX_STEPS = 11
SAVE_STEPS = 2
BATCH = 8  # tiny_grpo_config: 2 prompts x 4 generations
CONFIG = {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}, "truncation": {"max_rate": 0.5}}
REPLAYED = (TaskRewardMonitor, DeadGroupGuard, TruncationGuard, ThinkTagsGuard)


def _campaign(out: Path, seed: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, str(SCRIPT), str(out), "--seed", str(seed), "--kills", str(KILLS_PER_SEED)]
    cmd += ["--max_steps", str(MAX_STEPS)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def campaigns(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Run the seeds' campaigns, two at a time (2 cores); each in its own folder."""
    root = tmp_path_factory.mktemp("kill_resume")
    outs = {seed: root / f"seed{seed}" for seed in SEEDS}
    for pair in (SEEDS[:2], SEEDS[2:]):
        procs = {seed: _campaign(outs[seed], seed) for seed in pair}
        for seed, proc in procs.items():
            assert proc.wait(timeout=900) == 0, (outs[seed] / "attempts.log").read_text()[-4000:]
    return outs


def _attempts(out: Path) -> list[dict[str, Any]]:
    return json.loads((out / "campaign.json").read_text())["attempts"]


def _final_state(out: Path) -> dict[str, Any]:
    return json.loads((out / "trainer_state.json").read_text())


def _guard_attributes(state: dict[str, Any]) -> dict[str, Any]:
    saved = state["stateful_callbacks"]["GuardRunState"]
    return (saved[-1] if isinstance(saved, list) else saved)["attributes"]


def test_at_least_twenty_kills_across_the_seeds_and_every_run_finishes(campaigns: dict[int, Path]) -> None:
    kills: Counter[str] = Counter()
    for out in campaigns.values():
        attempts = _attempts(out)
        assert attempts[-1]["exit_code"] == 0 and not attempts[-1]["killed"]
        kills.update(a["point"] for a in attempts if a["killed"])
        assert _final_state(out)["global_step"] == MAX_STEPS
    assert sum(kills.values()) >= 20, kills
    assert len(kills) >= 3, kills  # the kills fell at several kinds of points


@pytest.mark.parametrize("seed", SEEDS)
def test_one_dump_per_step_and_one_tagged_dump_per_checkpoint(campaigns: dict[int, Path], seed: int) -> None:
    out = campaigns[seed]
    store = RolloutStore(out)
    index = store.index()
    assert [e["step"] for e in index] == list(range(MAX_STEPS))
    for step in range(MAX_STEPS):
        rows = store.load(step)
        assert len(rows) == BATCH and sorted(r["row"] for r in rows) == list(range(BATCH)), step
        assert {r["step"] for r in rows} == {step}
    checkpoints = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert checkpoints == [*range(SAVE_STEPS, MAX_STEPS, SAVE_STEPS), MAX_STEPS]
    tagged = Counter(e["checkpoint"] for e in index if e["checkpoint"] is not None)
    assert tagged == Counter(checkpoints), index
    assert all(e["step"] == e["checkpoint"] - 1 for e in index if e["checkpoint"] is not None)
    assert not list(store.folder.glob(".*.tmp-*"))


def _replay(store: RolloutStore) -> tuple[GuardSession, dict[str, dict[str, Any]]]:
    """The replayable guards over the dumped batches, in step order, in one uninterrupted session."""
    config = GuardsConfig.from_dict(CONFIG)
    guards = [cls(config) for cls in REPLAYED]
    for guard in guards:
        guard.setup(RunContext(chat_template_kwargs={}))
    session = GuardSession()
    for step in store.steps():
        rows = sorted(store.load(step), key=lambda r: r["row"])
        names = [k.removeprefix("reward/") for k in rows[0] if k.startswith("reward/")]
        batch = RolloutBatch(
            step=step,
            mode="train",
            num_generations=4,
            reward_names=names,
            reward_weights=[1.0] * len(names),
            rewards=[[r[f"reward/{n}"] for n in names] for r in rows],
            advantages=[r["advantage"] for r in rows],
            tasks=[r["task"] for r in rows],
            completions=[r["completion_text"] for r in rows],
            completion_ids=[list(r["completion_ids"]) for r in rows],
            prompt_ids=[[] for _ in rows],
            truncated=[r["truncated"] for r in rows],
            thinking=[r["thinking"] for r in rows],
            max_completion_length=16,
            prompt_opened=[False] * len(rows),
        )
        for guard in guards:
            run_hook(guard, "on_batch", session, step, batch)
        session.pop_metrics()
    return session, {g.name: g.state_dict() for g in guards}


@pytest.mark.parametrize("seed", SEEDS)
def test_guard_state_and_counts_equal_an_uninterrupted_accounting(campaigns: dict[int, Path], seed: int) -> None:
    out = campaigns[seed]
    attributes = _guard_attributes(_final_state(out))
    session, states = _replay(RolloutStore(out))
    for name, state in states.items():
        assert attributes["guards"][name] == state, name
    replayed = {g.name for g in (cls(GuardsConfig()) for cls in REPLAYED)}
    counts = {(g, k): c for g, k, c, *_ in attributes["session"]["counts"] if g in replayed}
    assert counts == dict(session.counts)
    assert attributes["batches_seen"] == MAX_STEPS
    assert attributes["guards"]["masking"]["checked"] == MAX_STEPS


@pytest.mark.parametrize("seed", SEEDS)
def test_per_task_curves_are_continuous(campaigns: dict[int, Path], seed: int) -> None:
    out = campaigns[seed]
    store = RolloutStore(out)
    per_step = []
    for entry in _final_state(out)["log_history"]:
        rows = {}
        for key, value in entry.items():
            parsed = parse_task_metric_key(key)
            if parsed is not None and parsed[1] == "rows":
                rows[parsed[0]] = value
        if rows:
            per_step.append((entry["step"], rows))
    assert [s for s, _ in per_step] == list(range(1, MAX_STEPS + 1))
    for step, rows in per_step:
        dumped = Counter(r["task"] for r in store.load(step - 1))  # the batch generated at global step - 1
        assert rows == {t: float(n) for t, n in dumped.items()}, step
