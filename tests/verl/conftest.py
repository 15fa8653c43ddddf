"""Fixtures of the verl driver's tests: a local Ray per test module, verl's config with rl_guards' classes, one
row's DataProto as verl's agent loop builds it for the reward workers.

These tests run in the verl test environment (``.venv-verl``: verl 0.9.1 and its pins); elsewhere every module
skips (``pytest.importorskip("verl")``), and nothing here imports verl at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCORER = str(Path(__file__).with_name("planted_scorer.py"))


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


def sample_row(
    tokenizer: Any,
    prompt: str,
    response_ids: list[int],
    *,
    data_source: str = "tiny/arith",
    ground_truth: Any = "7",
    extra_info: Any = None,
    uid: str = "u0",
    **columns: Any,
) -> Any:
    """One row as verl's ``AgentLoopWorker._compute_score`` sends it to a reward worker
    (``experimental/agent_loop/agent_loop.py``, verl 0.9.1): unpadded prompt and response ids, an attention mask of
    ones, the dataset's columns as the agent loop's kwargs, ``__num_turns__`` and ``tool_extra_fields``."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl.protocol import DataProto

    rendered = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    prompt_ids = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    prompts = torch.tensor(prompt_ids, dtype=torch.int64)
    responses = torch.tensor(response_ids, dtype=torch.int64)
    ids = torch.cat([prompts, responses])
    batch = TensorDict(
        {
            "prompts": prompts[None],
            "responses": responses[None],
            "attention_mask": torch.ones_like(ids)[None],
            "input_ids": ids[None],
            "position_ids": torch.arange(len(ids))[None],
        },
        batch_size=1,
    )

    def column(value: Any) -> Any:
        out = np.empty(1, dtype=object)
        out[0] = value
        return out

    non_tensor = {
        "data_source": column(data_source),
        "reward_model": column({"ground_truth": ground_truth, "style": "rule"}),
        "extra_info": column({"index": 0, "split": "train"} if extra_info is None else extra_info),
        "uid": column(uid),
        "raw_prompt": column([{"role": "user", "content": prompt}]),
        "__num_turns__": np.array([2]),
        "tool_extra_fields": column({}),
        "prompt_len": np.array([len(prompt_ids)]),
        "response_len": np.array([len(response_ids)]),
        **{k: column(v) for k, v in columns.items()},
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


@pytest.fixture
def verl_config(tiny: Any, tmp_path: Path) -> Any:
    """``verl_config(*overrides, scorer=...)``: verl's ``ppo_trainer`` config with rl_guards' classes (Hydra)."""
    from rl_guards.testing.verl_run import compose_config

    def make(*overrides: str, scorer: str | None = SCORER + ":compute_score", **kwargs: Any) -> Any:
        return compose_config(tiny.model_dir, tmp_path, overrides=list(overrides), scorer=scorer, **kwargs)

    return make
