"""A guarded tiny GRPO run that the reliability tests kill with SIGKILL and resume (a helper script, not a test).

Usage: ``python grpo_run.py OUT_DIR [--max_steps 12] [--resume CHECKPOINT_DIR] [--step_sleep SECONDS]``, with
``RL_GUARDS_CACHE`` pointing at a built tiny fixture. Checkpoints every 2 steps, rollout dumps every step, every
guard installed; ``--step_sleep`` slows each step so a test can kill the run between two checkpoints. At the end
``trainer.save_state()`` writes ``OUT_DIR/trainer_state.json`` (log history and the guards' saved state).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")


def build_trainer(
    output_dir: str, max_steps: int, callbacks: list[object] | None = None, save_steps: int = 2, **overrides: Any
) -> Any:
    """The guarded run's trainer: two routed tasks on the tiny fixture, a checkpoint every ``save_steps`` steps;
    ``overrides`` go to the GRPOConfig."""
    from trl import GRPOTrainer

    from rl_guards.rewards.routing import route
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match

    tiny = tiny_setup()
    return GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=route({"arith": [arith_correct], "echo": [echo_match]}),
        args=tiny_grpo_config(
            output_dir,
            max_steps=max_steps,
            save_strategy="steps",
            save_steps=save_steps,
            logging_steps=1,
            **overrides,
        ),
        train_dataset=make_dataset(),
        callbacks=callbacks,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--max_steps", type=int, default=12)
    parser.add_argument("--resume", default=None, help="checkpoint directory to resume from")
    parser.add_argument("--step_sleep", type=float, default=0.0, help="seconds to sleep after each step")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from transformers import TrainerCallback

    import rl_guards
    from rl_guards.config import GuardsConfig

    class Slow(TrainerCallback):
        def on_step_end(self, *a: object, **k: object) -> None:
            time.sleep(args.step_sleep)

    trainer = build_trainer(args.output_dir, args.max_steps, [Slow()] if args.step_sleep else None)
    config = {"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}, "metrics": "full"}  # per-task row counts
    rl_guards.install(trainer, GuardsConfig.from_dict(config))
    trainer.train(resume_from_checkpoint=args.resume)
    trainer.save_state()
    print(f"done at step {trainer.state.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
