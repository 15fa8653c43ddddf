"""Fixtures for the tinker-cookbook driver and the local Tinker backend (skipped where tinker is not installed).

``local``: a fresh :class:`~rl_guards.tinker.backend.LocalTinker` per test. ``cookbook_run``: the cookbook's own,
unmodified ``rl.train.main`` on the tiny fixture's tasks (:mod:`rl_guards.testing.tinker_envs`), with rl_guards, against
that backend; returns the run's handle, its log folder and how it ended.
"""

from __future__ import annotations

import os

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("TINKER_API_KEY", "tml-local")

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def local() -> Iterator[Any]:
    pytest.importorskip("tinker")
    from rl_guards.tinker.backend import LocalTinker

    with LocalTinker(seed=0, long_poll=5.0) as backend:
        yield backend


@dataclass
class CookbookRun:
    """How a guarded cookbook run went."""

    run: Any  # rl_guards.tinker.TinkerRun
    log_path: Path
    error: BaseException | None
    backend: Any
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def kinds(self, severities: tuple[str, ...] = ("blocking", "warning")) -> set[tuple[str, str]]:
        """(guard, kind) of the findings at these severities."""
        return {(f.guard, f.kind) for f in self.run.findings if f.severity in severities}


@pytest.fixture
def cookbook_run(tiny: Any, tmp_path: Path, local: Any) -> Callable[..., CookbookRun]:
    """``cookbook_run(steps=2, groups=8, group_size=4, max_tokens=24, renderer=..., attach=True, guards_set=[...],
    **dataset_fields)``: one guarded run of the cookbook's own loop; never raises (the error is returned)."""
    pytest.importorskip("tinker_cookbook")
    import asyncio
    import json

    from tinker_cookbook.rl import train

    import rl_guards.tinker
    from rl_guards.testing.tinker_envs import TinyTasksDatasetBuilder

    counter = iter(range(1000))

    def run(
        *,
        steps: int = 2,
        groups: int = 8,
        group_size: int = 4,
        max_tokens: int = 24,
        renderer: str = "qwen3_disable_thinking",
        attach: bool = True,
        guards_set: list[str] | None = None,
        save_every: int = 0,
        stray_think_penalty: bool = False,
        config_overrides: dict[str, Any] | None = None,
        log_path: Path | None = None,
        **dataset: Any,
    ) -> CookbookRun:
        log_path = log_path or tmp_path / f"run{next(counter)}"
        config = train.Config(
            learning_rate=1e-3,
            dataset_builder=TinyTasksDatasetBuilder(
                batch_size=groups,
                group_size=group_size,
                model_name_for_tokenizer=tiny.model_dir,
                renderer_name=renderer,
                **dataset,
            ),
            model_name=tiny.model_dir,
            recipe_name="rl_guards_test",
            renderer_name=renderer,
            max_tokens=max_tokens,
            log_path=str(log_path),
            base_url=local.url,
            max_steps=steps,
            save_every=save_every,
            **{"eval_every": 0, "num_groups_to_log": 0, **(config_overrides or {})},
        )
        config, handle = rl_guards.tinker.guard(
            config,
            backend=local if attach else None,
            guards_set=guards_set,
            stray_think_penalty=stray_think_penalty,
        )
        error: BaseException | None = None
        try:
            asyncio.run(handle.main())
        except Exception as exc:
            error = exc
        metrics_file = log_path / "metrics.jsonl"
        metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.is_file() else []
        return CookbookRun(handle, log_path, error, local, metrics)

    return run
