"""What rl_guards costs each rank as a run scales out, and the other issue-12 figures, side by side in one run.

Prints one line per figure (then the details):

- ``per-rank guard ms at W=1,2 (real gloo) and modelled W=8,64, 64x1024 per rank``: the hook's batch path (every
  guard, non-dump batches; the stand-in trainer's wrapped ``_calculate_rewards`` then
  ``_generate_and_score_completions``, as TRL calls them: ``Engine.check_tensors``, ``trl.rollout_rows.local_rows``,
  ``Engine.process``) timed in real ``torchrun`` runs with 1 and 2 CPU processes (gloo), each rank holding 64 rows
  of ~1,024 tokens (``_scale_worker.py``). For 8, 64 and 256 ranks: the same hook run for real on rank 0 in this
  process with W*64 rows, every collective replaced by its result (``simulated_collectives``: the gathered numbers
  of every rank, objects through a pickle round trip), plus the collectives' wait, modelled from the W=2 gloo
  calibration (ring all_gather latency and bytes, all_reduce latency; NCCL on a real cluster is faster than gloo
  on loopback). Target: W=64 within 1.5x of W=1.
- ``hook ms per batch, rank 0, 64x1024 per rank``: the same per-rank time on rank 0 for W = 1, 2 (measured) and
  8, 64, 256 (simulated as above).
- ``dump step ms on rank 0 at W=64``: rank 0's training-thread time on a dump step at 64 ranks x 64 rows x ~1,024
  tokens: the text and ids of the other 63 ranks arriving through ``Assembly.fill_rows(..., everywhere=False)``
  (simulated as above: the 64 per-rank parts as ``gather_objects_to_main`` returns them, after a pickle round
  trip, so unpickling counts) plus the recorder's ``on_batch`` / ``after_batch`` (which hand the rows to the
  background writer). Target: <= 50 ms.
- ``blocking dump ms 1024x1024``: the training thread's share of a dump step (the recorder's ``on_batch`` and
  ``after_batch``, which hand the rows to the background writer) on 1,024 rows x ~1,024 tokens, next to TRL's own
  ``log_completions`` path on the same rows (``pd.DataFrame(table).to_parquet``, as ``GRPOTrainer.log`` does);
  also the writer's background time. Target: <= 50 ms.
- ``scanner GB/s`` and ``mask check ms 4096x1024``: the headline lines of ``bench_scanner.py`` and ``bench_masks.py``
  (run as they are).
- ``guards share of a tiny GRPO step (64x256)``: one real trainer on the tiny model, 64 completions of up to 256
  tokens per step, every guard switched on and off per step inside it (bench_overhead's interleaving), the guards'
  own time per guarded step (the hook, the reward wrappers, the callbacks, the log's extra; bench_overhead's part
  table) over the median unguarded step. Target: <= 1 %. The next line splits it: the hook, and what the guards
  cost outside it (target: within ~2 ms of the hook's, CPU); the reward probes keep to a budget of their own
  (``probes.budget``) and are reported apart, with their share of the run's time by their own clock.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--quick] [--device cuda]`` (~1-2 minutes on 2 CPU cores).
``--device cuda`` puts the measured ranks' batch tensors on the GPU (ranks share a GPU over gloo when there are fewer
GPUs than ranks); ``_scale_worker.py ... --device cuda --sync-debug`` counts each thread's CUDA synchronisations
(``torch.cuda.set_sync_debug_mode("warn")``). Timings on a shared machine are noisy (about +-30 %).
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
STEP_MS = 200.0  # the stand-in training step the engine's thread overlaps (a sleep: the GIL is free, as on a GPU)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(world: int, repeats: int, device: str, extra: list[str] | None = None) -> list[dict[str, Any]]:
    """The worker under torchrun (W > 1) or alone; one JSON result per rank."""
    worker = [str(HERE / "_scale_worker.py"), str(ROWS), str(TOKENS), str(repeats), "--device", device, *(extra or [])]
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


@contextlib.contextmanager
def simulated_collectives(world: int) -> Any:
    """Rank 0 of ``world`` ranks in this one process: the real code runs, each collective replaced by its result.

    The gather of numbers hands back ``world`` copies of this rank's table (the real ``gather_feature_rows`` builds
    the table and joins the parts; only ``dist.all_gather`` is skipped); the decision all_reduce returns this rank's
    values (every rank agrees); objects make a pickle round trip (rank 0 unpickles every rank's part, as
    ``gather_object`` does). For ``gather_objects_to_main`` the other ranks' parts are this rank's with their rows
    moved to the other ranks' rows, pickled once beforehand (the other ranks' work): the first call only prepares
    them. The wait inside the collectives is not here; bench_scale adds it from the gloo model.
    """
    import pickle

    import torch

    from rl_guards.tensors import collectives

    names = ("distributed", "all_reduce_ints", "all_gather_objects", "gather_objects_to_main", "all_gather_rows",
             "own_group")  # fmt: skip
    saved = {name: getattr(collectives, name) for name in names}
    others: list[bytes] = []

    def all_gather_rows(local: torch.Tensor, group: Any = None) -> torch.Tensor:
        return torch.cat([local.contiguous()] * world, dim=0)

    def all_gather_objects(obj: Any, group: Any = None) -> list[Any]:
        data = pickle.dumps(obj)
        return [pickle.loads(data) for _ in range(world)]

    def gather_objects_to_main(obj: Any, group: Any = None) -> list[Any]:
        if not others:
            held = max((len(part["rows"]) for part in obj), default=0)
            for r in range(1, world):
                moved = [{**part, "rows": [row + r * held for row in part["rows"]]} for part in obj]
                others.append(pickle.dumps(moved))
        return [pickle.loads(pickle.dumps(obj)), *(pickle.loads(data) for data in others)]

    collectives.distributed = lambda: True
    collectives.all_reduce_ints = lambda values, op="sum", device=None, group=None: [int(v) for v in values]
    collectives.own_group = lambda: "simulated"  # the engine's own group: a name is enough here
    collectives.all_gather_objects = all_gather_objects
    collectives.gather_objects_to_main = gather_objects_to_main
    collectives.all_gather_rows = all_gather_rows
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(collectives, name, fn)


def simulated_hook(
    world: int, repeats: int, dumps: int = 0, background: bool = True, step_ms: float = STEP_MS
) -> dict[str, Any]:
    """Rank 0's hook at ``world`` ranks x 64 rows (``simulated_collectives``), each batch followed by a stand-in
    step of ``step_ms`` and the engine's wait at its end: per non-dump batch the training thread's ms (median and
    best of ``repeats``) and the deciding's ms (``Engine._decide``: on the engine's thread with ``background``,
    else in the hook). With ``dumps``, per dump batch the dump's work: ``Assembly.fill_rows`` (every rank's text and
    ids arriving on rank 0) and the recorder's ``on_batch`` and ``after_batch`` (which hand the rows to the
    background writer; its write is waited for outside the timing), and the training thread's ms on that batch."""
    import statistics
    from collections import defaultdict

    import torch
    from _scale_worker import HookBench, timed_deciding

    with simulated_collectives(world), tempfile.TemporaryDirectory() as tmp:
        bench = HookBench(
            tmp, ROWS, TOKENS, world=world, rewards_of=lambda local: torch.cat([local] * world), background=background
        )
        parts: dict[str, list[float]] = defaultdict(list)
        timed_deciding(bench.run.engine, parts)
        totals, hooks = [], []
        for _ in range(repeats + 1):  # the first warms caches
            totals.append(bench.batch(step_ms))
            hooks.append(bench.last["hook"])
        totals, hooks, decide, cpu = totals[1:], hooks[1:], parts["decide"][1:], parts["decide_cpu"][1:]
        parts.clear()
        bench.timed(bench.run.engine.assembly, "fill_rows", parts, "fill_rows")
        bench.timed(bench.recorder, "on_batch", parts, "recorder")
        bench.timed(bench.recorder, "after_batch", parts, "recorder")
        dump_steps: list[dict[str, float]] = []
        for k in range(dumps + 1 if dumps else 0):  # the first prepares the other ranks' parts: not counted
            parts.clear()
            bench.dump_next()
            training = bench.batch(step_ms)
            if k:
                fill, recorder = sum(parts["fill_rows"]), sum(parts["recorder"])
                dump_steps.append({"fill_rows": fill, "recorder": recorder, "dump": fill + recorder,
                                   "training": training, "decide": parts["decide"][-1]})  # fmt: skip
            bench.run.engine.flush()  # the writer's background work, untimed
        features = len(bench.run.engine.assembly.feature_names)
        on_thread = bench.run.engine.background
    best = sorted(dump_steps, key=lambda d: d["dump"])[len(dump_steps) // 2] if dump_steps else {}
    return {"median": statistics.median(totals), "best": min(totals), "hook": statistics.median(hooks),
            "decide": statistics.median(decide), "decide_cpu": statistics.median(cpu), "dump": best,
            "features": features, "background": on_thread,
            "step_ms": step_ms}  # fmt: skip


def scale_figures(quick: bool, device: str) -> dict[str, Any]:
    repeats = 3 if quick else 8
    # Every figure with the stand-in step between batches (an idle CPU between hooks makes the next one slower than
    # back to back: caches, clocks), so background and inline compare like for like; W=1 also back to back, as
    # 437f4ff was measured.
    step = ["--step-ms", str(STEP_MS)]
    w1_warm = run_ranks(1, repeats, device)[0]
    w1 = run_ranks(1, repeats, device, step)[0]
    w2 = run_ranks(2, repeats, device, step)  # the default: background
    w2_inline = run_ranks(2, repeats, device, [*step, "--inline"])
    features = w1["features"]
    calib = w2_inline[0]
    lat_g, lat_r = calib["gather_latency_ms"], calib["reduce_latency_ms"]
    per_byte = max(calib["big_gather_ms"] - lat_g, 1e-9) / calib["big_gather_bytes"]  # ms per byte
    dumps = (2 if quick else 3)
    inline = {w: simulated_hook(w, repeats, dumps=dumps if w == 64 else 0, background=False) for w in (1, *MODELLED)}
    back = {w: simulated_hook(w, repeats, dumps=dumps if w == 64 else 0) for w in MODELLED}

    def comm(w: int) -> float:
        """Ring all_gather: (W-1) latency steps and the bytes a rank receives; the decision all_reduce: 2 log2(W)
        latency steps (recursive halving-doubling). Latencies and bandwidth as measured here at W=2 (gloo)."""
        import math

        return (w - 1) * lat_g + ROWS * features * 8 * w * per_byte + 2 * math.log2(w) * lat_r

    # Inline: the training thread runs the whole hook and waits for the collectives.
    inline_total = {1: w1["total_ms_median"], 2: max(r["total_ms_median"] for r in w2_inline),
                    **{w: inline[w]["median"] + comm(w) for w in MODELLED}}  # fmt: skip
    # Background (the default with several ranks): the engine's thread decides (compute + the collectives' wait)
    # while the step trains; the training thread runs the hook and waits at the step's end only for what is left.
    engine_thread = {2: w2[0]["decide_all_ms_median"], **{w: back[w]["decide"] + comm(w) for w in MODELLED}}
    training = {1: w1["total_ms_median"], 2: w2[0]["total_ms_median"],
                **{w: back[w]["median"] + max(0.0, engine_thread[w] - STEP_MS) for w in MODELLED}}  # fmt: skip
    ratio64, ratio256 = training[64] / training[1], training[256] / training[1]
    print(
        f"per-rank guard ms at W=1,2 (real gloo) and modelled W=8,64, {ROWS}x{TOKENS} per rank: "
        f"{training[1]:.1f}, {training[2]:.1f}, {training[8]:.1f}, {training[64]:.1f} "
        f"(training thread; W=64 / W=1 = {ratio64:.2f}x; target <= 1.5x: {'met' if ratio64 <= 1.5 else 'NOT met'})"
    )
    figures = ", ".join(f"W={w} {training[w]:.1f}" for w in WORLDS)
    print(f"hook ms per batch, rank 0, {ROWS}x{TOKENS} per rank: {figures}")
    warm = w1_warm["total_ms_median"]
    print(
        f"  (the training thread's time, the default config, a {STEP_MS:.0f} ms stand-in step between batches: W=1 "
        f"decides in the hook; with several ranks the hook reads this rank's rows and the engine's thread decides "
        f"while the step trains. W=256 / W=1 = {ratio256:.2f}x; target <= 1.3x: "
        f"{'met' if ratio256 <= 1.3 else 'NOT met'}. W=1 back to back, as 437f4ff was measured: {warm:.1f}; target "
        f"<= 6: {'met' if warm <= 6 else 'NOT met'}; with the step between, as above: {training[1]:.1f}, "
        f"{'also' if training[1] <= 6 else 'not'} <= 6: the same hook after 200 ms of other work, busy or idle, "
        f"finds its code and data out of cache)"
    )
    print(
        "engine thread ms per batch, rank 0 (decides while the step trains; compute + modelled wait): "
        + ", ".join(f"W={w} {engine_thread[w]:.1f}" for w in (2, *MODELLED))
        + f" (hidden while the step lasts longer; the stand-in step here: {STEP_MS:.0f} ms)"
    )
    cpu = {2: w2[0]["decide_cpu_ms_median"], **{w: back[w]["decide_cpu"] for w in MODELLED}}
    print(
        "  of which the engine thread's own CPU (under the GIL; a step that runs Python the whole time can be slowed "
        "by up to this much): " + ", ".join(f"W={w} {cpu[w]:.1f}" for w in (2, *MODELLED))
    )
    print(
        "inline hook ms per batch, rank 0 (engine.background false: decided in the hook, the wait on the training "
        "thread): " + ", ".join(f"W={w} {inline_total[w]:.1f}" for w in WORLDS)
        + f" (W=256 / W=1 = {inline_total[256] / inline_total[1]:.2f}x)"
    )
    dump, dump_inline = back[64]["dump"], inline[64]["dump"]
    print(f"dump step ms on rank 0 at W=64: {dump['training']:.1f}")
    print(
        f"  (the training thread on a dump batch; the dump's work on the engine's thread: Assembly.fill_rows of 64 "
        f"ranks' text and ids {dump['fill_rows']:.1f} + the recorder's on_batch/after_batch {dump['recorder']:.1f}; "
        f"inline, on the training thread: {dump_inline['fill_rows']:.1f} + {dump_inline['recorder']:.1f} = "
        f"{dump_inline['dump']:.1f}, the whole hook {dump_inline['training']:.1f}; target <= 50: "
        f"{'met' if dump['training'] <= 50 else 'NOT met'})"
    )
    return {"w1": w1, "w1_warm": w1_warm, "w2": w2, "w2_inline": w2_inline, "inline": inline, "back": back,
            "per_byte": per_byte, "features": features, "comm": {w: comm(w) for w in WORLDS[1:]}, "lat_g": lat_g,
            "lat_r": lat_r, "training": training, "engine_thread": engine_thread,
            "inline_total": inline_total}  # fmt: skip


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
    own, hook = result["guard_ms_per_step"], result["hook_ms_per_step"]
    own_cpu, hook_cpu = result["guard_cpu_ms_per_step"], result["hook_cpu_ms_per_step"]
    share = own / result["off_median_ms"]
    print(
        f"guards share of a tiny GRPO step (64x256): {share:.2%} "
        f"(guards' own {own:.1f} ms per guarded step, reward probes apart, over the median unguarded step of "
        f"{result['off_median_ms']:.0f} ms; CPU {own_cpu:.1f} of {result['off_median_cpu_ms']:.0f} ms = "
        f"{own_cpu / result['off_median_cpu_ms']:.2%}; on/off ratio of mean step times "
        f"{result['ratio_of_means']:.3f} [{result['ci'][0]:.3f}, {result['ci'][1]:.3f}], {result['pairs']} pairs; "
        f"target <= 1 %: {'met' if share <= 0.01 else 'NOT met'})"
    )
    print(
        f"  of which the hook {hook:.1f} ms (CPU {hook_cpu:.1f}); outside it (reward wrappers, callbacks, the log's "
        f"extra) {own - hook:+.1f} ms (CPU {own_cpu - hook_cpu:+.1f}); target: the guards' own within ~2 ms of the "
        f"hook's: {'met' if own_cpu - hook_cpu <= 2 else 'NOT met'} (CPU). The reward probes, on their own budget "
        f"(probes.budget): {result['probe_ms_per_step']:.1f} ms per guarded step (CPU "
        f"{result['probe_cpu_ms_per_step']:.1f}), {result['probe_share']:.2%} of the run's time by their own clock "
        f"({result['probe_rounds']}). "
        f"Summed as up to ab22f5f (the guards' hooks with the probes' scan inside the assembly, no reward wrappers "
        f"or callbacks): {result['summed_hooks_ms_per_step']:.1f} ms"
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
    w1, w2, w2_inline = scale["w1"], scale["w2"], scale["w2_inline"]
    print(f"W=1 back to back (no step between batches): {scale['w1_warm']['total_ms_median']:.1f} ms.")
    print(f"Per-row numbers gathered: {scale['features']} float64 per row ({scale['features'] * 8} bytes).")
    print("Measured (torchrun, gloo; a stand-in step between batches): the training thread's ms is the hook plus "
          "the wait at the step's end; the deciding ran on the engine's thread (background) or in the hook "
          "(inline).")  # fmt: skip
    print("| W | config | training thread ms (median) | hook ms | wait at step end ms | deciding ms | gather ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in [w1, *w2, *w2_inline]:
        where = "background" if r.get("background") else "inline"
        print(f"| {r['world']} (rank {r['rank']}) | {where} | {r['total_ms_median']:.1f} | "
              f"{r['hook_ms_median']:.1f} | {r['join_ms_median']:.2f} | {r['decide_all_ms_median']:.1f} | "
              f"{r['gather_ms_median']:.2f} |")  # fmt: skip
    print(
        f"\nModel for larger W: the hook on rank 0 run for real in one process with W*64 rows, every collective "
        f"replaced by its result (the numbers of every rank joined, objects through a pickle round trip), plus the "
        f"collectives' wait: ring all_gather (W-1) x {scale['lat_g']:.3f} ms + bytes at "
        f"{1 / scale['per_byte'] / 1e3:.0f} MB/s, decision all_reduce 2 log2(W) x {scale['lat_r']:.3f} ms (gloo on "
        f"loopback, measured at W=2; NCCL between GPUs has ~10x lower latency). Background: the engine's thread "
        f"takes the deciding plus that wait; the training thread waits at the step's end only for what outlasts the "
        f"{STEP_MS:.0f} ms stand-in step. Inline: the training thread takes both."
    )
    print("| W | background: training thread ms (median / best) | engine thread ms (deciding + wait) | "
          "inline: hook ms, collectives replaced (median / best) | collectives ms (modelled) | inline total ms |")
    print("|---|---:|---:|---:|---:|---:|")  # fmt: skip
    for w in WORLDS:
        back, inline = scale["back"].get(w), scale["inline"].get(w)
        cell_b = f"{back['median']:.1f} / {back['best']:.1f}" if back else f"{scale['training'][w]:.1f} (measured)"
        engine = scale["engine_thread"].get(w)
        cell_e = f"{engine:.1f}" if engine is not None else "-"
        cell_i = f"{inline['median']:.1f} / {inline['best']:.1f}" if inline else "(measured)"
        comm = scale["comm"].get(w, 0.0)
        print(f"| {w} | {cell_b} | {cell_e} | {cell_i} | {comm:.2f} | {scale['inline_total'][w]:.1f} |")
    print("\nTiny GRPO step, guards on vs off (bench_overhead's interleaving):\n")
    print(share["detail"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
