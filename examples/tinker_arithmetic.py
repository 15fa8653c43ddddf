"""tinker-cookbook's arithmetic recipe with rl_guards, on the local Tinker backend: a dry run on a laptop CPU.

The recipe's own dataset (``tinker_cookbook.recipes.math_rl.arithmetic_env``) and the cookbook's own, unmodified
training loop (``tinker_cookbook.rl.train.main``), pointed at :class:`rl_guards.tinker.backend.LocalTinker` through
``Config.base_url``, on the embedded tiny Qwen3 model (or ``--model DIR``). At the end it prints what the guards found;
findings are in ``<log_path>/rl_guards/findings.jsonl`` (the schema of TRL runs; a healthy run writes none), rollout
dumps next to them, the cookbook's metrics (with ``env/all/rl_guards/...``) in ``<log_path>/metrics.jsonl``::

    python examples/tinker_arithmetic.py                          # healthy: silent
    python examples/tinker_arithmetic.py --max_tokens 2 --steps 3 # completions cut at max_tokens: truncation warns
    python examples/tinker_arithmetic.py --guards_set truncation.mode=raise --max_tokens 2 --steps 3   # exit 3
    rl-guards rollouts outputs/tinker_arithmetic/rl_guards list

Exit status: 0 done, 3 a guard stopped the run (its message is printed once), 2 an invalid guards config.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log_path", default="outputs/tinker_arithmetic", help="the run's folder (replaced)")
    parser.add_argument("--steps", type=int, default=4, help="training iterations (Config.max_steps)")
    parser.add_argument("--max_tokens", type=int, default=12, help="sampling cap (Config.max_tokens)")
    parser.add_argument("--groups", type=int, default=4, help="groups per batch (the recipe's batch_size)")
    parser.add_argument("--group_size", type=int, default=4, help="rollouts per group")
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--save_every", type=int, default=2, help="checkpoint every N iterations (0: only the final)")
    parser.add_argument("--renderer", default="qwen3_disable_thinking", help="the cookbook renderer name")
    parser.add_argument("--model", default=None, help="a local model folder (default: rl_guards' tiny Qwen3)")
    parser.add_argument("--guards_config", default=None, help="a guards YAML file")
    parser.add_argument("--guards_set", nargs="*", default=[], help="section.field=value overrides")
    parser.add_argument("--stray_think_penalty", action="store_true", help="add the stray-think penalty to rewards")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import logging

    import torch

    import rl_guards.tinker
    from rl_guards.config import GuardsConfig
    from rl_guards.errors import ConfigError, GuardError
    from rl_guards.tinker.backend import LocalTinker

    torch.set_num_threads(1)
    for name in ("tinker_cookbook", "tinker", "httpx"):  # the cookbook prints a table per step; keep its warnings
        logging.getLogger(name).setLevel(logging.WARNING)
    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
    from tinker_cookbook.rl import train

    try:
        guards = GuardsConfig.layered(None, args.guards_config, list(args.guards_set) or None)
    except ConfigError as exc:
        print(f"tinker_arithmetic: invalid guards config: {exc}", file=sys.stderr)
        return 2
    model = args.model
    if model is None:
        from rl_guards.testing import tiny_setup

        model = tiny_setup().model_dir
    shutil.rmtree(args.log_path, ignore_errors=True)  # a fresh run (the cookbook would otherwise resume it)
    with LocalTinker() as local:
        config = train.Config(
            learning_rate=args.learning_rate,
            dataset_builder=ArithmeticDatasetBuilder(
                batch_size=args.groups,
                model_name_for_tokenizer=model,
                renderer_name=args.renderer,
                n_batches=max(args.steps, 1),
                group_size=args.group_size,
            ),
            model_name=model,
            recipe_name="rl_guards_tinker_arithmetic",
            renderer_name=args.renderer,
            max_tokens=args.max_tokens,
            log_path=args.log_path,
            base_url=local.url,
            max_steps=args.steps,
            save_every=args.save_every,
            eval_every=0,
            num_groups_to_log=0,
        )
        config, run = rl_guards.tinker.guard(
            config, guards, backend=local, stray_think_penalty=args.stray_think_penalty
        )  # the one line
        start = time.perf_counter()
        status = 0
        try:
            asyncio.run(run.main())
        except GuardError as exc:
            print(f"\nstopped by rl_guards: {exc}", file=sys.stderr)
            status = 3
        elapsed = time.perf_counter() - start
    print(f"\n{args.steps} iterations in {elapsed:.1f} s; log folder {args.log_path}")
    print(run.summary())
    return status


if __name__ == "__main__":
    raise SystemExit(main())
