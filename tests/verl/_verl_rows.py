"""Helpers of the verl driver's tests (imported by name, as ``_rollouts_data`` is): the planted scorer's path, one
row's DataProto as verl's agent loop builds it for the reward workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCORER = str(Path(__file__).with_name("planted_scorer.py"))


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
