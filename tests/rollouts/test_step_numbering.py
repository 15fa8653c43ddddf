"""One step numbering, TRL's: the batch trained in step k is step k in the dumps, the index, the CLI, the report,
the W&B tables and TRL's own completions table; dumps written with the old numbering (schema 2) still read right."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _rollouts_data import Harness, make_batch

import rl_guards
from rl_guards.rollouts.reader import RolloutStore
from rl_guards.rollouts.store import METADATA_KEY, SCHEMA_VERSION, SUPERSEDED_DIR, step_file_name


@pytest.mark.slow
def test_dumps_w_and_b_and_trl_completions_share_one_step_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trl import GRPOTrainer

    from rl_guards.cli.main import main as cli
    from rl_guards.testing import arith_correct, echo_match, make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    tiny = tiny_setup()
    args = tiny_grpo_config(
        out, max_steps=4, save_strategy="steps", save_steps=2, report_to="wandb", run_name="steps",
        log_completions=True,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.tokenizer,
        reward_funcs=[arith_correct, echo_match],
        args=args,
        train_dataset=make_dataset(),
    )
    rl_guards.install(trainer, {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 8}})
    trainer.train()
    import wandb

    wandb.finish()

    store = RolloutStore(out)
    assert store.steps() == [1, 2, 3, 4]
    assert store.checkpoint_steps() == {2: 2, 4: 4}  # checkpoint-k holds the batch trained in step k
    for step in store.steps():
        # TRL's completions_{k}.parquet holds the rows TRL logged at step k: the same completions as our step k.
        trl_rows = pd_rows(out / "completions" / f"completions_{step:05d}.parquet")
        assert {r["step"] for r in trl_rows} == {step}
        ours = store.load(step)
        assert {r["step"] for r in ours} == {step}
        assert Counter(r["completion_text"] for r in ours) == Counter(_text(r["completion"]) for r in trl_rows)

    # W&B: our rollouts table and TRL's completions table put the same completions at the same step.
    run = read_offline_run(find_offline_runs(tmp_path)[-1])
    ours_wb: dict[int, Counter[str]] = {}
    trl_wb: dict[int, Counter[str]] = {}
    for path in run.table_files:
        table = json.loads(path.read_text())
        col = table["columns"].index
        target = ours_wb if "rollouts" in path.name else trl_wb if "completions" in path.name else None
        if target is None:
            continue
        for row in table["data"]:
            text = _text(row[col("completion")]).replace("<|im_end|>", "").replace("<|endoftext|>", "")
            target.setdefault(int(row[col("step")]), Counter())[text] += 1
    assert sorted(ours_wb) == sorted(trl_wb) == [1, 2, 3, 4]
    for step in ours_wb:
        assert ours_wb[step] <= trl_wb[step]  # our table samples rows of TRL's rows of that step

    # The CLI finds the dump of checkpoint-4 under step 4.
    assert cli(["rollouts", str(out), "show", "--step", "4", "--limit", "1"]) == 0
    assert "step 4 | " in capsys.readouterr().out


def pd_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _text(completion: object) -> str:
    """A completion as TRL logs it (text, or the assistant messages of a conversational dataset) as text."""
    if isinstance(completion, str) and completion.startswith("[{"):
        completion = json.loads(completion)
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion)
    return str(completion)


def _to_schema_2(folder: Path, step: int) -> Path:
    """Rewrite the dump of ``step`` as rl_guards <= 0.3 wrote it: schema 2, stored under the generation step."""
    path = folder / step_file_name(step)
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta.update(schema_version=2, step=step - 1)
    n = table.num_rows
    table = table.set_column(0, "schema_version", pa.array([2] * n, pa.int16()))
    table = table.set_column(1, "step", pa.array([step - 1] * n, pa.int64()))
    old = folder / step_file_name(step - 1)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), str(old))
    path.unlink()
    return old


def test_old_dumps_read_with_trl_numbering_and_survive_a_resume(tmp_path: Path) -> None:
    assert SCHEMA_VERSION == 3
    folder = tmp_path / "rl_guards" / "rollouts"
    h = Harness(str(tmp_path), every_steps=2)
    h.begin(0)
    for step in range(1, 7):
        h.batch(make_batch(step, marker=" [old]"))
        if step == 4:
            h.save(4)
    assert [e["step"] for e in RolloutStore(tmp_path).index()] == [1, 2, 4, 6]
    for step in (1, 2, 4, 6):  # as an older rl_guards left them: checkpoint-4 tagged on "step 3"
        _to_schema_2(folder, step)
    assert sorted(p.name for p in folder.glob("step_*.parquet")) == [step_file_name(s) for s in (0, 1, 3, 5)]

    store = RolloutStore(tmp_path)
    assert store.steps() == [1, 2, 4, 6] and store.unreadable() == []
    assert store.checkpoint_steps() == {4: 4}
    assert {r["step"] for r in store.load(4)} == {4} and store.path(4).name == step_file_name(3)
    assert {r["step"] for r in store.table(6, ["step"]).to_pylist()} == {6}

    # Should an old dump and a new one ever claim one step (files copied by hand), the new format wins, the other
    # file is named, never silently mixed in.
    twin = folder / step_file_name(6)
    shutil.copy(folder / step_file_name(1), twin)  # a schema-3 file that says step 6
    table = pq.read_table(twin)
    meta = {**json.loads(table.schema.metadata[METADATA_KEY]), "schema_version": 3, "step": 6}
    table = table.set_column(0, "schema_version", pa.array([3] * table.num_rows, pa.int16()))
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), str(twin))
    store = RolloutStore(tmp_path)
    assert store.path(6) == twin and store.unreadable() == [f"{step_file_name(5)} (step 6 is also in {twin.name})"]
    twin.unlink()

    # A resume at checkpoint-4 with this version keeps the old dumps up to step 4, moves step 6 aside under its own
    # name, and writes the new trajectory's steps in the new numbering next to the old files.
    again = Harness(str(tmp_path), every_steps=2)
    again.begin(4)
    for step in (5, 6):
        again.batch(make_batch(step, marker=" [new]"))
    store = RolloutStore(tmp_path)
    assert store.steps() == [1, 2, 4, 5, 6] and store.unreadable() == []
    assert [p.name for p in (folder / SUPERSEDED_DIR).rglob("*.parquet")] == [step_file_name(5)]
    assert all(r["completion_text"].endswith("[new]") for r in store.load(6))
    assert all(r["completion_text"].endswith("[old]") for r in store.load(4))
    index = [json.loads(line) for line in (folder / "index.jsonl").read_text().splitlines()]
    assert [(e["step"], e["schema_version"]) for e in index] == [(1, 2), (2, 2), (4, 2), (5, 3), (6, 3)]
