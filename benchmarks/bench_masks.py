"""Cost of the GRPO mask check next to a forward pass of the tiny model on the same batch (CPU).

For each (rows, prompt length, completion length): a synthetic rollout batch laid out as GRPOTrainer lays it out
(prompts left-padded, completions right-padded and cut after a random EOS, some rows truncated), then

- ``check``: :func:`rl_guards.tensors.grpo_masks.check_grpo_batch` (every rule, one host transfer);
- ``check+tools``: the same with a ``tool_mask`` and tool-result markers;
- ``guard``: ``GRPOMaskGuard.check_tensors`` as the hook calls it (check, metrics; clean batch, no message);
- ``forward``: ``model(prompt+completion, attention_mask)`` under ``torch.no_grad()`` (what TRL does at least
  once per batch for the old log-probs when it needs them, and again with gradients in the loss).

Times are the best of ``repeats`` runs, measured side by side in one process. The tiny model (2 layers, 64 wide,
2,074-token vocabulary) makes the forward pass about as cheap as a forward pass gets: a real model's is orders of
magnitude slower, so the ratio here is an upper bound on the check's relative cost.

Run: ``.venv/bin/python benchmarks/bench_masks.py [repeats] [threads]``  (prints a table)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _timing import best_ms

from rl_guards.config import GuardsConfig
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.tensors.grpo_masks import check_grpo_batch, grpo_mask_flags, grpo_mask_row_kinds
from rl_guards.testing import build_model, build_tokenizer

SHAPES = [  # rows, prompt length, completion length
    (8, 32, 16),
    (8, 64, 256),
    (32, 64, 256),
    (32, 128, 1024),
    (128, 128, 1024),
]


def warm_best_ms(fn: Callable[[], Any], repeats: int) -> float:
    """One warm-up call, then :func:`best_ms` (a single timed run after a multi-second warm-up)."""
    t = time.perf_counter()
    fn()
    return best_ms(fn, 1 if time.perf_counter() - t > 2.0 else repeats)


def make_batch(
    rows: int, prompt_len: int, completion_len: int, *, vocab: int, eos: int, pad: int, seed: int = 0
) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    plen = torch.randint(prompt_len // 2, prompt_len + 1, (rows,), generator=g)
    prompt_ids = torch.randint(300, vocab, (rows, prompt_len), generator=g)
    pos = torch.arange(prompt_len).expand(rows, -1)
    prompt_mask = (pos >= (prompt_len - plen).unsqueeze(1)).long()
    prompt_ids[prompt_mask == 0] = pad
    completion_ids = torch.randint(300, vocab, (rows, completion_len), generator=g)
    ends = torch.randint(1, completion_len, (rows,), generator=g)
    truncated = torch.rand(rows, generator=g) < 0.1
    ends[truncated] = completion_len  # no EOS: the row hit max_completion_length
    cpos = torch.arange(completion_len).expand(rows, -1)
    completion_ids[cpos == ends.unsqueeze(1)] = eos
    completion_mask = (cpos <= ends.unsqueeze(1)).long()
    completion_ids[completion_mask == 0] = pad
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.zeros(rows),
    }


def with_tools(batch: dict[str, Any], eos: int, head: list[int], tail: list[int]) -> dict[str, Any]:
    """Insert one tool result (head, 8 tokens, tail) after an early model EOS in every row long enough."""
    out = {k: v.clone() for k, v in batch.items()}
    ids, cm = out["completion_ids"], out["completion_mask"]
    tool_mask = torch.ones_like(cm)
    span = [*head, *range(400, 408), *tail]
    for r in range(ids.size(0)):
        length = int(cm[r].sum())
        if length < len(span) + 8:
            continue
        ids[r, 3] = eos
        ids[r, 4 : 4 + len(span)] = torch.tensor(span)
        tool_mask[r, 4 : 4 + len(span)] = 0
    out["tool_mask"] = tool_mask
    return out


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    torch.set_num_threads(threads)
    tok = build_tokenizer(2048, "qwen3")
    model = build_model(tok).eval()
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id
    eos_ids = [eos, pad]
    head = tok("\n<|im_start|>user\n<tool_response>", add_special_tokens=False)["input_ids"]
    tail = tok("</tool_response><|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]

    guard = GRPOMaskGuard(GuardsConfig.from_dict({"masking": {"mode": "raise"}}))

    class Args:
        mask_truncated_completions = False

    guard.setup(RunContext(eos_token_ids=eos_ids, pad_token_id=pad, args=Args(), tokenizer=tok))
    session = GuardSession()

    print(f"torch {torch.__version__}, {threads} thread(s), best of {repeats}; tiny Qwen3 (2x64, vocab {len(tok)})")
    header = (
        f"{'rows':>5} {'prompt':>6} {'compl':>6} | {'check ms':>9} {'+tools ms':>9} {'guard ms':>9} "
        f"{'forward ms':>10} | {'check/fwd':>9} {'guard/fwd':>9}"
    )
    print(header)
    print("-" * len(header))
    for rows, plen, clen in SHAPES:
        batch = make_batch(rows, plen, clen, vocab=2048, eos=eos, pad=pad)
        tools = with_tools(batch, eos, head, tail)
        report = check_grpo_batch(batch, eos_token_ids=eos_ids, pad_token_id=pad, mask_truncated=False)
        assert report.ok, report
        tool_report = check_grpo_batch(
            tools, eos_token_ids=eos_ids, pad_token_id=pad, mask_truncated=False, tool_head_ids=head, tool_tail_ids=tail
        )
        assert tool_report.ok, tool_report
        check = warm_best_ms(
            lambda b=batch: check_grpo_batch(b, eos_token_ids=eos_ids, pad_token_id=pad, mask_truncated=False),
            repeats,
        )
        check_tools = warm_best_ms(
            lambda b=tools: check_grpo_batch(
                b, eos_token_ids=eos_ids, pad_token_id=pad, mask_truncated=False, tool_head_ids=head, tool_tail_ids=tail
            ),
            repeats,
        )
        guarded = warm_best_ms(
            lambda b=batch: guard.check_tensors(b, session.reporter("masking", guard.config, 0)), repeats
        )
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)

        def forward(i: torch.Tensor = input_ids, a: torch.Tensor = attention) -> None:
            with torch.no_grad():
                model(input_ids=i, attention_mask=a)

        fwd = warm_best_ms(forward, repeats)
        print(
            f"{rows:>5} {plen:>6} {clen:>6} | {check:>9.2f} {check_tools:>9.2f} {guarded:>9.2f} {fwd:>10.1f} | "
            f"{check / fwd:>9.2%} {guarded / fwd:>9.2%}"
        )
    assert not session.findings
    headline(eos_ids, pad, repeats)


def headline(eos_ids: list[int], pad: int, repeats: int) -> None:
    """``mask check ms 4096x1024``: the per-batch check the hook runs (:func:`grpo_mask_row_kinds`, per-row rule bits,
    no host transfer), next to the detailed check that also keeps every offending position (0.1's every-batch
    path, now run only when a message is rendered), on one 4,096 x 1,024 batch, one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    batch = make_batch(4096, 256, 1024, vocab=2048, eos=eos_ids[0], pad=pad)
    kwargs = {"eos_token_ids": eos_ids, "pad_token_id": pad, "mask_truncated": False}
    assert not grpo_mask_row_kinds(batch, **kwargs).any()
    fast = warm_best_ms(lambda: grpo_mask_row_kinds(batch, **kwargs), repeats)
    detailed = warm_best_ms(lambda: grpo_mask_flags(batch, **kwargs), max(1, repeats // 2))
    torch.set_num_threads(threads)
    print(f"\nmask check ms 4096x1024: {fast:.1f} (detailed check with positions: {detailed:.1f}; one thread)")


if __name__ == "__main__":
    main()
