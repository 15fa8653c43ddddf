"""Measure how long the model's completions are on training prompts, before choosing ``max_completion_length``.

::

    probe = probe_lengths(model, tokenizer, prompts, max_new_tokens=1024)
    print(probe.summary.text())          # p50/p90/p99/max, share hitting the cap, recommendation

Prompts are rendered as GRPOTrainer renders them (conversational prompts through the chat template with
``add_generation_prompt=True`` and the given ``chat_template_kwargs``; plain strings as they are) and sampled
with TRL's default settings (``do_sample``, temperature 1, top-p 1, no top-k), one completion per prompt.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.chat.template_check import tokenize_generation_prompts
from rl_guards.core.lengths import LengthSummary, summarize_lengths

__all__ = ["LengthProbe", "generate_new_ids", "load_prompts", "pick_split", "probe_lengths", "sample_prompts"]


@dataclass
class LengthProbe:
    """Lengths of sampled completions and their summary."""

    lengths: list[int]  # new tokens per completion, EOS included
    hit_cap: list[bool]  # no EOS within max_new_tokens
    max_new_tokens: int
    summary: LengthSummary
    capped_tails: list[str] = field(default_factory=list)  # last characters of a few capped completions

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable numbers (the keys ``preflight.length_probe`` reads)."""
        s = self.summary
        return {
            "p50": s.p50,
            "p90": s.p90,
            "p99": s.p99,
            "max": s.max,
            "mean": s.mean,
            "cap": s.cap,
            "num_completions": s.count,
            "share_at_cap": s.hit_cap_share,
            "hit_cap": s.hit_cap,
            "recommended": s.recommended,
            "lower_bound": s.lower_bound,
        }


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """EOS ids as GRPOTrainer collects them: the generation config's, plus the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return [int(i) for i in ids]


def generate_new_ids(
    model: Any,
    tokenizer: Any,
    prompts: list[Any],
    config: Any,
    *,
    batch_size: int = 8,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> Iterator[list[list[int]]]:
    """Each batch's generated token ids (prompt left out, padding and all): prompts rendered as GRPOTrainer renders
    them, left-padded, sampled with ``config`` (a ``GenerationConfig``) on the model's device, without gradients."""
    import torch

    device = next(model.parameters()).device
    pad = config.pad_token_id
    for start in range(0, len(prompts), batch_size):
        rendered = tokenize_generation_prompts(tokenizer, prompts[start : start + batch_size], chat_template_kwargs)
        width = max(len(r) for r in rendered)
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rendered], device=device)
        attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rendered], device=device)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        yield out[:, width:].tolist()


def probe_lengths(
    model: Any,
    tokenizer: Any,
    prompts: list[Any],
    *,
    max_new_tokens: int = 1024,
    chat_template_kwargs: dict[str, Any] | None = None,
    batch_size: int = 8,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    progress: bool = False,
) -> LengthProbe:
    """Generate one completion per prompt and summarise the lengths (see :func:`summarize_lengths`).

    ``progress``: a progress bar on stderr (prompts done, completions at the cap so far)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import GenerationConfig

    if not prompts:
        raise ValueError("probe_lengths needs at least one prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    kwargs = dict(chat_template_kwargs or {})
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        pad_token_id=pad,
        eos_token_id=eos,
    )
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    lengths: list[int] = []
    hit_cap: list[bool] = []
    tails: list[str] = []
    eos_set = set(eos)
    bar = tqdm(total=len(prompts), unit="prompt", desc="probe-lengths", file=sys.stderr, disable=not progress)
    try:
        for batch in generate_new_ids(model, tokenizer, prompts, config, batch_size=batch_size,
                                      chat_template_kwargs=kwargs):  # fmt: skip
            for row in batch:
                end = next((i for i, t in enumerate(row) if t in eos_set), None)
                if end is None:
                    lengths.append(len(row))
                    hit_cap.append(True)
                    if len(tails) < 3:
                        tails.append(tokenizer.decode(row, skip_special_tokens=False)[-160:])
                else:
                    lengths.append(end + 1)
                    hit_cap.append(False)
            bar.update(len(batch))
            bar.set_postfix(at_cap=sum(hit_cap), refresh=False)
    finally:
        bar.close()
        model.train(was_training)
    return LengthProbe(lengths, hit_cap, max_new_tokens, summarize_lengths(lengths, hit_cap, max_new_tokens), tails)


def load_prompts(
    path: str | Path, *, samples: int | None = None, seed: int = 0, column: str = "prompt", split: str = "train"
) -> list[Any]:
    """Prompts from a local dataset: a ``datasets.save_to_disk`` folder, a folder of data files as ``trl grpo``
    loads it (``load_dataset(folder)``: json, jsonl, parquet, csv, ...), or one such file (``split`` of a dataset
    with several). ValueError names what is wrong.

    ``samples`` rows are drawn at random (by ``seed``) without replacement; None or more than the rows = all.
    """
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".jsonl":
        values = _jsonl_column(path, column)
    elif path.exists():
        data = _load_local(path, split)
        if column not in data.column_names:
            raise ValueError(f"{path} has no {column!r} column; columns: {data.column_names} (pass --prompt_column)")
        values = list(data[column])
    else:
        raise ValueError(f"{path}: no such dataset folder or file")
    return sample_prompts(values, samples, seed)


def sample_prompts(values: list[Any], samples: int | None, seed: int) -> list[Any]:
    """``samples`` of ``values`` drawn by ``seed`` (in their order), or all of them."""
    if samples is not None and samples < len(values):
        values = [values[i] for i in sorted(random.Random(seed).sample(range(len(values)), samples))]
    return values


def pick_split(data: Any, split: str, where: str) -> Any:
    """``data[split]`` of a DatasetDict (ValueError listing the splits there), or ``data`` itself."""
    from datasets import DatasetDict, IterableDatasetDict

    if isinstance(data, DatasetDict | IterableDatasetDict):
        if split not in data:
            raise ValueError(f"{where} holds splits {sorted(data)}, not {split!r} (pass --split)")
        return data[split]
    return data


def _load_local(path: Path, split: str) -> Any:
    import datasets

    datasets.disable_progress_bars()
    saved = path.is_dir() and any((path / f).is_file() for f in ("dataset_dict.json", "state.json"))
    try:
        if saved:
            data = datasets.load_from_disk(str(path))
        elif path.is_dir():
            data = datasets.load_dataset(str(path))
        else:
            loaders = {".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
            loader = loaders.get(path.suffix.lower())
            if loader is None:
                raise ValueError(f"{path}: expected a dataset folder or a .jsonl/.json/.parquet/.csv/.arrow file")
            data = datasets.load_dataset(loader, data_files=str(path))
    except ValueError:
        raise
    except Exception as exc:  # datasets' own errors for an empty folder, unreadable files, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ValueError(f"{path}: could not load a dataset: {type(exc).__name__}: {first}") from exc
    return pick_split(data, split, str(path))


def _jsonl_column(path: Path, column: str) -> list[Any]:
    values = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n} is not JSON: {exc}") from exc
        if not isinstance(row, dict) or column not in row:
            fields = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{path}:{n} has no {column!r} field; fields: {fields} (pass --prompt_column)")
        values.append(row[column])
    return values
