"""The main job: a real GRPO run with every guard on, on the embedded tiny Qwen3 model, on CPU.

Two tasks (``arith``, ``echo``) from the dataset's ``task`` column, several reward functions routed per task,
the stray-think-tag penalty, a mixed thinking / non-thinking dataset, rollout dumps, an offline W&B run, and
an end-of-run summary of what the guards found::

    python examples/grpo_tiny.py --output_dir outputs/grpo_tiny
    python examples/grpo_tiny.py --guards_set think_tags.mode=raise --max_steps 4

Arguments are parsed with TRL's parser: any GRPOConfig field, plus ``--guards_config guards.yaml`` and
``--guards_set section.field=value``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_PROJECT", "rl-guards-tiny")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class ExampleArguments:
    """Knobs of the example itself."""

    n_per_task: int = field(default=4, metadata={"help": "Prompts per task (few, so prompts recur across dumps)."})
    vocab_size: int = field(default=2048, metadata={"help": "BPE ranks kept (0 = the full Qwen vocabulary)."})


def main(argv: list[str] | None = None) -> int:
    import torch
    from trl import GRPOConfig, GRPOTrainer, TrlParser

    import rl_guards
    from rl_guards.config import GuardsArguments
    from rl_guards.testing import make_dataset, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    parser = TrlParser((GRPOConfig, GuardsArguments, ExampleArguments))
    # Defaults for the example; anything given on the command line wins.
    argv = list(sys.argv[1:] if argv is None else argv)
    base = {
        "output_dir": "outputs/grpo_tiny",
        "use_cpu": "true",
        "bf16": "false",
        "gradient_checkpointing": "false",
        "report_to": "wandb",
        "run_name": "grpo-tiny",
        "max_steps": "12",
        "per_device_train_batch_size": "8",
        "num_generations": "4",
        "max_completion_length": "24",
        "learning_rate": "1e-5",
        "lr_scheduler_type": "constant",
        "logging_steps": "1",
        "save_strategy": "steps",
        "save_steps": "6",
        "seed": "0",
        "disable_tqdm": "true",
        "chat_template_kwargs": '{"enable_thinking": true}',
    }
    given = {a.split("=", 1)[0].lstrip("-") for a in argv if a.startswith("--")}
    for key, value in base.items():
        if key not in given:
            argv += [f"--{key}", value]
    grpo_args, guard_args, example_args = parser.parse_args_and_config(argv)
    guards_config = guard_args.to_config()
    # Dumps every few steps so a short run has something to read.
    # (unless a config file or --guards_set chose a period).
    if guard_args.guards_config is None and "rollouts.every_steps" not in " ".join(guard_args.guards_set):
        guards_config.rollouts.every_steps = 3

    setup = tiny_setup(vocab_size=example_args.vocab_size or None)
    dataset = make_dataset(n_per_task=example_args.n_per_task, thinking="mixed")
    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty
    from rl_guards.trl.thinking_mix import honour_thinking_column

    penalty = StrayThinkPenalty.from_config(guards_config.stray_think_penalty)
    reward_funcs = [*route({"arith": [arith_correct], "echo": [echo_match]}), length_penalty, penalty]

    trainer = GRPOTrainer(
        model=setup.model_dir,
        processing_class=setup.tokenizer,
        reward_funcs=reward_funcs,
        args=grpo_args,
        train_dataset=dataset,
    )
    # TRL renders every prompt with one global chat_template_kwargs; make it honour the per-row flag.
    honour_thinking_column(trainer, column=guards_config.think_tags.thinking_column)
    run = rl_guards.install(trainer, guards_config)
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start

    if trainer.accelerator.is_main_process:
        out = Path(grpo_args.output_dir)
        print(run.summary())  # the findings table, the per-task curves, what the reward probes covered
        print(f"trained {trainer.state.global_step} steps in {elapsed:.1f} s; rollout dumps in {out / 'rl_guards'}")
        print(f"read them: rl-guards rollouts {out} list; HTML report: rl-guards report {out}")
        print(f"W&B (offline): {os.environ.get('WANDB_DIR', '.')}/wandb/ (sync later with `wandb sync`)")
    import wandb

    wandb.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
