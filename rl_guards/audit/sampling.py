"""Completions for the audit sampled from a local model (``--model DIR``): HF ``generate``, prompts rendered as
GRPOTrainer renders them, decoded as TRL hands them to reward functions (special tokens skipped)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rl_guards.audit.data import AuditRow


def sample_completions(
    rows: Sequence[AuditRow],
    model_dir: str,
    *,
    device: str = "cpu",
    samples: int = 4,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    temperature: float = 1.0,
    seed: int = 0,
    progress: bool = False,
) -> None:
    """Give every row ``samples`` completions from the model in ``model_dir`` (a progress bar on a terminal)."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from rl_guards.chat.length_probe import _eos_ids, generate_new_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    model.eval()
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        pad_token_id=pad,
        eos_token_id=eos,
    )
    torch.manual_seed(seed)
    todo = [row for row in rows for _ in range(samples)]
    bar = tqdm(total=len(todo), desc="audit: sampling", disable=None if progress else True, file=sys.stderr)
    batches = generate_new_ids(model, tokenizer, [row.prompt for row in todo], config, batch_size=batch_size)
    for start, batch in zip(range(0, len(todo), batch_size), batches, strict=True):
        chunk = todo[start : start + batch_size]
        for row, ids in zip(chunk, batch, strict=True):
            end = next((i for i, t in enumerate(ids) if t in eos), len(ids))
            row.completions.append(tokenizer.decode(ids[: end + 1], skip_special_tokens=True))
        bar.update(len(chunk))
    bar.close()


__all__ = ["sample_completions"]
