"""Helpers of the verl driver's tests (imported by name, as ``_rollouts_data`` is): the planted scorer's path, one
row's DataProto as verl's agent loop builds it for the reward workers, a step's rows as the legacy trainer pads
them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl_guards.verl.rows import StepBatch

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


PROMPTS = ["What is 3+4? Answer with the number.", "Repeat the word: cat"]


def legacy_batch(
    tok: Any, replies: list[str | None], scores: list[float], *, step: int = 1, seconds: float = 0.0, **columns: Any
) -> StepBatch:
    """Rows as the legacy agent loop pads them (group of len(replies) // 2 per prompt); ``None``: an empty response.
    Each row's reward sits where verl puts it: ``rm_scores[i, valid_length - 1]`` (index -1 for an empty one); each
    record says the scorer took ``seconds``."""
    import torch

    from rl_guards.verl.records import RECORD_KEY, ScoreRecord, text_digest
    from rl_guards.verl.rows import StepBatch

    n = len(replies)
    group = n // len(PROMPTS)
    prompt_rows = []
    for i in range(n):
        text = PROMPTS[i // group]
        rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        prompt_rows.append(list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered))
    response_rows = [
        [] if r is None else tok(r, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if r else [])
        for r in replies
    ]
    width, length = max(map(len, prompt_rows)), 12
    pad = tok.pad_token_id
    prompts = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_rows])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_rows])
    cut = [r[:length] for r in response_rows]
    responses = torch.tensor([r + [pad] * (length - len(r)) for r in cut])
    attention = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in cut])
    rm = torch.zeros(n, length)
    rm[torch.arange(n), attention.sum(1) - 1] = torch.tensor(scores)
    records = []
    for i, r in enumerate(cut):
        text = tok.decode(r, skip_special_tokens=True)
        record = ScoreRecord(scorer="compute_score", valid_len=len(r), chars=len(text), digest=text_digest(text),
                             score=scores[i], given=scores[i], total=scores[i], seconds=seconds)  # fmt: skip
        records.append(record.to_json())
    cols: dict[str, list[Any]] = {
        "uid": [f"u{i // group}" for i in range(n)],
        "data_source": ["tiny/arith" if i // group == 0 else "tiny/echo" for i in range(n)],
        "reward_model": [{"ground_truth": "7" if i // group == 0 else "cat"} for i in range(n)],
        "extra_info": [{"index": i // group} for i in range(n)],
        "raw_prompt": [[{"role": "user", "content": PROMPTS[i // group]}] for i in range(n)],
        RECORD_KEY: records,
        **columns,
    }
    return StepBatch(step, prompts, prompt_mask, responses, attention, attention.clone(), rm, cols)
