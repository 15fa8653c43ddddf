"""What rl_guards costs each rank as a run scales out, and the other issue-12 figures, side by side in one run.

Prints one line per figure (then the details):

- ``per-rank guard ms at W=1,2 (real gloo) and modelled W=8,64, 64x1024 per rank``: the hook's batch path
  (``GuardRun._after_generation``, every guard, non-dump batches) timed in real ``torchrun`` runs with 1 and 2 CPU
  processes (gloo), each rank holding 64 rows of ~1,024 tokens (``_scale_worker.py``). For 8 and 64 ranks, a model
  from measured parts: this rank's own rows (measured at W=1; independent of W), the decisions on the gathered
  numbers (measured in this process on a W*64-row batch built as the hook builds it after the gather), and the
  gather itself (its measured W=2 time, scaled with the bytes each rank receives; NCCL on a real cluster is
  faster than gloo on loopback). Target: W=64 within 1.5x of W=1.
- ``hook ms per batch, rank 0, 64x1024 per rank``: the same per-rank time on rank 0 for W = 1, 2 (measured) and
  8, 64, 256 (modelled as above).
- ``blocking dump ms 1024x1024``: the training thread's share of a dump step (the recorder's ``on_batch`` and
  ``after_batch``, which hand the rows to the background writer) on 1,024 rows x ~1,024 tokens, next to TRL's own
  ``log_completions`` path on the same rows (``pd.DataFrame(table).to_parquet``, as ``GRPOTrainer.log`` does);
  also the writer's background time. Target: <= 50 ms.
- ``scanner GB/s`` and ``mask check ms 4096x1024``: the headline lines of ``bench_scanner.py`` and ``bench_masks.py``
  (run as they are).
- ``guards share of a tiny GRPO step (64x256)``: one real trainer on the tiny model, 64 completions of up to 256
  tokens per step, every guard switched on and off per step inside it (bench_overhead's interleaving), the guards'
  own time per guarded step over the median unguarded step. Target: <= 1 %.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--quick] [--device cuda]`` (~3-5 minutes on 2 CPU cores).
``--device cuda`` puts the batch tensors on the GPU and runs the hook under ``torch.cuda.set_sync_debug_mode("warn")``
(not run here: no GPU on this machine). Timings on a shared machine are noisy (about +-30 %).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

ROWS, TOKENS = 64, 1024  # per rank
WORLDS = (1, 2, 8, 64, 256)  # W=1,2 run for real; the others modelled
MODELLED = (8, 64, 256)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(world: int, repeats: int, device: str) -> list[dict[str, Any]]:
    """The worker under torchrun (W > 1) or alone; one JSON result per rank."""
    worker = [str(HERE / "_scale_worker.py"), str(ROWS), str(TOKENS), str(repeats), "--device", device]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if world == 1:
        cmd = [sys.executable, *worker]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               "--master_addr=127.0.0.1", f"--master_port={_free_port()}", *worker]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    # The ranks' lines can land on one line of torchrun's merged output: read every "SCALE {...}" wherever it is.
    decoder = json.JSONDecoder()
    results = [decoder.raw_decode(part)[0] for part in proc.stdout.split("SCALE ")[1:]]
    if len(results) != world:
        raise RuntimeError(f"W={world} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    if proc.returncode:  # gloo's teardown sometimes aborts a rank after every rank reported
        print(f"(W={world}: exit {proc.returncode} after every rank reported)", file=sys.stderr)
    return sorted(results, key=lambda r: r["rank"])


def decide_ms(world: int, repeats: int) -> float:
    """The guards' decisions on a W*64-row gathered batch, as every rank runs them (best of ``repeats``)."""
    from bench_overhead import guards_config, load_tokenizer, run_context, synthetic_batch

    from rl_guards.core.batch import RolloutBatch
    from rl_guards.core.metric_set import MetricFilter
    from rl_guards.guards.base import GuardSession, run_hook
    from rl_guards.guards.registry import BATCH_GUARDS

    tokenizer = load_tokenizer()
    local = synthetic_batch(tokenizer, ROWS, TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        config = guards_config(tmp)
        config.rollouts.every_steps = 10**9
        ctx = run_context(tokenizer, tmp)
        guards = [cls(config) for cls in BATCH_GUARDS]
        for guard in guards:
            guard.setup(ctx)
        features = {f"{g.name}/{k}": v for g in guards if getattr(g, "FEATURES", ()) for k, v in g.scan(local).items()}
        n = ROWS * world

        def rep(values: list[Any]) -> list[Any]:
            return [v for _ in range(world) for v in values]

        def gathered() -> RolloutBatch:  # a fresh batch each time: its numeric views are computed per batch
            return RolloutBatch(
                step=10, mode="train", num_generations=local.num_generations, reward_names=local.reward_names,
                reward_weights=local.reward_weights, rewards=rep(local.rewards), advantages=rep(local.advantages),
                tasks=rep(local.tasks), completions=local.completions + [None] * (n - ROWS),
                completion_ids=local.completion_ids + [[]] * (n - ROWS),
                prompt_ids=local.prompt_ids + [[]] * (n - ROWS), truncated=rep(local.truncated),
                thinking=rep(local.thinking), completion_lengths=rep([len(x) for x in local.completion_ids]),
                prompt_opened=rep(local.prompt_opened or [False] * ROWS),
                features={k: rep(v) for k, v in features.items()}
                | {"masking/kinds": [0.0] * n, "masking/checked": [1.0] * n},
                local_rows=range(0, ROWS), columns={},
            )  # fmt: skip

        session = GuardSession()
        session.defer = True
        session.metric_filter = MetricFilter()
        best = float("inf")
        for _ in range(repeats + 1):
            batch = gathered()
            start = time.perf_counter()
            for guard in guards:
                run_hook(guard, "on_batch", session, 10, batch, settle=False)
            session.settle()
            session.pop_metrics()
            best = min(best, (time.perf_counter() - start) * 1000)
        return best


def scale_figures(quick: bool, device: str) -> dict[str, Any]:
    repeats = 3 if quick else 8
    w1 = run_ranks(1, repeats, device)[0]
    w2 = run_ranks(2, repeats, device)
    features = w1["features"]
    local = w1["local_ms_median"]
    calib = w2[0]
    lat_g, lat_r = calib["gather_latency_ms"], calib["reduce_latency_ms"]
    per_byte = max(calib["big_gather_ms"] - lat_g, 1e-9) / calib["big_gather_bytes"]  # ms per byte
    decide = {w: decide_ms(w, 2 if quick else 3) for w in (1, *WORLDS[1:])}
    other = max(w1["decide_ms_median"] - decide[1], 0.0)  # settle, flush, the recorder: independent of W

    def comm(w: int) -> float:
        """Ring all_gather: (W-1) latency steps and the bytes a rank receives; the decision all_reduce: 2 log2(W)
        latency steps (recursive halving-doubling). Latencies and bandwidth as measured here at W=2 (gloo)."""
        import math

        return (w - 1) * lat_g + ROWS * features * 8 * w * per_byte + 2 * math.log2(w) * lat_r

    model = {w: local + decide[w] + other + comm(w) for w in MODELLED}
    compute = {w: local + decide[w] + other for w in (1, *MODELLED)}
    measured = {1: w1["total_ms_median"], 2: max(r["total_ms_median"] for r in w2)}
    ratio = model[64] / measured[1]
    compute_ratio = compute[64] / compute[1]
    print(
        f"per-rank guard ms at W=1,2 (real gloo) and modelled W=8,64, {ROWS}x{TOKENS} per rank: "
        f"{measured[1]:.1f}, {measured[2]:.1f}, {model[8]:.1f}, {model[64]:.1f} "
        f"(W=64 / W=1 = {ratio:.2f}x with gloo-on-loopback collective latency, {compute_ratio:.2f}x in compute; "
        f"target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})"
    )
    rank0 = {1: w1["total_ms_median"], 2: w2[0]["total_ms_median"], **model}
    print(
        f"hook ms per batch, rank 0, {ROWS}x{TOKENS} per rank: "
        + ", ".join(f"W={w} {rank0[w]:.1f}" for w in WORLDS)
        + " (W=1,2 measured under torchrun with gloo; larger W modelled as in the details)"
    )
    return {"w1": w1, "w2": w2, "decide": decide, "other": other, "per_byte": per_byte, "model": model,
            "measured": measured, "features": features, "comm": {w: comm(w) for w in WORLDS[1:]},
            "lat_g": lat_g, "lat_r": lat_r, "compute": compute}  # fmt: skip


def dump_figures(quick: bool) -> dict[str, float]:
    import pandas as pd
    from bench_overhead import load_tokenizer, run_context, synthetic_batch

    from rl_guards.config import GuardsConfig
    from rl_guards.guards.base import GuardSession
    from rl_guards.guards.recorder import RolloutRecorder

    tokenizer = load_tokenizer()
    batch = synthetic_batch(tokenizer, 1024, 1024)
    repeats = 2 if quick else 3
    blocking: list[float] = []
    background: list[float] = []
    trl: list[float] = []
    for k in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            config = GuardsConfig.from_dict({"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}})
            recorder = RolloutRecorder(config)
            recorder.setup(run_context(tokenizer, tmp))
            report = GuardSession().reporter(recorder.name, recorder.config, batch.step)
            start = time.perf_counter()
            recorder.on_batch(batch, report)
            recorder.after_batch(batch, report)  # the rows are handed to the writer here
            blocking.append((time.perf_counter() - start) * 1000)
            recorder.flush(report)
            background.append((time.perf_counter() - start) * 1000)
            # TRL's own path for the same rows (GRPOTrainer.log with log_completions=True).
            table = {
                "step": [batch.step] * len(batch),
                "prompt": [[{"role": "user", "content": str(p)}] for p in batch.prompts],
                "completion": [[{"role": "assistant", "content": c}] for c in batch.completions],
                **{name: [r[i] for r in batch.rewards] for i, name in enumerate(batch.reward_names)},
                "advantage": list(batch.advantages),
            }
            start = time.perf_counter()
            pd.DataFrame(table).to_parquet(os.path.join(tmp, f"completions_{k:05d}.parquet"))
            trl.append((time.perf_counter() - start) * 1000)
    x, y, z = min(blocking), min(trl), min(background)
    print(
        f"blocking dump ms 1024x1024: {x:.1f} (TRL log_completions path: {y:.1f}) "
        f"[background write until on disk: {z:.0f} ms; target <= 50: {'met' if x <= 50 else 'NOT met'}]"
    )
    return {"blocking": x, "trl": y, "background": z}


def headline_of(script: str, prefix: str, args: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=str(HERE),
    )  # fmt: skip
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(prefix)), None)
    text = line or f"{prefix} (missing: benchmarks/{script} printed no such line; exit {proc.returncode})"
    print(text)
    return text


def step_share(quick: bool) -> dict[str, Any]:
    from bench_overhead import section_step

    with contextlib.redirect_stdout(io.StringIO()) as detail:
        result = section_step(pairs=3 if quick else 8, seed=0, warmup=2, batch=64, max_new=256)
    share = result["guard_ms_per_step"] / result["off_median_ms"]
    print(
        f"guards share of a tiny GRPO step (64x256): {share:.2%} "
        f"(guards' own {result['guard_ms_per_step']:.1f} ms per guarded step over the median unguarded step of "
        f"{result['off_median_ms']:.0f} ms; on/off ratio of mean step times {result['ratio_of_means']:.3f} "
        f"[{result['ci'][0]:.3f}, {result['ci'][1]:.3f}], {result['pairs']} pairs; target <= 1 %: "
        f"{'met' if share <= 0.01 else 'NOT met'})"
    )
    result["detail"] = detail.getvalue()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(f"# bench_scale (torch {torch.__version__}, {os.cpu_count()} cores, device {args.device})\n")
    scale = scale_figures(args.quick, args.device)
    dump_figures(args.quick)
    headline_of("bench_scanner.py", "scanner GB/s:", ["10" if args.quick else "30"])
    headline_of("bench_masks.py", "mask check ms 4096x1024:", ["2" if args.quick else "3"])
    share = step_share(args.quick)
    print("\n## Details\n")
    w1, w2 = scale["w1"], scale["w2"]
    print(f"Per-row numbers gathered: {scale['features']} float64 per row ({scale['features'] * 8} bytes).")
    print("| W | measured total ms (median) | this rank's rows ms | gather ms | decisions + rest ms |")
    print("|---|---:|---:|---:|---:|")
    for r in [w1, *w2]:
        print(f"| {r['world']} (rank {r['rank']}) | {r['total_ms_median']:.1f} | {r['local_ms_median']:.1f} | "
              f"{r['gather_ms_median']:.2f} | {r['decide_ms_median']:.1f} |")  # fmt: skip
    print(
        f"\nModel for larger W: this rank's rows (W=1, {w1['local_ms_median']:.1f} ms) + the decisions on W*64 rows "
        f"(measured here) + settle/flush ({scale['other']:.1f} ms) + collectives: ring all_gather (W-1) x "
        f"{scale['lat_g']:.3f} ms + bytes at {1 / scale['per_byte'] / 1e3:.0f} MB/s, decision all_reduce 2 log2(W) x "
        f"{scale['lat_r']:.3f} ms (gloo on loopback, measured at W=2; NCCL between GPUs has ~10x lower latency)."
    )
    print("| W | decisions ms | collectives ms (modelled) | per-rank total ms | of which compute |")
    print("|---|---:|---:|---:|---:|")
    for w in WORLDS:
        total = scale["measured"][w] if w in scale["measured"] else scale["model"][w]
        comm = scale["comm"].get(w, 0.0)
        compute = scale["compute"].get(w, total - comm)
        print(f"| {w} | {scale['decide'][w]:.1f} | {comm:.2f} | {total:.1f} | {compute:.1f} |")
    print("\nTiny GRPO step, guards on vs off (bench_overhead's interleaving):\n")
    print(share["detail"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
