"""A tiny learning-rate sweep: 3 learning rates x 2 schedules x 3 steps on the embedded tiny Qwen3, on CPU.

Each cell is a fresh GRPOTrainer with the guards installed, so the comparison is per task
(``rl_guards_task/<task>/reward_mean``); all cells share one W&B group (offline here)::

    python examples/lr_sweep.py --output-dir outputs/lr_sweep
    python examples/lr_sweep.py --lrs 1e-6 1e-5 --schedulers constant_with_warmup linear --steps 5

Writes ``<output-dir>/sweep_summary.json`` and ``sweep_summary.md`` and prints the table. On a real model,
use more steps (tens to hundreds) and read the curves, not only the last value.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_PROJECT", "rl-guards-tiny")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="outputs/lr_sweep")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3])
    parser.add_argument("--schedulers", nargs="+", default=["constant", "linear"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--report-to", default="none", help="wandb to log each cell as a run of one W&B group")
    ns = parser.parse_args(argv)

    import torch
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.sweeps.lr_sweep import run_lr_sweep
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    torch.set_num_threads(1)  # the tiny model gains nothing from more threads; on a busy machine they spin
    start = time.perf_counter()
    tiny = tiny_setup()
    dataset = make_dataset(n_per_task=8)
    # Per-task curves come from the tasks monitor; the start-of-run report and rollout dumps are not needed per cell.
    guards = rl_guards.GuardsConfig.from_dict({"preflight": {"enabled": False}, "rollouts": {"enabled": False}})

    def make_trainer(args: object) -> GRPOTrainer:
        torch.manual_seed(0)  # same start for every cell: only lr and schedule differ
        trainer = GRPOTrainer(
            model=tiny.model_dir,
            processing_class=tiny.load_tokenizer(),
            # length_penalty varies within every group, so each step has a gradient even when the task rewards
            # of a group are all equal: the cells diverge within a few steps.
            reward_funcs=[arith_correct, echo_match, length_penalty],
            args=args,
            train_dataset=dataset,
        )
        trainer.remove_callback(PrinterCallback)  # the summary table is the output, not per-step log dicts
        rl_guards.install(trainer, guards)
        return trainer

    base = tiny_grpo_config(ns.output_dir, max_steps=ns.steps, report_to=ns.report_to)
    result = run_lr_sweep(make_trainer, base, ns.lrs, ns.schedulers, ns.output_dir)
    failed = [run.name for run in result.runs if run.error]
    print(f"\n{len(result.runs)} runs in {time.perf_counter() - start:.1f} s; summary in {ns.output_dir}/")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
