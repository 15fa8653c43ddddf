"""Randomised kill-and-resume: a guarded GRPO run SIGKILLed at 20+ random points across seeds (inside a dump write,
mid-checkpoint, right after a checkpoint, between steps), resumed each time from its newest complete checkpoint.

For each seed, once the run finally finishes (``tests/reliability/kill_campaign.py``):

- every step of the final trajectory has exactly one dump, of one batch of distinct rows; no temp file is left;
- every checkpoint has exactly one tagged dump, the one of its last step;
- the guards' saved state and finding counts equal an uninterrupted accounting: the same guards replayed in one
  process over the final trajectory's rows (TRL's own data order after a resume may differ from an uninterrupted
  run's, so the rows, not a second run, are the reference);
- the per-task curves in ``log_history`` have one entry per step that adds up to the batch and matches the dump.

One seed resumes every time with ``restore_callback_states_from_checkpoint=True`` and must meet all of the above.
Two more campaigns (issue 22) resume a checkpoint written without rl_guards, and checkpoints whose rl_guards
section was damaged before the resume (extra field, missing field, wrong type, not a dict, future version).
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

SCRIPT = Path(__file__).parent / "kill_campaign.py"
SEEDS = (11, 12, 13, 14, 15)
MODES = {15: "restore_callbacks"}  # kill_campaign.py --mode; the other seeds: plain
VARIANTS = {16: "unguarded_first", 17: "damaged"}  # campaigns with their own checks (below)
KILLS_PER_SEED = 5
MAX_STEPS = 11
SAVE_STEPS = 2
BATCH = 8  # tiny_grpo_config: 2 prompts x 4 generations
CONFIG = {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}, "truncation": {"max_rate": 0.5}}
REPLAYED = (TaskRewardMonitor, DeadGroupGuard, TruncationGuard, ThinkTagsGuard)


def _campaign(out: Path, seed: int, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, str(SCRIPT), str(out), "--seed", str(seed), "--kills", str(KILLS_PER_SEED)]
    cmd += ["--max_steps", str(MAX_STEPS), "--mode", mode]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def all_campaigns(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Run every campaign, two at a time (2 cores); each in its own folder."""
    root = tmp_path_factory.mktemp("kill_resume")
    modes = {seed: MODES.get(seed, "plain") for seed in SEEDS} | VARIANTS
    outs = {seed: root / f"seed{seed}" for seed in modes}
    order = list(modes)
    for pair in (order[i : i + 2] for i in range(0, len(order), 2)):
        procs = {seed: _campaign(outs[seed], seed, modes[seed]) for seed in pair}
        for seed, proc in procs.items():
            assert proc.wait(timeout=900) == 0, (outs[seed] / "attempts.log").read_text()[-4000:]
    return outs


@pytest.fixture(scope="module")
def campaigns(all_campaigns: dict[int, Path]) -> dict[int, Path]:
    """The campaigns every invariant below holds for."""
    return {seed: all_campaigns[seed] for seed in SEEDS}


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
    assert [e["step"] for e in index] == list(range(1, MAX_STEPS + 1))  # TRL's steps
    for step in range(1, MAX_STEPS + 1):
        rows = store.load(step)
        assert len(rows) == BATCH and sorted(r["row"] for r in rows) == list(range(BATCH)), step
        assert {r["step"] for r in rows} == {step}
    checkpoints = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert checkpoints == [*range(SAVE_STEPS, MAX_STEPS, SAVE_STEPS), MAX_STEPS]
    tagged = Counter(e["checkpoint"] for e in index if e["checkpoint"] is not None)
    assert tagged == Counter(checkpoints), index
    assert all(e["step"] == e["checkpoint"] for e in index if e["checkpoint"] is not None)  # one numbering
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
        dumped = Counter(r["task"] for r in store.load(step))  # one numbering: the batch trained in that step
        assert rows == {t: float(n) for t, n in dumped.items()}, step


# ----- issue 22: resuming what another setup wrote -----------------------------------------------------------------
def _restores(out: Path) -> list[dict[str, Any]]:
    """What each guarded attempt restored at train begin (kill_campaign.py writes one line per attempt)."""
    return [json.loads(line) for line in (out / "restores.jsonl").read_text().splitlines()]


def _well_formed_sections(out: Path, damaged: set[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """Every complete checkpoint's rl_guards attributes (and the run's final state), each a version-1 section;
    ``damaged``: checkpoints the campaign damaged (still valid JSON)."""
    found = {}
    for path in [*sorted(out.glob("checkpoint-*/trainer_state.json")), out / "trainer_state.json"]:
        sections = json.loads(path.read_text())["stateful_callbacks"]  # valid JSON, every file
        if "GuardRunState" in sections and path.parent.name not in damaged:
            saved = sections["GuardRunState"]
            assert isinstance(saved, dict) and saved["attributes"]["version"] == 1, path
            found[path.parent.name] = saved["attributes"]
    return found


def test_kills_after_resuming_a_checkpoint_written_without_rl_guards(all_campaigns: dict[int, Path]) -> None:
    out = all_campaigns[16]
    attempts = _attempts(out)
    assert not attempts[0]["guarded"] and attempts[0]["killed"] and attempts[1]["resumed_from"] == "checkpoint-2"
    assert attempts[-1]["exit_code"] == 0 and _final_state(out)["global_step"] == MAX_STEPS
    assert sum(a["killed"] for a in attempts) >= 3, attempts
    # 437f4ff: KeyError 'GuardRun' at the first guarded checkpoint, checkpoint-4 without trainer_state.json.
    sections = _well_formed_sections(out)
    checkpoints = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert checkpoints == [*range(SAVE_STEPS, MAX_STEPS, SAVE_STEPS), MAX_STEPS]
    assert set(sections) == {f"checkpoint-{c}" for c in checkpoints[1:]} | {out.name}  # all but the unguarded one
    assert sections[out.name]["batches_seen"] == MAX_STEPS - SAVE_STEPS  # guarded from step 2 on, nothing twice
    assert RolloutStore(out).steps() == list(range(SAVE_STEPS + 1, MAX_STEPS + 1))  # TRL's steps 3..MAX_STEPS
    assert all(r["not_restored_warnings"] == 0 for r in _restores(out))  # no section is not a damaged section


def test_kills_with_damaged_sections_are_said_once_per_resume(all_campaigns: dict[int, Path]) -> None:
    out = all_campaigns[17]
    attempts = _attempts(out)
    assert attempts[-1]["exit_code"] == 0 and _final_state(out)["global_step"] == MAX_STEPS
    resumed = [a for a in attempts if a["resumed_from"] is not None]
    assert all(a["damage"] is not None for a in resumed)  # every resume read a damaged section
    assert len({a["damage"] for a in resumed}) >= 4, attempts  # most kinds of damage, in one run
    assert {a["restore"] for a in resumed} == {False, True}, attempts  # with and without HF's callback restore
    restores = _restores(out)
    assert [r["resumed_from"] for r in restores] == [a["resumed_from"] for a in attempts]
    # Each resume warned exactly once (437f4ff: most raised at resume), a fresh start never.
    for line in restores:
        assert line["not_restored_warnings"] == (0 if line["resumed_from"] is None else 1), line
    damaged = {a["resumed_from"] for a in resumed}
    written = _well_formed_sections(out, damaged)  # every other checkpoint holds a complete section of this version
    assert set(written) == {p.parent.name for p in out.glob("*/trainer_state.json")} - damaged | {out.name}
    store = RolloutStore(out)
    assert store.steps() == list(range(1, MAX_STEPS + 1))  # TRL's steps
    for step in range(1, MAX_STEPS + 1):
        assert len(store.load(step)) == BATCH, step
