"""What rl_guards costs a tinker-cookbook loop: iterations with every guard on vs the same loop plain, in one run.

The cookbook's own ``rl.train.main`` (unmodified) on the local Tinker backend with the tiny Qwen3 model, on the tiny
tasks as a cookbook dataset (``rl_guards.testing.tinker_envs``) with stop sequences off, so that every completion is
exactly ``--max_tokens`` tokens: ``--groups x --group_size`` rollouts per iteration (default 8 x 8 = 64 rollouts x 256
tokens). Runs alternate plain / guarded (``--pairs`` pairs, in one process); the first iteration of each run is a
warm-up and is not counted. Guarded runs use the default guards config plus a rollout dump every iteration
(``rollouts.every_steps=1``), with the local backend's datum check on.

Reported per iteration (medians over the counted iterations):

- the cookbook's own ``time/total`` (sampling, rewards, training, checkpoint) plain and guarded, and their ratio:
  the end-to-end figure, noisy on a shared machine;
- rl_guards' own time on the loop's critical path, measured inside the run (``TinkerRun.hook_seconds``: the dataset
  and group hooks, the batch's decision, the check of the datums sent), as a share of the guarded iteration: the
  precise figure. The goal is <= 1 % for the guards; the reward probes (on by default, stepping the envs on
  variants of real completions) have a budget of their own, ``probes.budget`` (2 % of the run's time), and their
  seconds are shown apart. Dumps are built and written on rl_guards' background writer thread, off the loop's
  critical path (only their hand-off is counted).

Run: ``.venv/bin/python benchmarks/bench_tinker.py [--pairs 2] [--iterations 3] [--groups 8] [--group_size 8]
[--max_tokens 256]`` (prints a table; skips when tinker / tinker-cookbook are not installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TINKER_TELEMETRY", "0")


def _run(args: argparse.Namespace, guarded: bool, model: str, folder: Path) -> dict[str, Any]:
    from tinker_cookbook.rl import train

    import rl_guards.tinker
    from rl_guards.testing.tinker_envs import TinyTasksDatasetBuilder
    from rl_guards.tinker.backend import LocalTinker

    steps = args.iterations + 1
    log_path = folder / ("guarded" if guarded else "plain")
    with LocalTinker(seed=0) as local:
        config = train.Config(
            learning_rate=1e-4,
            dataset_builder=TinyTasksDatasetBuilder(
                batch_size=args.groups,
                group_size=args.group_size,
                model_name_for_tokenizer=model,
                renderer_name="qwen3_disable_thinking",
                n_batches=steps,
                stop=False,
            ),
            model_name=model,
            recipe_name="rl_guards_bench",
            renderer_name="qwen3_disable_thinking",
            max_tokens=args.max_tokens,
            log_path=str(log_path),
            base_url=local.url,
            max_steps=steps,
            save_every=0,
            eval_every=0,
            num_groups_to_log=0,
        )
        run = None
        if guarded:
            config, run = rl_guards.tinker.guard(config, backend=local, guards_set=["rollouts.every_steps=1"])
            asyncio.run(run.main())
        else:
            asyncio.run(train.main(config))
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/total" in r and r.get("step", 0) >= 1]  # the warm-up iteration is not counted
    out: dict[str, Any] = {
        "total": [r["time/total"] for r in rows],
        "group_rewards": [r.get("time/compute_group_rewards:total", 0.0) for r in rows],
        "tokens": [r.get("env/all/total_ac_tokens", 0) for r in rows],
    }
    if run is not None:
        out["hook"] = [run.hook_seconds.get(r["step"], 0.0) for r in rows]
        out["findings"] = sorted({f"{f.guard}/{f.kind}" for f in run.findings})
        out["dumps"] = len(list((log_path / "rl_guards").glob("step_*.parquet")))
        probes = run.guard("probes")  # its seconds are in hook_seconds too (it runs in the batch's decision)
        out["probes"] = (probes.spent, probes.elapsed, probes.rounds)
    return out


def share_budget() -> float:
    from rl_guards.config import ProbesConfig

    return ProbesConfig().budget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2, help="plain / guarded run pairs (alternating)")
    parser.add_argument("--iterations", type=int, default=3, help="counted iterations per run (after 1 warm-up)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        import tinker  # noqa: F401
        import tinker_cookbook  # noqa: F401
    except ImportError as exc:
        print(f"bench_tinker: skipped ({exc}); pip install -e '.[tinker]' and tinker-cookbook==0.6.1 --no-deps")
        return 0
    import torch

    from rl_guards.testing import tiny_setup

    torch.set_num_threads(1)
    for name in ("tinker_cookbook", "tinker", "httpx", "rl_guards"):
        logging.getLogger(name).setLevel(logging.ERROR)
    model = tiny_setup().model_dir
    results: dict[str, list[dict[str, Any]]] = {"plain": [], "guarded": []}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_tinker_") as tmp:
        for pair in range(args.pairs):
            order = [False, True] if pair % 2 == 0 else [True, False]
            for guarded in order:
                folder = Path(tmp) / f"pair{pair}"
                results["guarded" if guarded else "plain"].append(_run(args, guarded, model, folder))
    wall = time.perf_counter() - start
    plain = [t for r in results["plain"] for t in r["total"]]
    guarded = [t for r in results["guarded"] for t in r["total"]]
    hook = [t for r in results["guarded"] for t in r["hook"]]
    share = [h / t for r in results["guarded"] for h, t in zip(r["hook"], r["total"], strict=True)]
    tokens = statistics.median(t for r in results["plain"] + results["guarded"] for t in r["tokens"])
    rollouts = args.groups * args.group_size
    findings = sorted({f for r in results["guarded"] for f in r["findings"]})
    dumps = sum(r["dumps"] for r in results["guarded"])
    print(f"## tinker-cookbook loop: {rollouts} rollouts x {args.max_tokens} tokens per iteration "
          f"({tokens:.0f} sampled tokens), {args.pairs} plain/guarded pairs x {args.iterations} counted iterations, "
          f"local backend, tiny Qwen3, torch 1 thread; {wall:.0f} s")  # fmt: skip
    print()
    print("| | median | min | max |")
    print("|---|---|---|---|")
    print(f"| iteration, plain (cookbook time/total) | {statistics.median(plain):.2f} s | {min(plain):.2f} | "
          f"{max(plain):.2f} |")  # fmt: skip
    print(f"| iteration, guarded | {statistics.median(guarded):.2f} s | {min(guarded):.2f} | {max(guarded):.2f} |")
    print(f"| guarded / plain (end to end, noisy) | {statistics.median(guarded) / statistics.median(plain):.3f} | | |")
    print(f"| rl_guards on the loop's critical path, per iteration | {statistics.median(hook) * 1000:.1f} ms | "
          f"{min(hook) * 1000:.1f} | {max(hook) * 1000:.1f} |")  # fmt: skip
    print(f"| its share of the guarded iteration (goal <= 1 %) | {statistics.median(share) * 100:.2f} % | "
          f"{min(share) * 100:.2f} | {max(share) * 100:.2f} |")  # fmt: skip
    spent = sum(r["probes"][0] for r in results["guarded"])
    elapsed = sum(r["probes"][1] for r in results["guarded"])
    rounds = sum(r["probes"][2] for r in results["guarded"])
    print(f"| of which the reward probes, whole runs (budget {share_budget():.0%}) | {spent:.2f} s in {rounds} "
          f"round(s) | {spent / max(elapsed, 1e-9) * 100:.2f} % of the runs' time | |")  # fmt: skip
    print()
    print(f"Dumps written off the critical path (background writer): {dumps}; findings in the guarded runs: "
          f"{', '.join(findings) or 'none'} (every completion is cut at max_tokens here, by design).")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
