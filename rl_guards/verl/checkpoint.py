"""``GuardedCheckpointCallback``: verl's V1 checkpoint event for the guards (optional next to the replay buffer).

::

    trainer.checkpoint_callback_class=rl_guards.verl.GuardedCheckpointCallback

After verl writes ``global_step_<k>/`` it calls ``on_save(trainer=, global_step=, checkpoint_dir=)`` in the trainer
process; the guards' step ends there with the checkpoint's rollout dump, their state is saved in the checkpoint
(``rl_guards_state.json``, restored when verl resumes from it), and at the last step the run's end work runs (the
final findings counts, the group-size advice). Without it the guards run the same, dump every
``rollouts.every_steps`` steps, and start fresh on a resume.
"""

from __future__ import annotations

import logging
from typing import Any

from rl_guards.errors import GuardError

logger = logging.getLogger("rl_guards")


def _base() -> type:
    from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

    return CheckpointCallback


class GuardedCheckpointCallback(_base()):  # type: ignore[misc]
    """Tells the guards of the trainer's :class:`~rl_guards.verl.replay.GuardedReplayBuffer` about each checkpoint."""

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs: Any):
        run = getattr(getattr(trainer, "replay_buffer", None), "run", None)
        if run is None:
            return
        total = int(getattr(trainer, "total_training_steps", 0) or 0)
        final = bool(total) and int(global_step) >= total
        try:
            run.saved(int(global_step), str(checkpoint_dir), final=final)
        except GuardError:
            raise  # a guard in raise mode stops the run at its checkpoint (after it is written)
        except Exception as exc:  # the checkpoint is written; the guards' bookkeeping never fails it
            logger.warning("rl_guards: checkpoint %s: %s: %s", checkpoint_dir, type(exc).__name__, exc)


__all__ = ["GuardedCheckpointCallback"]
