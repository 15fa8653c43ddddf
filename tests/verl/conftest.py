"""Fixtures of the verl driver's tests: a local Ray per test module, verl's config with rl_guards' classes.

These tests run in the verl test environment (``.venv-verl``: verl 0.9.1 and its pins); elsewhere every module
skips (``pytest.importorskip("verl.protocol")``: ``import verl`` alone would find this folder, tests/ being on
sys.path), and nothing here imports verl at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _verl_rows import SCORER

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def verl_ray() -> Iterator[Any]:
    """One local Ray (2 CPUs) for a test module; shut down after it. verl's actors import rl_guards from this
    checkout."""
    import ray

    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "PYTHONPATH": path,
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_USAGE_STATS_ENABLED": "0",
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def verl_config(tiny: Any, tmp_path: Path) -> Any:
    """``verl_config(*overrides, scorer=...)``: verl's ``ppo_trainer`` config with rl_guards' classes (Hydra)."""
    from rl_guards.testing.verl_run import compose_config

    def make(*overrides: str, scorer: str | None = SCORER + ":compute_score", **kwargs: Any) -> Any:
        return compose_config(tiny.model_dir, tmp_path, overrides=list(overrides), scorer=scorer, **kwargs)

    return make
