"""TRL's ``trl grpo`` script pieces, read the way the script reads them: its YAML through TRL's own parser, its
datasets and its reward functions (built-in names or dotted import paths). Used by ``rl-guards preflight`` and
``rl-guards grpo`` so that both take exactly what ``trl grpo`` takes."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rl_guards.errors import ConfigError

GUARDS_KEYS = ("guards", "rl_guards")  # the guards section of an ``rl-guards grpo`` YAML, which TRL must not see
RL_GUARDS_KEYS = (*GUARDS_KEYS, "guards_config", "guards_set")  # every key that YAML adds to TRL's


def grpo_parser(extra: tuple[Any, ...] = (), prog: str | None = None) -> Any:
    """TRL's ``trl grpo`` parser (its four dataclasses), plus ``extra`` dataclasses."""
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    return TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig, *extra), prog=prog)


def write_yaml(data: dict[str, Any], where: str | None = None) -> str:
    """``data`` as a temporary YAML file (removed by the caller or at exit)."""
    import yaml

    fd, path = tempfile.mkstemp(prefix="rl-guards-", suffix=".yaml", dir=where)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path


def parse_trl_yaml(data: dict[str, Any]) -> tuple[Any, Any, Any, Any, str]:
    """(script_args, GRPOConfig, ModelConfig, DatasetMixtureConfig, note) from a ``trl grpo`` YAML mapping.

    On a machine without the configured accelerator (bf16 on a CPU-only machine), the GRPOConfig is built with
    ``use_cpu=True, bf16=False`` and the note says so; every other field is as given.
    """
    data = {"output_dir": "rl_guards_preflight", "report_to": "none", **data}
    note = ""
    for attempt in range(2):
        path = write_yaml(data)
        try:
            parsed = grpo_parser().parse_args_and_config(["--config", path], fail_with_unknown_args=True)
            return (*parsed[:4], note)
        except SystemExit as exc:  # argparse: an unknown key
            raise ConfigError(
                f"TRL's grpo parser rejected the config (an unknown or misspelt key?): exit {exc}"
            ) from exc
        except ValueError as exc:
            hardware = any(w in str(exc) for w in ("bf16", "fp16", "gpu", "GPU", "cuda", "CUDA", "mps"))
            if attempt or not hardware:
                raise ConfigError(f"TRL's grpo parser rejected the config: {exc}") from exc
            data = {**data, "use_cpu": True, "bf16": False, "fp16": False}
            note = f"note: built the GRPOConfig with use_cpu=True, bf16=False here ({exc}); other fields as given"
        finally:
            Path(path).unlink(missing_ok=True)
    raise AssertionError("unreachable")


def load_reward_funcs(script_args: Any) -> list[Any]:
    """The script's reward functions: TRL's built-in names, dotted import paths, and the reward model (its path)."""
    from trl.rewards import (
        accuracy_reward,
        get_soft_overlong_punishment,
        reasoning_accuracy_reward,
        think_format_reward,
    )

    registry = {
        "accuracy_reward": accuracy_reward,
        "reasoning_accuracy_reward": reasoning_accuracy_reward,
        "think_format_reward": think_format_reward,
        "get_soft_overlong_punishment": get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256),
    }
    funcs: list[Any] = []
    if getattr(script_args, "reward_model_name_or_path", None):
        funcs.append(script_args.reward_model_name_or_path)
    for name in getattr(script_args, "reward_funcs", None) or []:
        if name in registry:
            funcs.append(registry[name])
        elif "." in name:
            module_path, attr = name.rsplit(".", 1)
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            funcs.append(getattr(importlib.import_module(module_path), attr))
        else:
            raise ConfigError(f"reward function {name!r}: expected one of {sorted(registry)} or a dotted import path")
    return funcs


def load_script_dataset(script_args: Any, dataset_args: Any) -> Any:
    """The script's dataset (all splits), loaded as ``trl grpo`` loads it."""
    import datasets
    from trl import get_dataset

    datasets.disable_progress_bars()
    if getattr(dataset_args, "datasets", None):
        return get_dataset(dataset_args)
    if getattr(script_args, "dataset_name", None):
        return datasets.load_dataset(
            script_args.dataset_name, name=script_args.dataset_config, streaming=script_args.dataset_streaming
        )
    raise ConfigError("set dataset_name or datasets (as trl grpo needs)")


def load_script_parts(script_args: Any, training_args: Any, dataset_args: Any) -> tuple[Any, Any, list[Any]]:
    """(train dataset, eval dataset or None, reward functions), loaded as ``trl grpo`` loads them."""
    dataset = load_script_dataset(script_args, dataset_args)
    train = dataset[script_args.dataset_train_split]
    evaluation = None
    if str(getattr(training_args, "eval_strategy", "no")) not in ("no", "IntervalStrategy.NO"):
        evaluation = dataset[script_args.dataset_test_split]
    return train, evaluation, load_reward_funcs(script_args)


__all__ = [
    "GUARDS_KEYS",
    "RL_GUARDS_KEYS",
    "grpo_parser",
    "load_reward_funcs",
    "load_script_dataset",
    "load_script_parts",
    "parse_trl_yaml",
    "write_yaml",
]
