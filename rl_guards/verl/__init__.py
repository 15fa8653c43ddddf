"""rl_guards on verl (0.9): a reward manager that observes every row where verl scores it, and a step hook in the
trainer process that runs the guards over each step's batch.

Selected in the verl config (Hydra overrides; ``+`` for keys outside verl's schema)::

    # the reward manager: verl's own (inner) manager, observed row by row in the reward workers
    reward.reward_manager.source=importlib
    reward.reward_manager.module.path=pkg://rl_guards.verl
    reward.reward_manager.name=GuardedRewardManager
    +reward.rl_guards.inner=naive
    # the step hook, default (V1) trainer: a replay buffer that runs the guards on each sampled batch
    trainer.v1.sampler.custom_sampler.path=pkg://rl_guards.verl
    trainer.v1.sampler.custom_sampler.name=GuardedReplayBuffer
    # optional, V1: checkpoint events (a dump with each checkpoint, the guards' state saved for a resume)
    trainer.checkpoint_callback_class=rl_guards.verl.GuardedCheckpointCallback
    # the step hook, legacy trainer (trainer.use_v1=false) instead of the replay buffer:
    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=rl_guards.verl.GuardedAgentLoopManager

Importing ``rl_guards.verl`` imports neither verl nor Ray: the classes load on first use.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "GuardedRewardManager": "rl_guards.verl.manager",
    "GuardedReplayBuffer": "rl_guards.verl.replay",
    "GuardedCheckpointCallback": "rl_guards.verl.checkpoint",
    "GuardedAgentLoopManager": "rl_guards.verl.agent_loop",
    "VerlGuardRun": "rl_guards.verl.run",
    "VerlScoreCall": "rl_guards.verl.records",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rl_guards.verl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)


__all__ = sorted(_EXPORTS)
