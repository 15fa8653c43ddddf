"""Issue 11 regressions in the TRL hook, on real GRPOTrainer runs of the tiny fixture: resumed runs finish with the
same accounting as an uninterrupted one, every checkpoint keeps its tagged dump, task names never collide or
explode into thousands of keys, a null task is the default task, and a masking stop leaves the batch on disk."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from datasets import Dataset

import rl_guards
from rl_guards.core.metric_keys import OTHER_SEGMENT, parse_task_metric_key
from rl_guards.core.run_summary import task_curves
from rl_guards.errors import MaskingError
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import read_dump_metadata, retag_dump, step_file_name
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import length_penalty

pytestmark = pytest.mark.slow

SAVE = {"save_strategy": "steps", "save_steps": 2, "max_steps": 4}


def _dumps(out: Path) -> dict[int, dict[str, Any]]:
    folder = out / "rl_guards" / "rollouts"
    return {int(p.stem.split("_")[1]): read_dump_metadata(p) for p in sorted(folder.glob("step_*.parquet"))}


def test_resume_after_a_finding_that_does_not_recur_finishes(make_grpo_trainer: Any, tmp_path: Path) -> None:
    # The rollouts folder is a file: every dump fails (write_failed) until the checkpoint; then the folder is fixed.
    out, blocked = tmp_path / "run", tmp_path / "blocked"
    blocked.write_text("not a folder")
    config = {"rollouts": {"every_steps": 1, "output_dir": str(blocked), "wandb_rows_per_task": 0}}
    first = make_grpo_trainer(output_dir=out, **SAVE)
    run = rl_guards.install(first, config)
    first.train()
    assert run.session.counts[("rollouts", "write_failed")] >= 1
    blocked.unlink()

    second = make_grpo_trainer(output_dir=out, **SAVE)
    resumed = rl_guards.install(second, config)
    second.train(resume_from_checkpoint=str(out / "checkpoint-2"))  # 0.1: KeyError ('rollouts', 'write_failed')
    rows = {(r["guard"], r["kind"]): r for r in resumed.session.summary_rows()}
    assert rows[("rollouts", "write_failed")]["first_step"] == 1  # the first step (TRL's) survives the resume
    assert "rollouts/write_failed" in resumed.summary()
    assert ("rollouts", "write_failed") in {(f.guard, f.kind) for f in resumed.findings}


def test_start_checks_are_counted_once_across_resumes(make_grpo_trainer: Any, tmp_path: Path) -> None:
    # A warm-up the constant schedule ignores: preflight warns about it at every start.
    warn = {"lr_scheduler_type": "constant", "warmup_steps": 1}
    straight = make_grpo_trainer(output_dir=tmp_path / "straight", **SAVE, **warn)
    reference = rl_guards.install(straight, {"rollouts": {"wandb_rows_per_task": 0}})
    straight.train()
    begin = {k: c for k, c in reference.session.counts.items() if k in reference.session.begin_keys}
    assert begin, reference.summary()  # the scenario: start checks found something

    out = tmp_path / "resumed"
    counts: Counter[tuple[str, str]] = Counter()
    for resume in (None, "checkpoint-2", "checkpoint-2", "checkpoint-4"):  # resumed three times
        trainer = make_grpo_trainer(output_dir=out, **SAVE, **warn)
        run = rl_guards.install(trainer, {"rollouts": {"wandb_rows_per_task": 0}})
        trainer.train(resume_from_checkpoint=str(out / resume) if resume else None)
        counts = run.session.counts
    assert {k: counts[k] for k in begin} == begin  # 0.1: 1 + number of resumes


def test_a_checkpoint_left_without_its_tagged_dump_is_tagged_on_resume(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, **SAVE)
    rl_guards.install(trainer, {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}})
    trainer.train()
    dumps = _dumps(out)
    assert dumps[2]["checkpoint"] == 2 and dumps[4]["checkpoint"] == 4  # TRL's numbering: checkpoint-k is step k
    # What a SIGKILL between the checkpoint's save and its dump's tag left behind: step 2's dump untagged.
    path = out / "rl_guards" / "rollouts" / step_file_name(2)
    retag_dump(path, 2)
    meta = read_dump_metadata(path)
    meta_untagged = {**meta, "checkpoint": None, "reason": "periodic"}
    table = pq.read_table(str(path))
    pq.write_table(table.replace_schema_metadata({b"rl_guards": json.dumps(meta_untagged).encode()}), str(path))
    assert read_dump_metadata(path)["checkpoint"] is None

    resumed = make_grpo_trainer(output_dir=out, **SAVE)
    run = rl_guards.install(resumed, {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}})
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert _dumps(out)[2]["checkpoint"] == 2
    assert ("rollouts", "retagged_dump") in run.session.notes


def test_the_checkpoint_dump_is_written_before_the_checkpoint(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    trainer = make_grpo_trainer(output_dir=out, **SAVE)
    rl_guards.install(trainer, {"rollouts": {"every_steps": 100, "wandb_rows_per_task": 0}})
    trainer.train()
    dumps = _dumps(out)
    assert sorted(dumps) == [1, 2, 4] and dumps[2]["checkpoint"] == 2 and dumps[4]["checkpoint"] == 4
    for step, checkpoint in ((2, 2), (4, 4)):
        written = (out / "rl_guards" / "rollouts" / step_file_name(step)).stat().st_mtime_ns
        assert written <= (out / f"checkpoint-{checkpoint}" / "trainer_state.json").stat().st_mtime_ns


def _task_dataset(tasks: list[Any]) -> Dataset:
    base = make_dataset(n_per_task=len(tasks))
    rows = [dict(base[i % len(base)]) for i in range(len(tasks))]
    for row, task in zip(rows, tasks, strict=True):
        row["task"] = task
    return Dataset.from_list(rows)


def test_task_names_that_once_collided_keep_their_own_curves(make_grpo_trainer: Any, tmp_path: Path) -> None:
    names = ["a/b", "a_b", "", "/"]
    trainer = make_grpo_trainer(train_dataset=_task_dataset(names * 4), reward_funcs=[length_penalty], max_steps=8)
    config = {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}, "metrics": "full"}  # per-task row counts
    rl_guards.install(trainer, config)
    trainer.train()
    logged: Counter[str] = Counter()
    for row in trainer.state.log_history:
        for key, value in row.items():
            parsed = parse_task_metric_key(key)
            if parsed and parsed[1] == "rows":
                logged[parsed[0]] += value
    assert set(logged) == set(names)  # 0.1: "a/b" and "a_b" (and "" and "/") added up under one key
    assert set(task_curves(trainer.state.log_history)) == set(names)
    store = RolloutStore(tmp_path / "grpo")
    dumped = Counter(r["task"] for s in store.steps() for r in store.load(s))
    assert dumped == logged  # dumps keep the raw names, row for row


def test_per_task_metrics_are_capped_and_the_cap_is_said_once(make_grpo_trainer: Any, tmp_path: Path) -> None:
    names = [f"task{i:02d}" for i in range(12)]
    trainer = make_grpo_trainer(train_dataset=_task_dataset(names * 2), reward_funcs=[length_penalty], max_steps=6)
    with shows("tasks.max_tasks=3"):
        run = rl_guards.install(trainer, {"tasks": {"max_tasks": 3}, "rollouts": {"wandb_rows_per_task": 0}})
        trainer.train()
    segments = {
        key.split("/")[1] for row in trainer.state.log_history for key in row if parse_task_metric_key(key) is not None
    }
    assert OTHER_SEGMENT in segments and len(segments) <= 4  # 3 kept tasks + one bucket (0.1: one set per task)
    assert run.session.counts[("tasks", "task_cap")] == 1
    kept = list(run.task_labels.kept)
    assert kept == sorted(kept)[:3]  # equal frequencies: the first names win, and keep their curves


def test_a_null_task_is_the_default_task(make_grpo_trainer: Any, tmp_path: Path) -> None:
    trainer = make_grpo_trainer(
        train_dataset=_task_dataset([None, "arith"] * 4), reward_funcs=[length_penalty], max_steps=2
    )
    rl_guards.install(trainer, {"tasks": {"default_task": "general"}, "rollouts": {"every_steps": 1}})
    trainer.train()
    tasks = set(task_curves(trainer.state.log_history))
    assert tasks == {"general", "arith"}  # 0.1: a task called "None"
    store = RolloutStore(tmp_path / "grpo")
    assert {r["task"] for r in store.load(store.steps()[0])} <= {"general", "arith"}


def test_a_masking_stop_leaves_the_offending_batch_on_disk(make_grpo_trainer: Any, tmp_path: Path) -> None:
    trainer = make_grpo_trainer(max_steps=2)
    original = trainer._generate_and_score_completions

    def unmask_after_eos(inputs: Any) -> Any:
        output = original(inputs)
        output["completion_mask"][:] = 1
        return output

    trainer._generate_and_score_completions = unmask_after_eos
    rl_guards.install(trainer, {"masking": {"mode": "raise"}, "rollouts": {"every_steps": 100}})
    with pytest.raises(MaskingError):
        trainer.train()
    dumps = _dumps(tmp_path / "grpo")
    assert [m["reason"] for m in dumps.values()] == ["stopped"]  # 0.1: no rollouts folder at all
