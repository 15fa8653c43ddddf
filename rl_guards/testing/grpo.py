"""A GRPOConfig that runs a tiny GRPO job on CPU in well under a second per step."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from trl import GRPOConfig

__all__ = ["TINY_GRPO_DEFAULTS", "tiny_grpo_config"]

# CPU settings for the tiny fixture. TRL 1.16 defaults bf16 and gradient checkpointing on, which CPU runs must undo.
TINY_GRPO_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": "none",
    "per_device_train_batch_size": 8,
    "num_generations": 4,  # 2 prompts x 4 completions per step
    "max_completion_length": 16,
    "max_steps": 3,
    "learning_rate": 1e-6,  # keep <= 1e-5: larger rates collapse the tiny model within a few steps
    "logging_steps": 1,
    "save_strategy": "no",
    "seed": 0,
    "dataloader_num_workers": 0,
    "disable_tqdm": True,
}


def tiny_grpo_config(output_dir: str | os.PathLike[str], **overrides: Any) -> GRPOConfig:
    """``GRPOConfig(output_dir, **TINY_GRPO_DEFAULTS)`` with ``overrides`` taking precedence."""
    settings = {**TINY_GRPO_DEFAULTS, **overrides}
    # transformers >= 5.x renamed gradient_checkpointing to activation_checkpointing and warns on the old name,
    # which TRL always sets; pass the new name too (mirroring the old) so the warning goes away.
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}:
        settings.setdefault("activation_checkpointing", settings["gradient_checkpointing"])
    return GRPOConfig(output_dir=str(output_dir), **settings)
