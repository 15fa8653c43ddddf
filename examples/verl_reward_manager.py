"""verl with rl_guards on CPU: verl's default (V1) trainer path up to each step's sampled batch, the tiny model
generating, verl's reward workers scoring through rl_guards' GuardedRewardManager, the guards in verl's replay
buffer, and what they found::

    python examples/verl_reward_manager.py --scorer gsm8k --steps 4 --output_dir outputs/verl_tiny
    python examples/verl_reward_manager.py --scorer math
    python examples/verl_reward_manager.py --scorer custom:my_reward.py:compute_score

What runs is verl 0.9's own code (its Hydra config, dataset, TransferQueue, agent-loop and reward-loop workers as Ray
actors, its replay buffer built from ``trainer.v1.sampler.custom_sampler``); the rollout server is the tiny model
(:class:`rl_guards.testing.verl_server.TinyRolloutServer`) and the GPU parts of a step (log-probs, the update) are
not run (see :mod:`rl_guards.testing.verl_run`). On a GPU, the same settings go on ``python -m
verl.trainer.main_ppo`` (``docs/verl.md``; ``benchmarks/verl_gpu_grpo.sh``).

Scorers: ``gsm8k`` and ``math`` are verl's own (``default_compute_score`` routes the prompts' data_source
``openai/gsm8k`` / ``lighteval/MATH`` to them); the tiny model writes neither ``#### 7`` nor ``\\boxed{7}``, so every
group is dead, which the ``dead_groups`` guard reports (``--guards_set dead_groups.warn_after_steps=3`` by default
here, so that a short run shows it). ``custom:path.py:fn`` is your ``compute_score`` on the tiny arithmetic and echo
prompts (data sources ``tiny/arith``, ``tiny/echo``). Findings are printed and written to
``<output_dir>/rl_guards/findings.jsonl``; rollout dumps (special tokens kept) go to
``<output_dir>/rl_guards/rollouts/``: ``rl-guards rollouts <output_dir> list``, ``rl-guards report <output_dir>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

REPO = Path(__file__).resolve().parents[1]
SOURCES = {"gsm8k": "openai/gsm8k", "math": "lighteval/MATH"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scorer", default="gsm8k", help="gsm8k | math | custom:path.py:fn (default gsm8k)")
    parser.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    parser.add_argument("--output_dir", default="outputs/verl_tiny", help="the run folder (default_local_dir)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per task in the dataset (default 4)")
    parser.add_argument(
        "--guards_set",
        nargs="*",
        default=["dead_groups.warn_after_steps=3"],
        help="guards overrides section.field=value (reward.rl_guards.set)",
    )
    args = parser.parse_args(argv)
    if args.scorer not in SOURCES and not args.scorer.startswith("custom:"):
        parser.error("--scorer must be gsm8k, math or custom:path.py:fn")
    return args


def dataset_rows(scorer: str, n: int) -> list[dict]:
    from rl_guards.testing.verl_run import ARITH, verl_rows

    if scorer.startswith("custom:"):
        return verl_rows(n)
    rows = verl_rows(n, tasks=(ARITH,))
    for row in rows:  # the same arithmetic prompts, routed by verl to its own scorer
        row["data_source"] = SOURCES[scorer]
    return rows


def main(argv: list[str] | None = None) -> int:
    import ray

    from rl_guards.testing import tiny_setup
    from rl_guards.testing.verl_run import TinyV1Trainer, compose_config

    args = parse(argv)
    out = Path(args.output_dir).resolve()
    started = time.time()
    tiny = tiny_setup()
    scorer = "verl" if args.scorer in SOURCES else args.scorer.split(":", 1)[1]
    if scorer != "verl":
        path, fn = scorer.rsplit(":", 1)
        scorer = f"{Path(path).resolve()}:{fn}"
    sets = "[" + ",".join(f"'{item}'" for item in args.guards_set) + "]"  # Hydra quotes values holding "="
    config = compose_config(
        tiny.model_dir,
        out,
        rows=dataset_rows(args.scorer, args.prompts),
        scorer=scorer,
        overrides=[
            f"+reward.rl_guards.set={sets}",
            f"trainer.total_training_steps={args.steps}",
            f"trainer.default_local_dir={out}",  # the run's folder: checkpoints, and rl_guards/ next to them
        ],
    )
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "offline"}},
    )
    trainer = None
    try:
        trainer = TinyV1Trainer(config, tiny.model_dir)
        for _ in range(args.steps):
            step = trainer.trainer.global_steps
            metrics = trainer.step()
            shown = {k: v for k, v in metrics.items() if k.startswith("rl_guards")}
            print(f"step {step}: " + ", ".join(f"{k}={v:.3g}" for k, v in sorted(shown.items())), flush=True)
        trainer.save(final=True)  # what verl's checkpoint callback is told after the last step's save
        run = trainer.guard_run
        print("\n" + run.summary())
    finally:
        if trainer is not None:
            trainer.close()
        ray.shutdown()
    findings = out / "rl_guards" / "findings.jsonl"
    print(f"\nfindings: {findings}" + ("" if findings.is_file() else " (none found: no file)"))
    print(f"rollouts: {out / 'rl_guards' / 'rollouts'}   ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
