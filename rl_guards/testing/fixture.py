"""``tiny_setup()``: the warmed-up tiny model and its tokenizer, built once and cached on disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, Qwen3ForCausalLM

from rl_guards.testing.model import build_model, measure_turn_endings, warm_up
from rl_guards.testing.tokenizer import available_chat_templates, build_tokenizer, resolve_chat_template

__all__ = ["FIXTURE_FILE", "TinySetup", "default_cache_dir", "tiny_setup"]

FIXTURE_FILE = "rl_guards_fixture.json"  # written last into a build folder: its presence marks a complete build
_SOURCES = ("tokenizer.py", "model.py", "data.py", "rewards.py", "fixture.py")  # a change to these rebuilds


@dataclass
class TinySetup:
    """A saved warmed-up tiny Qwen3 model and its tokenizer.

    ``model_dir`` holds ``save_pretrained`` output of both, so ``GRPOTrainer(model=model_dir, ...)`` works, and so
    does ``beta > 0`` (TRL reloads the reference model from that path). ``stats`` records build times and the
    warmed model's turn-ending rates (see ``measure_turn_endings``).
    """

    model_dir: str
    tokenizer: PreTrainedTokenizerBase
    vocab_size: int | None
    chat_template_name: str
    stats: dict[str, Any] = field(default_factory=dict)

    def load_model(self) -> Qwen3ForCausalLM:
        """A fresh copy of the warmed model (float32, eval mode)."""
        model = Qwen3ForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        model.eval()
        return model

    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        """A fresh copy of the tokenizer, for code that mutates it."""
        return AutoTokenizer.from_pretrained(self.model_dir)


def default_cache_dir() -> Path:
    """``$RL_GUARDS_CACHE``, else ``~/.cache/rl_guards``."""
    env = os.environ.get("RL_GUARDS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rl_guards"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def _cache_key(params: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps(params, sort_keys=True).encode())
    for name in _SOURCES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:16]


_MEMORY: dict[str, TinySetup] = {}
_LOCK = threading.Lock()


def _build(folder: Path, vocab_size: int | None, template: str, warm_steps: int, cache_dir: Path) -> dict[str, Any]:
    """Build, warm up and save into ``folder``; returns the stats written to the fixture file."""
    stats: dict[str, Any] = {}
    start = time.perf_counter()
    tokenizer = build_tokenizer(vocab_size, template, cache_dir=cache_dir)
    stats["tokenizer_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    model = build_model(tokenizer)
    stats["model_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    warm_up(model, tokenizer, steps=warm_steps)
    stats["warm_up_seconds"] = time.perf_counter() - start
    stats.update(measure_turn_endings(model, tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return stats


def tiny_setup(
    *,
    vocab_size: int | None = 2048,
    chat_template: str = "qwen3",
    warm_steps: int = 80,
    cache_dir: str | os.PathLike[str] | None = None,
) -> TinySetup:
    """The warmed tiny model + tokenizer, built on first use (a few seconds) and then loaded from disk.

    The build lands in ``<cache_dir>/tiny-<vocab>-<template>-<hash>``; the hash covers the parameters, the
    rl_guards / transformers / torch versions and this subpackage's source. ``cache_dir`` defaults to
    ``default_cache_dir()``. Each build goes to a temporary folder renamed into place, so processes building
    at the same time are safe (the first rename wins; the others discard their copy). With ``vocab_size=None``
    (151k-wide LM head) the warm-up takes minutes on CPU: prefer the default for tests.
    """
    template = resolve_chat_template(chat_template)
    template_name = chat_template if chat_template in available_chat_templates() else "custom"
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    params = {
        "vocab_size": vocab_size,
        "chat_template": template,
        "warm_steps": warm_steps,
        "rl_guards": _version("rl_guards"),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    folder = root / f"tiny-{vocab_size or 'full'}-{template_name}-{_cache_key(params)}"
    with _LOCK:
        if str(folder) in _MEMORY and (folder / FIXTURE_FILE).is_file():
            return _MEMORY[str(folder)]
    if not (folder / FIXTURE_FILE).is_file():
        root.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
        try:
            stats = _build(building, vocab_size, template, warm_steps, root)
            (building / FIXTURE_FILE).write_text(json.dumps({"params": params, "stats": stats}, indent=1))
            try:
                os.rename(building, folder)
            except OSError:
                if not (folder / FIXTURE_FILE).is_file():  # not a lost race: a real failure
                    raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    stats = json.loads((folder / FIXTURE_FILE).read_text())["stats"]
    setup = TinySetup(
        model_dir=str(folder),
        tokenizer=AutoTokenizer.from_pretrained(folder),
        vocab_size=vocab_size,
        chat_template_name=template_name,
        stats=stats,
    )
    with _LOCK:
        _MEMORY[str(folder)] = setup
    return setup
