"""The offline W&B reader, checked against a run written on the spot with known values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rl_guards.testing.wandb_offline import find_offline_runs, read_offline_run


def test_reads_back_history_summary_and_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="reader-check", dir=str(tmp_path), config={"lr": 0.5})
    for step, value in enumerate([0.25, 1.5, -3.0]):
        run.log({"train/rl_guards/x/y": value, "train/global_step": step})
    run.log({"tbl": wandb.Table(columns=["a"], data=[[1], [2]])})
    run.summary["marker"] = 7
    run.finish()

    runs = find_offline_runs(tmp_path)
    assert len(runs) == 1
    back = read_offline_run(runs[0])
    assert [v for _, v in back.series("train/rl_guards/x/y")] == [0.25, 1.5, -3.0]
    assert back.summary["marker"] == 7
    assert back.config["lr"] == 0.5
    assert len(back.table_files) == 1 and os.path.getsize(back.table_files[0]) > 0


def test_missing_run_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run-"):
        read_offline_run(tmp_path)
