"""One rank of bench_scale.py: the hook's real batch path, timed, under ``torchrun`` (gloo) or alone.

Each rank holds its own synthetic batch (real Qwen vocabulary text with think blocks, 8 generations per prompt,
three tasks, some truncated; bench_overhead's builders), the rewards of every rank's rows (TRL gathers them before
the hook sees them; gathered here once, untimed), and a real :class:`~rl_guards.trl.hook.GuardRun` with every guard
on a stand-in trainer holding what the hook reads. It then times ``GuardRun._after_generation`` (the call the hook
makes after TRL's ``_generate_and_score_completions``) on non-dump batches, split into parts: this rank's own rows
and scans, the gather of numbers, and the rest (the guards' decisions on the gathered numbers, the agreement).
Prints one JSON line per rank. Usage: ``python _scale_worker.py ROWS TOKENS REPEATS [--device cuda]``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch


def calibrate(world: int, features: int, device: torch.device) -> dict[str, float]:
    """The collectives' own cost here: a tiny all_reduce and all_gather (latency), and an all_gather that hands each
    rank what it would receive at 64 ranks (64 x 64 rows x ``features`` float64), for the bandwidth."""
    dist = torch.distributed

    def best_ms(fn: Any, n: int) -> float:
        # The minimum: on 2 shared cores the median mostly measures when the other process gets scheduled.
        times = []
        for _ in range(n):
            dist.barrier()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        return min(times)

    tiny = torch.zeros(3, dtype=torch.long, device=device)
    row = torch.zeros((1, features), dtype=torch.float64, device=device)
    big = torch.zeros((64 * 64 // world, features), dtype=torch.float64, device=device)

    def gather(t: torch.Tensor) -> None:
        dist.all_gather([torch.empty_like(t) for _ in range(world)], t)

    return {
        "reduce_latency_ms": best_ms(lambda: dist.all_reduce(tiny), 50),
        "gather_latency_ms": best_ms(lambda: gather(row), 50),
        "big_gather_ms": best_ms(lambda: gather(big), 20),
        "big_gather_bytes": 64 * 64 * features * 8,
    }


def main() -> None:
    rows, tokens, repeats = (int(a) for a in sys.argv[1:4])
    device = torch.device(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else torch.device("cpu")
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    from collections import defaultdict

    from bench_overhead import (
        guards_config,
        hook_inputs,
        load_tokenizer,
        run_context,
        synthetic_batch,
        synthetic_output,
    )

    from rl_guards.guards.registry import BATCH_GUARDS
    from rl_guards.tensors import collectives
    from rl_guards.trl.hook import GuardRun

    tokenizer = load_tokenizer()
    torch.manual_seed(rank)
    batch = synthetic_batch(tokenizer, rows, tokens)
    output = {k: v.to(device) for k, v in synthetic_output(batch, tokenizer.pad_token_id).items()}
    inputs, prompts, completions, ids, local_rewards = hook_inputs(batch, output)
    rewards = local_rewards
    if world > 1:  # every rank's rewards, as TRL's _calculate_rewards returns them (untimed set-up)
        parts = [torch.empty_like(local_rewards) for _ in range(world)]
        torch.distributed.all_gather(parts, local_rewards)
        rewards = torch.cat(parts)
    with tempfile.TemporaryDirectory() as tmp:
        config = guards_config(tmp)
        config.rollouts.every_steps = 10**9  # the non-dump path (the dump is measured on its own in bench_scale)
        ctx = run_context(tokenizer, tmp)
        trainer = SimpleNamespace(
            args=SimpleNamespace(
                output_dir=tmp,
                max_completion_length=tokens,
                chat_template_kwargs={"enable_thinking": True},
                mask_truncated_completions=False,
            ),
            processing_class=tokenizer,
            accelerator=SimpleNamespace(
                process_index=rank, num_processes=world, is_main_process=rank == 0, device=device
            ),
            eos_token_ids=list(ctx.eos_token_ids),
            reward_func_names=list(batch.reward_names),
            reward_funcs=[],
            reward_weights=torch.ones(len(batch.reward_names)),
            num_generations=batch.num_generations,
            state=SimpleNamespace(epoch=0.0, global_step=10),
            model=SimpleNamespace(training=True),
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
            _generate_and_score_completions=lambda inputs: inputs,
            _calculate_rewards=lambda *args: None,
        )
        run = GuardRun(trainer, config, BATCH_GUARDS)
        run.guard("rollouts")._next_due = 10**9  # no dump on the timed batches

        parts_ms: dict[str, list[float]] = defaultdict(list)
        gather = collectives.all_gather_rows

        def timed_gather(local: torch.Tensor) -> torch.Tensor:
            start = time.perf_counter()
            try:
                return gather(local)
            finally:
                parts_ms["_gather"].append((time.perf_counter() - start) * 1000)

        collectives.all_gather_rows = timed_gather
        build = run._gather_batch

        def timed_build(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return build(*args)
            finally:
                parts_ms["_build"].append((time.perf_counter() - start) * 1000)

        run._gather_batch = timed_build
        totals: list[float] = []
        for _ in range(repeats + 1):  # the first call warms caches (the vocabulary's markup ids): not counted
            run._pending_rewards = (inputs, prompts, completions, ids, rewards)
            if world > 1:
                torch.distributed.barrier()
            start = time.perf_counter()
            run._after_generation(output)
            if device.type == "cuda":
                torch.cuda.synchronize()
            totals.append((time.perf_counter() - start) * 1000)
            run.session.pop_metrics()
            trainer._metrics["train"].clear()
        totals, gathers, builds = totals[1:], parts_ms["_gather"][1:], parts_ms["_build"][1:]
        features = len(run._feature_names())
    calibration = calibrate(world, features, device) if world > 1 else {}
    result = {
        **calibration,
        "rank": rank,
        "world": world,
        "rows": rows,
        "tokens": tokens,
        "features": features,
        "total_ms_median": statistics.median(totals),
        "total_ms_best": min(totals),
        "gather_ms_median": statistics.median(gathers),
        "local_ms_median": statistics.median(b - g for b, g in zip(builds, gathers, strict=True)),
        "decide_ms_median": statistics.median(t - b for t, b in zip(totals, builds, strict=True)),
        "findings": [f"{r['guard']}/{r['kind']}" for r in run.session.summary_rows()],
    }
    print("SCALE " + json.dumps(result), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
