"""RolloutRecorder on a real GRPOTrainer (tiny offline fixture): schedule, checkpoints, resume, W&B table, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.config import GuardsConfig
from rl_guards.guards.recorder import RolloutRecorder
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import SUPERSEDED_DIR

pytestmark = pytest.mark.slow


def _trainer(out: Path, **overrides: Any) -> Any:
    from trl import GRPOTrainer

    from rl_guards.testing import arith_correct, echo_match, make_dataset, tiny_grpo_config, tiny_setup

    tiny = tiny_setup()
    return GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.tokenizer,
        reward_funcs=[arith_correct, echo_match],
        args=tiny_grpo_config(out, **overrides),
        train_dataset=make_dataset(thinking="mixed"),
    )


def _checkpoints(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))


def test_dumps_at_period_and_checkpoints_and_survive_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    config = GuardsConfig.from_dict({"rollouts": {"every_steps": 2, "wandb_rows_per_task": 2}, "metrics": "full"})

    trainer = _trainer(out, max_steps=5, save_strategy="steps", save_steps=2, report_to="wandb", run_name="dumps")
    run = rl_guards.install(trainer, config, guards=[RolloutRecorder])
    handed: list[float] = []  # every dumped_rows value the engine hands to the trainer (the real sink still gets it)
    sink = run.engine.metrics_sink
    assert sink is not None

    def counting_sink(mode: str, metrics: dict[str, list[float]]) -> None:
        handed.extend(metrics.get("rl_guards/rollouts/dumped_rows", []))
        sink(mode, metrics)

    run.engine.metrics_sink = counting_sink
    trainer.train()
    import wandb

    wandb.finish()

    store = RolloutStore(out)
    checkpoints = _checkpoints(out)
    assert checkpoints == [2, 4, 5]
    # TRL's numbering: step k is the batch trained in step k. Periodic dumps at steps 1, 2 and 4; checkpoint-k
    # dumps the rollouts of step k (the batch of its last update).
    expected = sorted({1, 2, 4} | set(checkpoints))
    assert store.steps() == expected
    index = {e["step"]: e for e in store.index()}
    assert {e["checkpoint"]: s for s, e in index.items() if e["checkpoint"] is not None} == {k: k for k in checkpoints}
    assert index[1]["reason"] == "periodic" and index[5]["reason"] == "checkpoint"
    assert index[2]["reason"] == index[4]["reason"] == "checkpoint"  # periodic, then tagged by the checkpoint

    tok = trainer.processing_class
    eos_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    rows = store.load(1)
    assert len(rows) == trainer.args.per_device_train_batch_size
    assert [r["group"] for r in rows] == [i // trainer.num_generations for i in range(len(rows))]
    for row in rows:
        assert row["prompt"].startswith("<|im_start|>user\n") and row["prompt"].endswith("<|im_start|>assistant\n")
        assert tok.decode(row["completion_ids"], skip_special_tokens=False) == row["completion"]
        assert row["truncated"] == (row["completion_ids"][-1] not in eos_ids)
        assert 0 < row["completion_tokens"] <= trainer.args.max_completion_length
        scored = row["rewards"]["arith_correct" if row["task"] == "arith" else "echo_match"]
        other = row["rewards"]["echo_match" if row["task"] == "arith" else "arith_correct"]
        assert scored in (0.0, 1.0) and other is None and row["reward"] == scored
        assert row["think_kind"] in ("answer", "thinking", "anomalous")
        assert row["thinking"] in (True, False)
    # One metric per new dump (the re-tags of steps 2 and 4 write no new rows), handed to the trainer or still held
    # after the last log; they reach the trainer's log. The background writer's results are reported when they
    # are done, so two dumps can land in one step's log, which TRL logs as their mean: the log has one entry then.
    logged = [
        e["rl_guards/rollouts/dumped_rows"] for e in trainer.state.log_history if "rl_guards/rollouts/dumped_rows" in e
    ]
    pending = run.session.metrics.get("rl_guards/rollouts/dumped_rows", [])  # the last save's, after the last log
    assert sorted(handed + pending) == [8.0] * len(expected)
    assert logged and set(logged) == {8.0} and len(logged) <= len(handed)

    # W&B: one small table per dump, texts cut for the table only.
    from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

    back = read_offline_run(find_offline_runs(tmp_path)[-1])
    tables = [p for p in back.table_files if "rollouts" in p.name]
    assert len(tables) == len(expected)
    # Tables are logged from the background writer's results, so their order in the run need not follow the steps.
    loaded = [json.loads(p.read_text()) for p in tables]
    table = next(t for t in loaded if len({row[2] for row in t["data"]}) == 2)  # a step with both tasks
    assert "completion_cut_for_table" in table["columns"] and len(table["data"]) == 4  # 2 rows x 2 tasks

    # Crash after step 5, resume from checkpoint-2: steps 1 and 2 stay as written, 3+ are redone.
    before = {s: (store.path(s)).read_bytes() for s in (1, 2)}
    resumed = _trainer(out, max_steps=5, save_strategy="steps", save_steps=2)
    rl_guards.install(resumed, config, guards=[RolloutRecorder])
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert store.steps() == expected  # nothing lost, nothing twice
    assert {s: store.path(s).read_bytes() for s in (1, 2)} == before
    moved = sorted(p.name for p in (store.folder / SUPERSEDED_DIR).rglob("*.parquet"))
    assert moved == [f"step_{s:06d}.parquet" for s in expected if s > 2]
    index_lines = (store.folder / "index.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in index_lines] == expected

    # The report and the CLI read the real run.
    import rl_guards.cli.main as cli_main

    monkeypatch.setattr(
        cli_main, "COMMAND_MODULES", list(dict.fromkeys([*cli_main.COMMAND_MODULES, "rollouts", "report"]))
    )
    assert cli_main.main(["report", str(out), "-o", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "<th>checkpoint-2</th>" in page and "<th>checkpoint-4</th>" in page and "(all, TRL)" in page
    assert cli_main.main(["rollouts", str(out), "show", "--step", "4", "--limit", "1"]) == 0
    assert "step 4 | " in capsys.readouterr().out


def test_dump_schedule_with_steps_per_generation_2(tmp_path: Path) -> None:
    # One generation batch every 2 optimizer steps (generated at global steps 0, 2, 4, 6: TRL's steps 1, 3, 5, 7):
    # with every_steps=3, the first batch at or after each multiple of 3 is dumped.
    out = tmp_path / "spg"
    trainer = _trainer(out, max_steps=8, steps_per_generation=2)
    seen: list[int] = []
    run = rl_guards.install(
        trainer, {"rollouts": {"every_steps": 3, "wandb_rows_per_task": 0}}, guards=[RolloutRecorder]
    )
    original = run._after_generation

    def record(output: Any) -> None:
        seen.append(int(trainer.state.global_step))
        original(output)

    run._after_generation = record
    trainer.train()
    assert seen == [0, 2, 4, 6]  # the scenario: a batch every second step
    store = RolloutStore(out)
    assert store.steps() == [1, 3, 7]
    assert all(len(store.load(s)) == 16 for s in store.steps())  # the whole generation batch of 2 steps
