"""One rank of bench_scale.py: the hook's real batch path, timed, under ``torchrun`` (gloo) or alone.

Each rank holds its own synthetic batch (real Qwen vocabulary text with think blocks, 8 generations per prompt,
three tasks, some truncated; bench_overhead's builders), the rewards of every rank's rows (TRL gathers them before
the hook sees them; gathered here once, untimed), and a real :class:`~rl_guards.trl.hook.GuardRun` with every guard
installed on a stand-in trainer holding what the hook reads. Each timed batch goes through the trainer's wrapped
methods as TRL calls them: ``trainer._calculate_rewards(...)`` then ``trainer._generate_and_score_completions(inputs)``
(the stand-in's originals return the prepared rewards and tensors), on non-dump batches, then a stand-in training
step (a sleep of ``--step-ms``) and the engine's wait at the step's end (``Engine.join``). The training thread's time
is the two wraps plus that wait. With several ranks and ``engine.background`` on (the default) the batch is decided
on the engine's thread during the step; ``--inline`` decides it in the hook. Timed parts: the deciding
(``Engine._decide``: the gather of numbers, the guards over every row, the agreement; on whichever thread ran it)
and in it the gather. Prints one JSON line per rank. Usage:
``python _scale_worker.py ROWS TOKENS REPEATS [--device cuda] [--inline] [--step-ms N] [--sync-debug]``
(``--sync-debug``, on CUDA: the synchronisations each thread made, per batch).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
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
        rewards_of: Any = None, step: int = 10, background: bool = True,
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
        config.engine.background = background
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

    def count_syncs(self) -> None:
        """From now on, count the CUDA synchronisations per thread (``set_sync_debug_mode("warn")`` warns once per
        synchronising op) in ``self.syncs``: the training thread's and the engine thread's apart."""
        import warnings

        self.syncs: dict[str, int] = defaultdict(int)
        shown = warnings.showwarning

        def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            if "synchroniz" in str(message):
                self.syncs[threading.current_thread().name] += 1
            else:
                shown(message, category, *args, **kwargs)

        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")

    def batch(self, step_ms: float = 0.0) -> float:
        """One generation batch through the wrapped trainer methods, a stand-in training step of ``step_ms`` (a
        sleep: the GIL is free, as while a GPU step runs) and the engine's wait at the step's end; the training
        thread's wall ms (device synchronised), the sleep left out. Parts in ``self.last``."""
        trainer = self.trainer
        start = time.perf_counter()
        trainer._calculate_rewards(self.inputs, self.prompts, self.completions, self.ids)
        trainer._generate_and_score_completions(self.inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        hook = (time.perf_counter() - start) * 1000
        if step_ms:
            time.sleep(step_ms / 1000)
        start = time.perf_counter()
        self.run.engine.join()
        join = (time.perf_counter() - start) * 1000
        self.last = {"hook": hook, "join": join}
        self.run.session.pop_metrics()
        trainer._metrics["train"].clear()
        return hook + join

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


def timed_deciding(engine: Any, parts: dict[str, list[float]]) -> None:
    """Time ``Engine._decide`` into ``parts["decide"]`` (wall) and ``parts["decide_cpu"]`` (the deciding thread's CPU
    time: what it can take from the training thread under the GIL), and say which thread ran it
    (``parts["inline"]``: 1.0 on the training thread)."""
    fn = engine._decide

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            parts["decide"].append((time.perf_counter() - start) * 1000)
            parts["decide_cpu"].append((time.thread_time() - cpu) * 1000)  # this thread's CPU (the GIL it held)
            parts["inline"].append(float(threading.current_thread() is threading.main_thread()))

    engine._decide = wrapper


def main() -> None:
    rows, tokens, repeats = (int(a) for a in sys.argv[1:4])
    device = torch.device(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else torch.device("cpu")
    step_ms = float(sys.argv[sys.argv.index("--step-ms") + 1]) if "--step-ms" in sys.argv else 0.0
    background = "--inline" not in sys.argv
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        # NCCL needs a GPU per rank; with fewer GPUs than ranks the ranks share them over gloo (CUDA tensors)
        gpus = torch.cuda.device_count() if device.type == "cuda" else 0
        if gpus:
            device = torch.device("cuda", rank % gpus)
            torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl" if gpus >= world else "gloo")

    def every_rank(local_rewards: torch.Tensor) -> torch.Tensor:
        if world == 1:  # every rank's rewards, as TRL's _calculate_rewards returns them (untimed set-up)
            return local_rewards
        host = local_rewards.cpu() if torch.distributed.get_backend() == "gloo" else local_rewards
        parts = [torch.empty_like(host) for _ in range(world)]
        torch.distributed.all_gather(parts, host)
        return torch.cat(parts).to(local_rewards.device)

    with tempfile.TemporaryDirectory() as tmp:
        bench = HookBench(
            tmp, rows, tokens, world=world, rank=rank, device=device, rewards_of=every_rank, background=background
        )
        engine = bench.run.engine
        parts: dict[str, list[float]] = defaultdict(list)
        timed_deciding(engine, parts)
        bench.timed(engine.ranks, "gather_rows", parts, "gather")
        if "--sync-debug" in sys.argv and device.type == "cuda":
            bench.batch()  # warm (first-call caches), not counted
            parts.clear()
            bench.count_syncs()
        totals: list[float] = []
        hooks: list[float] = []
        joins: list[float] = []
        for _ in range(repeats + 1):  # the first call warms caches (the vocabulary's markup ids): not counted
            if world > 1:
                torch.distributed.barrier()
            totals.append(bench.batch(step_ms))
            hooks.append(bench.last["hook"])
            joins.append(bench.last["join"])
        totals, hooks, joins = totals[1:], hooks[1:], joins[1:]
        decide, inline, gather = (parts[k][1:] for k in ("decide", "inline", "gather"))
        features = len(engine.assembly.feature_names)
        findings = [f"{r['guard']}/{r['kind']}" for r in bench.run.session.summary_rows()]
        on_thread = engine.background
    if world > 1 and torch.distributed.get_backend() == "gloo":
        device = torch.device("cpu")  # the calibration models gloo: host tensors
    calibration = calibrate(world, features, device) if world > 1 else {}
    result = {
        **calibration,
        "rank": rank,
        "world": world,
        "rows": rows,
        "tokens": tokens,
        "features": features,
        "background": on_thread,
        "step_ms": step_ms,
        "total_ms_median": statistics.median(totals),
        "total_ms_best": min(totals),
        "hook_ms_median": statistics.median(hooks),
        "join_ms_median": statistics.median(joins),
        "gather_ms_median": statistics.median(gather),
        # the deciding, wherever it ran (the engine's thread, or the hook when inline)
        "decide_all_ms_median": statistics.median(decide),
        "decide_cpu_ms_median": statistics.median(parts["decide_cpu"][1:]),
        # this rank's own rows, always on the training thread: the hook without any deciding in it (check_tensors,
        # local_rows, Assembly.prepare: the shell, the guards' scans, the device columns)
        "local_ms_median": statistics.median(h - d * i for h, d, i in zip(hooks, decide, inline, strict=True)),
        "decide_ms_median": statistics.median(d - g for d, g in zip(decide, gather, strict=True)),
        "findings": findings,
        # CUDA syncs per timed batch, by thread (only with --sync-debug on CUDA)
        "syncs_per_batch": {k: v / (repeats + 1) for k, v in getattr(bench, "syncs", {}).items()},
    }
    print("SCALE " + json.dumps(result), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
