"""One rank of bench_scale.py: the hook's real batch path, timed, under ``torchrun`` (gloo) or alone.

Each rank holds its own synthetic batch (real Qwen vocabulary text with think blocks, 8 generations per prompt,
three tasks, some truncated; bench_overhead's builders), the rewards of every rank's rows (TRL gathers them before
the hook sees them; gathered here once, untimed), and a real :class:`~rl_guards.trl.hook.GuardRun` with every guard
installed on a stand-in trainer holding what the hook reads. Each timed batch goes through the trainer's wrapped
methods as TRL calls them: ``trainer._calculate_rewards(...)`` then ``trainer._generate_and_score_completions(inputs)``
(the stand-in's originals return the prepared rewards and tensors), on non-dump batches. The time is split into
parts: this rank's own work before the gather (``Engine.check_tensors``, ``trl.rollout_rows.local_rows``, the shell
and the guards' scans in ``Assembly.assemble``), the gather of numbers, the rest of ``Assembly.assemble`` (the
per-row numbers of every rank's rows), and the decisions (``Engine.process`` after ``assemble``: the guards, the
agreement, settle, metrics). Prints one JSON line per rank. Usage:
``python _scale_worker.py ROWS TOKENS REPEATS [--device cuda]``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
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


class HookBench:
    """A real ``GuardRun`` (every guard) on a stand-in trainer, fed one prepared batch as TRL feeds the hook.

    ``world``/``rank`` are what the stand-in accelerator says; ``rewards`` holds every rank's rows (TRL's).
    """

    def __init__(
        self, tmp: str, rows: int, tokens: int, *, world: int = 1, rank: int = 0, device: Any = "cpu",
        rewards_of: Any = None, step: int = 10,
    ) -> None:  # fmt: skip
        from bench_overhead import (
            guards_config,
            hook_inputs,
            load_tokenizer,
            run_context,
            synthetic_batch,
            synthetic_output,
        )

        from rl_guards.guards.registry import BATCH_GUARDS
        from rl_guards.trl.hook import GuardRun

        device = torch.device(device)
        tokenizer = load_tokenizer()
        torch.manual_seed(rank)
        batch = synthetic_batch(tokenizer, rows, tokens)
        self.output = {k: v.to(device) for k, v in synthetic_output(batch, tokenizer.pad_token_id).items()}
        self.inputs, self.prompts, self.completions, self.ids, local_rewards = hook_inputs(batch, self.output)
        self.rewards = rewards_of(local_rewards) if rewards_of is not None else local_rewards
        config = guards_config(tmp)
        config.rollouts.every_steps = 10**9  # the non-dump path unless a dump is asked for (see dump_next)
        ctx = run_context(tokenizer, tmp)
        self.trainer = SimpleNamespace(
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
            state=SimpleNamespace(epoch=0.0, global_step=step),
            model=SimpleNamespace(training=True),
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
            # TRL's originals, as the hook wraps them: the prepared tensors and every rank's rewards
            _generate_and_score_completions=lambda inputs: self.output,
            _calculate_rewards=lambda *args: self.rewards,
        )
        self.run = GuardRun(self.trainer, config, BATCH_GUARDS)
        self.recorder = self.run.guard("rollouts")
        self.recorder._next_due = 10**9  # no dump on the timed batches
        self.device = device

    def batch(self) -> float:
        """One generation batch through the wrapped trainer methods; wall ms (device synchronised)."""
        trainer = self.trainer
        start = time.perf_counter()
        trainer._calculate_rewards(self.inputs, self.prompts, self.completions, self.ids)
        trainer._generate_and_score_completions(self.inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1000
        self.run.session.pop_metrics()
        trainer._metrics["train"].clear()
        return ms

    def dump_next(self) -> None:
        """Make the next batch a dump batch, at a step of its own."""
        self.trainer.state.global_step += 1
        self.recorder._next_due = 0

    def timed(self, obj: Any, name: str, parts: dict[str, list[float]], label: str) -> None:
        """Time ``obj.name`` (an instance attribute, so the engine's calls go through it) into ``parts[label]``."""
        fn = getattr(obj, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[label].append((time.perf_counter() - start) * 1000)

        setattr(obj, name, wrapper)


def main() -> None:
    rows, tokens, repeats = (int(a) for a in sys.argv[1:4])
    device = torch.device(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else torch.device("cpu")
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")

    def every_rank(local_rewards: torch.Tensor) -> torch.Tensor:
        if world == 1:  # every rank's rewards, as TRL's _calculate_rewards returns them (untimed set-up)
            return local_rewards
        parts = [torch.empty_like(local_rewards) for _ in range(world)]
        torch.distributed.all_gather(parts, local_rewards)
        return torch.cat(parts)

    with tempfile.TemporaryDirectory() as tmp:
        bench = HookBench(tmp, rows, tokens, world=world, rank=rank, device=device, rewards_of=every_rank)
        engine = bench.run.engine
        parts: dict[str, list[float]] = defaultdict(list)
        bench.timed(engine, "process", parts, "process")
        bench.timed(engine.assembly, "assemble", parts, "assemble")
        bench.timed(engine.ranks, "gather_rows", parts, "gather")
        totals: list[float] = []
        for _ in range(repeats + 1):  # the first call warms caches (the vocabulary's markup ids): not counted
            if world > 1:
                torch.distributed.barrier()
            totals.append(bench.batch())
        totals = totals[1:]
        process, assemble, gather = (parts[k][1:] for k in ("process", "assemble", "gather"))
        features = len(engine.assembly.feature_names)
        findings = [f"{r['guard']}/{r['kind']}" for r in bench.run.session.summary_rows()]
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
        "gather_ms_median": statistics.median(gather),
        # before process, plus assemble up to the gather: check_tensors, local_rows, the shell, the scans (an
        # estimate of the part after the gather is not separable here; it is in the simulated figures)
        "local_ms_median": statistics.median(
            t - p + a - g for t, p, a, g in zip(totals, process, assemble, gather, strict=True)
        ),
        "decide_ms_median": statistics.median(p - a for p, a in zip(process, assemble, strict=True)),
        "findings": findings,
    }
    print("SCALE " + json.dumps(result), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
