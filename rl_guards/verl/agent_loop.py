"""``GuardedAgentLoopManager``: the step hook on verl's legacy trainer (``trainer.use_v1=false``).

::

    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=rl_guards.verl.GuardedAgentLoopManager

The legacy ``RayPPOTrainer.fit`` gets each step's rollouts, already scored by the reward workers, from its agent loop
manager's ``generate_sequences`` (trainer process, before advantages and the update). This subclass of verl's
``AgentLoopManager`` returns verl's output unchanged after the guards saw it (the output batch and the generation
batch it came from, rows in the same order); a guard in raise mode stops the run here, before the batch trains.
Validation batches (``meta_info["validate"]``) pass unguarded.

Metrics: the legacy trainer's logger is a local of ``fit`` and takes nothing from the agent loop manager but timings,
so the guards' metrics go to the W&B run of the process when there is one (``wandb.log(..., step=global_steps)``,
before the trainer logs that step) and to the Python log otherwise (``rl_guards`` logger, one line a step). Other
tracking backends do not get them on this trainer: use the V1 trainer's :mod:`rl_guards.verl.replay`.
"""

from __future__ import annotations

import logging
from typing import Any

from rl_guards.errors import GuardError
from rl_guards.verl.rows import from_dataproto
from rl_guards.verl.settings import select

logger = logging.getLogger("rl_guards")


def _base() -> type:
    from verl.experimental.agent_loop import AgentLoopManager

    return AgentLoopManager


def deliver(metrics: dict[str, float], step: int) -> str:
    """The step's guard metrics to the process's W&B run (``"wandb"``), else to the log (``"log"``)."""
    if not metrics:
        return ""
    try:
        import wandb

        if wandb.run is not None:
            wandb.log(metrics, step=int(step))
            return "wandb"
    except Exception as exc:  # a tracker problem only warns
        logger.warning("rl_guards: could not log the guards' metrics to W&B: %s", exc)
    logger.info("rl_guards step %s: %s", step, " - ".join(f"{k}:{v:.4g}" for k, v in sorted(metrics.items())))
    return "log"


class GuardedAgentLoopManager(_base()):  # type: ignore[misc]
    """verl's agent loop manager, with the guards on every training batch it returns."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if bool(select(config, "trainer.use_v1", False)):
            raise ValueError(
                "GuardedAgentLoopManager is the legacy trainer's hook (trainer.use_v1=false). On the V1 trainer set "
                "trainer.v1.sampler.custom_sampler.path=pkg://rl_guards.verl and "
                "trainer.v1.sampler.custom_sampler.name=GuardedReplayBuffer instead, and leave "
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class unset."
            )
        super().__init__(config, *args, **kwargs)
        from rl_guards.verl.run import VerlGuardRun

        self.run = VerlGuardRun(config)
        self.delivered_to = ""
        self._failed = False

    def generate_sequences(self, prompts: Any) -> Any:
        """verl's rollout and scoring, then the guards on a training batch (a stop raises the guard's error)."""
        meta = getattr(prompts, "meta_info", {}) or {}
        if meta.get("validate"):
            return super().generate_sequences(prompts)
        step = int(meta.get("global_steps", self.run.steps_seen + 1))
        try:
            self.run.starting(step)  # training begins before the first rollout (the run's clock counts it)
        except GuardError:
            raise
        except Exception as exc:  # rl_guards' own failure never stops verl
            logger.warning("rl_guards: the guards could not begin at step %s: %s: %s", step, type(exc).__name__, exc)
        output = super().generate_sequences(prompts)
        try:
            metrics = self.run.process(from_dataproto(output, prompts, step=step))
        except GuardError:
            raise
        except Exception as exc:  # rl_guards' own failure never stops verl: said once, the step goes on
            if not self._failed:
                self._failed = True
                logger.warning("rl_guards: the guards skipped step %s: %s: %s", step, type(exc).__name__, exc)
            return output
        self.delivered_to = deliver(metrics, step) or self.delivered_to
        return output


__all__ = ["GuardedAgentLoopManager", "deliver"]
