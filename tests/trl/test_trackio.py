"""rl_guards' signal reaches trackio as it reaches W&B (issue 23 #8): a real GRPO run with ``report_to=["trackio"]``
(local store only), read back from trackio's SQLite file: the rollout, drift and preflight tables, an alert for a
finding, the summary table, the GuardsConfig in the run config, and the scalars in their own ``rl_guards/`` section
rather than under ``train/``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trackio")
pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys

    from datasets import Dataset
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.testing import tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match

    tiny = tiny_setup()
    # An assistant prefill: TRL closes it and opens a new turn (template/prefill_duplicates_template, warn mode).
    prompts = [
        [{"role": "user", "content": f"What is {i}+1? Answer with the number."},
         {"role": "assistant", "content": "<think>\\n"}]
        for i in range(8)
    ]
    data = Dataset.from_dict({"prompt": prompts, "task": ["arith"] * 8, "answer": [str(i + 1) for i in range(8)]})
    args = tiny_grpo_config(
        sys.argv[1], max_steps=2, logging_steps=1, report_to=["trackio"], project="rlg", run_name="tiny",
        trackio_space_id=None,  # transformers < 5.x defaults it to "trackio" (a Space: needs a hub login)
    )
    trainer = GRPOTrainer(
        model=tiny.model_dir, processing_class=tiny.load_tokenizer(), reward_funcs=[arith_correct, echo_match],
        args=args, train_dataset=data,
    )
    rl_guards.install(trainer, {"template": {"mode": sys.argv[2]}})
    trainer.train()
    """
)


def _read_store(db: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[str, str, str]], dict[str, Any]]:
    with sqlite3.connect(db) as con:
        rows = [(int(step), json.loads(m)) for step, m in con.execute("SELECT step, metrics FROM metrics ORDER BY id")]
        alerts = list(con.execute("SELECT title, level, text FROM alerts"))
        (config,) = con.execute("SELECT config FROM configs").fetchone()
    return rows, alerts, json.loads(config)


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}  # no Space, no server
    env.update(TRACKIO_DIR=str(tmp_path / "trackio"), OMP_NUM_THREADS="1", WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT, encoding="utf-8")
    command = [sys.executable, str(script), str(tmp_path / "out"), mode]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_trackio_gets_the_tables_alerts_summary_config_and_own_section(tiny: Any, tmp_path: Path) -> None:
    done = _run(tmp_path, "warn")
    assert done.returncode == 0, done.stderr[-3000:]
    rows, alerts, config = _read_store(tmp_path / "trackio" / "rlg.db")
    keys = {k for _, metrics in rows for k in metrics}
    tables = {k for _, m in rows for k, v in m.items() if isinstance(v, dict) and v.get("_type") == "trackio.table"}
    # 437f4ff: none of these tables, no alert, no config entry; the scalars under train/rl_guards/...
    assert {"rl_guards/rollouts", "rl_guards/drift/probes", "rl_guards/preflight/findings"} <= tables
    assert "rl_guards/summary" in tables
    assert "rl_guards/masking/checked_batches" in keys and "rl_guards_task/arith/reward_mean" in keys
    assert not [k for k in keys if k.startswith(("train/rl_guards", "train/rl_guards_task"))]
    assert "train/loss" in keys  # TRL's own scalars stay where HF puts them
    titles = [title for title, _, _ in alerts]
    assert titles == ["rl_guards: template/prefill_duplicates_template"]
    assert alerts[0][1] == "warn" and "prefill" in alerts[0][2]
    assert config["rl_guards"]["template"]["mode"] == "warn"
    summary = next(m["rl_guards/summary"] for _, m in rows if "rl_guards/summary" in m)
    assert "rl_guards/findings/template/prefill_duplicates_template" in json.dumps(summary)
    # Issue 38 #6: trackio's x-axis is the trainer's step (e1b9f62: trackio's own counter, one per row logged); the
    # rollout table sits at the step of its batch
    trained = [(step, m["train/global_step"]) for step, m in rows if "train/loss" in m]
    assert [s for s, _ in trained] == [g for _, g in trained] == [1, 2], trained
    assert [(step, m["train/global_step"]) for step, m in rows if "rl_guards/rollouts" in m] == [(1, 1)]


def test_a_stopped_run_still_gives_trackio_its_summary(tiny: Any, tmp_path: Path) -> None:
    done = _run(tmp_path, "raise")  # the template guard stops the run at train start: no train end follows
    assert done.returncode != 0 and "TemplateError" in done.stderr
    rows, alerts, _ = _read_store(tmp_path / "trackio" / "rlg.db")
    expected = [("rl_guards: template/prefill_duplicates_template", "error")]
    assert [(title, level) for title, level, _ in alerts] == expected
    summary = json.dumps(next(m["rl_guards/summary"] for _, m in rows if "rl_guards/summary" in m))
    assert "rl_guards/stopped_by" in summary and "template/prefill_duplicates_template at step 0" in summary
