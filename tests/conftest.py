"""Shared fixtures: the tiny offline model (built once per session) and a real GRPOTrainer factory.

Tests never touch the network or the user's home: the hub and W&B are offline, and the fixture cache,
``RL_GUARDS_CACHE``, points at a session temp dir (so a direct ``tiny_setup()`` call shares the session build).
"""

# pytest's default import mode puts this file's folder, tests/, on sys.path: test modules in every subfolder
# import the shared helper ``_rollouts_data`` by name.

from __future__ import annotations

import os
import sys

# Before torch / transformers / wandb are imported anywhere.
os.environ["WANDB_MODE"] = "offline"  # forced: a test must never send a run anywhere
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

# One thread: the tiny model's tensors gain nothing from more, and on a busy 2-core machine extra threads spin.
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``RL_GUARDS_CACHE`` and ``WANDB_DIR`` at session temp dirs for the whole run."""
    saved = {name: os.environ.get(name) for name in ("RL_GUARDS_CACHE", "WANDB_DIR")}
    cache = tmp_path_factory.mktemp("rl_guards_cache")
    os.environ["RL_GUARDS_CACHE"] = str(cache)
    os.environ["WANDB_DIR"] = str(tmp_path_factory.mktemp("wandb"))
    yield cache
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


_CHECKOUT = Path(__file__).resolve().parent.parent


def _checkout_entries() -> set[str]:
    """The checkout's top-level names, less tool caches (dot folders, ``__pycache__``)."""
    return {p.name for p in _CHECKOUT.iterdir() if not p.name.startswith(".") and p.name != "__pycache__"}


@pytest.fixture(scope="session", autouse=True)
def _checkout_untouched() -> Iterator[None]:
    """Fail the session when a test left a new folder or file at the top of the checkout (a relative output_dir)."""
    before = _checkout_entries()
    yield
    new = sorted(_checkout_entries() - before)
    assert not new, f"tests wrote into the checkout: {new}; give each test's runs a tmp_path output_dir"


@pytest.fixture(autouse=True)
def _fresh_wandb_settings() -> Iterator[None]:
    """Tear W&B's process-wide setup down after a test that used it.

    wandb reads ``WANDB_DIR`` / ``WANDB_MODE`` once per process (its setup singleton), so without this a test's
    ``monkeypatch.setenv("WANDB_DIR", tmp_path)`` is ignored after an earlier test ran W&B, and its run lands in
    the earlier test's folder.
    """
    yield
    if "wandb" in sys.modules:
        wandb = sys.modules["wandb"]
        if getattr(wandb, "run", None) is not None:
            wandb.finish()
        wandb.teardown()


@pytest.fixture(scope="session")
def tiny(_isolated_cache: Path) -> Any:
    """The warmed-up tiny Qwen3 model dir + tokenizer (``rl_guards.testing.TinySetup``), built once per session.

    ``tiny.tokenizer`` is shared by every test: call ``tiny.load_tokenizer()`` for a copy you may change.
    """
    from rl_guards.testing import tiny_setup

    return tiny_setup(cache_dir=str(_isolated_cache))


@pytest.fixture
def make_grpo_trainer(tiny: Any, tmp_path: Path) -> Callable[..., Any]:
    """Factory for a real ``GRPOTrainer`` on the tiny model.

    ``make_grpo_trainer(reward_funcs=..., train_dataset=..., processing_class=..., callbacks=..., **overrides)``:
    reward_funcs default ``[arith_correct, echo_match]``, train_dataset ``make_dataset()``, processing_class a
    fresh copy of the tiny tokenizer; every other keyword overrides ``tiny_grpo_config`` (``output_dir``
    defaults to ``tmp_path / "grpo"``). ``dataset=`` is accepted for ``train_dataset``.
    """
    from trl import GRPOTrainer

    from rl_guards.testing import make_dataset, tiny_grpo_config
    from rl_guards.testing.rewards import arith_correct, echo_match

    def make(
        *,
        reward_funcs: Any = None,
        train_dataset: Any = None,
        dataset: Any = None,
        processing_class: Any = None,
        model: Any = None,
        callbacks: list[Any] | None = None,
        **overrides: Any,
    ) -> GRPOTrainer:
        if train_dataset is not None and dataset is not None:
            raise TypeError("pass train_dataset or dataset, not both")
        output_dir = overrides.pop("output_dir", tmp_path / "grpo")
        data = train_dataset if train_dataset is not None else dataset
        return GRPOTrainer(
            model=model if model is not None else tiny.model_dir,
            processing_class=processing_class if processing_class is not None else tiny.load_tokenizer(),
            reward_funcs=reward_funcs if reward_funcs is not None else [arith_correct, echo_match],
            args=tiny_grpo_config(output_dir, **overrides),
            train_dataset=data if data is not None else make_dataset(),
            callbacks=callbacks,
        )

    return make
