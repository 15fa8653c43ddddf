"""The main job on a real Qwen3 checkpoint, on a GPU (not run in CI: needs the weights and a CUDA device).

::

    # weights already on disk (e.g. `huggingface-cli download Qwen/Qwen3-0.6B --local-dir ~/models/Qwen3-0.6B`)
    python examples/grpo_qwen3.py --model_name_or_path ~/models/Qwen3-0.6B --output_dir outputs/qwen3 \
        --max_steps 50 --report_to wandb
    # several GPUs
    accelerate launch --num_processes 4 examples/grpo_qwen3.py --model_name_or_path ~/models/Qwen3-0.6B ...

Same two tasks, routed rewards, stray-think penalty, mixed thinking / non-thinking prompts and every guard as
``examples/grpo_tiny.py``; the dataset is the synthetic two-task set unless ``--dataset_path`` points at a
``datasets.save_to_disk`` folder with ``prompt`` (messages), ``task`` and ``answer`` columns.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass
class ModelArguments:
    """Where the checkpoint and the data are."""

    model_name_or_path: str = field(default="", metadata={"help": "Local folder of a Qwen3 checkpoint."})
    dataset_path: str | None = field(default=None, metadata={"help": "datasets.save_to_disk folder (optional)."})
    n_per_task: int = field(default=256, metadata={"help": "Synthetic prompts per task when no dataset is given."})


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, TrlParser

    import rl_guards
    from rl_guards.config import GuardsArguments
    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty
    from rl_guards.testing import make_dataset
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty
    from rl_guards.trl.thinking_mix import honour_thinking_column

    parser = TrlParser((GRPOConfig, GuardsArguments, ModelArguments))
    grpo_args, guard_args, model_args = parser.parse_args_and_config(argv)
    if not model_args.model_name_or_path:
        parser.error("--model_name_or_path is required (a local Qwen3 checkpoint folder)")
    if not torch.cuda.is_available():
        print("This example needs a CUDA GPU; for CPU use examples/grpo_tiny.py.", file=sys.stderr)
        return 2

    guards_config = guard_args.to_config()
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    if model_args.dataset_path:
        from datasets import load_from_disk

        dataset = load_from_disk(model_args.dataset_path)
    else:
        dataset = make_dataset(n_per_task=model_args.n_per_task, thinking="mixed")

    penalty = StrayThinkPenalty.from_config(guards_config.stray_think_penalty)
    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        processing_class=tokenizer,
        reward_funcs=[*route({"arith": [arith_correct], "echo": [echo_match]}), length_penalty, penalty],
        args=grpo_args,
        train_dataset=dataset,
    )
    # TRL renders every prompt with one global chat_template_kwargs; without this the mixed dataset's per-row
    # flag is ignored and the template guard stops the run at step 0.
    honour_thinking_column(trainer, column=guards_config.think_tags.thinking_column)
    run = rl_guards.install(trainer, guards_config)
    trainer.train()
    if trainer.accelerator.is_main_process:
        print(run.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
