"""The constructor path: ``GRPOTrainer(..., callbacks=[GuardsCallback(config)])``.

A TrainerCallback never receives the trainer, so it cannot see rollouts: from the constructor alone only the
start-of-training checks run (the preflight report and the double-``<think>`` template check, which need the
arguments, the tokenizer and the dataset). For every guard, use ``rl_guards.install(trainer, config)``.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from rl_guards.config import GuardsConfig
from rl_guards.guards.base import Guard, GuardSession, RunContext, run_hook
from rl_guards.guards.preflight import PreflightGuard
from rl_guards.guards.template import DoubleThinkGuard

logger = logging.getLogger("rl_guards")

# Guards whose checks need nothing but args, tokenizer and dataset.
START_GUARDS: tuple[type[Guard], ...] = (PreflightGuard, DoubleThinkGuard)


class GuardsCallback(TrainerCallback):
    """Start-of-training guards from ``callbacks=[...]``; ``session`` holds the findings."""

    def __init__(self, config: GuardsConfig | dict[str, Any] | None = None) -> None:
        if isinstance(config, dict):
            config = GuardsConfig.from_dict(config)
        self.config = config or GuardsConfig()
        self.session = GuardSession()
        self.guards: list[Guard] = [g for g in (cls(self.config) for cls in START_GUARDS) if g.enabled]

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        tokenizer = kwargs.get("processing_class")
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        loader = kwargs.get("train_dataloader")
        ctx = RunContext(
            output_dir=str(args.output_dir),
            is_main_process=bool(getattr(args, "process_index", 0) == 0),
            world_size=int(getattr(args, "world_size", 1) or 1),
            tokenizer=tokenizer,
            args=args,
            train_dataset=getattr(loader, "dataset", None),
            chat_template_kwargs=dict(getattr(args, "chat_template_kwargs", None) or {}),
            decode=(lambda ids: tokenizer.decode(ids, skip_special_tokens=False)) if tokenizer is not None else None,
        )
        for guard in self.guards:
            guard.setup(ctx)
            run_hook(guard, "on_train_begin", self.session, int(state.global_step))
        logger.info("rl_guards: callbacks-only mode ran the start checks; rl_guards.install() adds the batch guards")
