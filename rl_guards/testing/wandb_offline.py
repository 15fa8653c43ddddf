"""Read an offline W&B run back (history rows, summary, logged tables) to prove metrics arrived.

Uses ``wandb leet inspect --json <run file>`` (shipped with wandb >= 0.2x), which prints one JSON object per
record of the run's ``.wandb`` file. The record format is wandb's own and may change between versions: this
module is the single place that knows it, and the test suite checks it against a run written on the spot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class OfflineRun:
    """What an offline run recorded."""

    run_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged step
    summary: dict[str, Any] = field(default_factory=dict)  # merged summary updates
    config: dict[str, Any] = field(default_factory=dict)
    table_files: list[Path] = field(default_factory=list)  # media/table/**/*.table.json
    alerts: list[dict[str, Any]] = field(default_factory=list)  # title, text, level of each W&B alert

    def series(self, key: str) -> list[tuple[int, Any]]:
        """(step, value) pairs of one history key, in logging order."""
        return [(int(row.get("_step", i)), row[key]) for i, row in enumerate(self.history) if key in row]

    def keys(self) -> set[str]:
        """Every key that appears in at least one history row."""
        return {k for row in self.history for k in row}


def find_offline_runs(root: str | os.PathLike[str]) -> list[Path]:
    """Offline run folders (``offline-run-*``) under ``root``, oldest first."""
    return sorted(Path(root).rglob("offline-run-*"), key=lambda p: p.name)


def _wandb_cli() -> list[str]:
    exe = shutil.which("wandb", path=str(Path(sys.executable).parent)) or shutil.which("wandb")
    if exe:
        return [exe]
    return [sys.executable, "-m", "wandb"]


def _records(run_file: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [*_wandb_cli(), "leet", "inspect", "--json", str(run_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "WANDB_SILENT": "true"},
    )
    records = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    if not records:
        raise RuntimeError(
            f"could not read {run_file} with `wandb leet inspect --json` (exit {proc.returncode}): "
            f"{proc.stderr.strip()[:500]}"
        )
    return records


def _unflatten_config(update: dict[str, Any]) -> dict[str, Any]:
    return {k: v.get("value", v) if isinstance(v, dict) else v for k, v in update.items()}


def read_offline_run(run_dir: str | os.PathLike[str]) -> OfflineRun:
    """Parse one ``offline-run-*`` folder."""
    run_dir = Path(run_dir)
    files = sorted(run_dir.glob("run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"no run-*.wandb file in {run_dir}")
    run = OfflineRun(run_dir=run_dir)
    for record in _records(files[0]):
        kind = record.get("type")
        if kind == "history":
            run.history.append(dict(record["history"].get("item", {})))
        elif kind == "summary":
            run.summary.update(record["summary"].get("update", {}))
        elif kind == "config":
            run.config.update(_unflatten_config(record["config"].get("update", {})))
        elif kind == "alert":
            run.alerts.append(dict(record["alert"]))
        elif kind == "run":
            update = record["run"].get("config", {}).get("update", {})
            run.config.update(_unflatten_config(update))
    run.table_files = sorted((run_dir / "files").rglob("*.table.json"))
    return run
