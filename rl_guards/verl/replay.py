"""``GuardedReplayBuffer``: the step hook on verl's default (V1) trainer, as the custom sampler verl's config selects.

The V1 trainer takes each step's rows from its replay buffer (``replay_buffer.sample(global_steps, "train",
batch_size)``), in the trainer process, before it computes log-probs, advantages and the update; the metrics
``sample`` returns are logged with the step's own (verl's ``MetricsAggregator`` -> ``Tracking``: console, W&B, ...).
So the hook is a sampler::

    trainer.v1.sampler.custom_sampler.path=pkg://rl_guards.verl
    trainer.v1.sampler.custom_sampler.name=GuardedReplayBuffer

It samples with verl's own buffer (``ReplayBuffer``, or ``ReplayBufferAsync`` for the async trainer modes, with the
group filtering and failed-group refill the trainer would have given it: verl passes a custom sampler neither, so
they are read from the config here as verl's ``_build_replay_buffer`` reads them), reads the sampled rows' fields
from TransferQueue, and hands them to the guards (:class:`~rl_guards.verl.run.VerlGuardRun`). A guard in raise mode
stops the run here, in the trainer process, before the batch trains: the V1 trainer catches exceptions raised in the
reward workers, not this one. Validation batches (partition ``val``) are passed through unguarded.

The buffer is built with verl's keyword arguments only; the whole config is reached through the ``sampler_kwargs``
node it is given (``sampler_kwargs`` stays free for the user's own settings).
"""

from __future__ import annotations

import logging
from typing import Any

from rl_guards.errors import GuardError
from rl_guards.verl.rows import from_fields
from rl_guards.verl.settings import select

logger = logging.getLogger("rl_guards")

# TransferQueue fields the guards read, when the rows have them (the dataset's columns travel with each row).
FIELDS = (
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "uid",
    "session_id",
    "data_source",
    "reward_model",
    "extra_info",
    "raw_prompt",
    "extra_fields",
)


def root_config(node: Any) -> Any:
    """The whole verl config a node of it belongs to (OmegaConf keeps the parent link), or None."""
    get_root = getattr(node, "_get_root", None)
    if not callable(get_root):
        return None
    root = get_root()
    return root if select(root, "actor_rollout_ref") is not None else None


def _buffer_kwargs(config: Any, trainer_mode: str, given: dict[str, Any]) -> dict[str, Any]:
    """What verl's ``_build_replay_buffer`` gives its own buffer beyond a custom sampler's arguments: DAPO group
    filtering and the failed-group refill (``trainer/ppo/v1/trainer_base.py``, ``_build_replay_buffer``)."""
    extra: dict[str, Any] = {}
    filter_groups = select(config, "algorithm.filter_groups")
    metric = None
    if filter_groups is not None and bool(select(filter_groups, "enable", False)):
        metric = select(filter_groups, "metric")
    refill = bool(select(config, "trainer.v1.sampler.sync_refill_failed_groups", False))
    extra["filter_groups_metric"] = metric
    extra["sync_refill_failed_groups"] = refill
    if trainer_mode == "sync":
        train_batch_size = int(select(config, "data.train_batch_size", 1))
        extra["train_batch_size"] = train_batch_size
        extra["gen_batch_size"] = (
            1 if metric is not None or refill else int(select(config, "data.gen_batch_size") or train_batch_size)
        )
        extra["max_inflight_gen_batches"] = (
            int(select(filter_groups, "max_inflight_gen_batches", 1)) if metric is not None else 1
        )
    return {**extra, **given}


class GuardedReplayBuffer:
    """verl's replay buffer with the guards on every sampled training batch (see the module's docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

        mode = str(kwargs.get("trainer_mode", "sync"))
        self.config = root_config(kwargs.get("sampler_kwargs"))
        cls = ReplayBuffer if mode == "sync" else ReplayBufferAsync
        self.inner = cls(**(_buffer_kwargs(self.config, mode, kwargs) if self.config is not None else kwargs))
        self.run: Any = None
        if self.config is None:
            logger.warning(
                "rl_guards: GuardedReplayBuffer could not reach the verl config (sampler_kwargs is not a node of it): "
                "sampling as verl's ReplayBuffer, without the guards."
            )
            return
        from rl_guards.verl.run import VerlGuardRun

        self.run = VerlGuardRun(self.config)
        self.pad_token_id = int(self.run.engine.ctx.pad_token_id or 0)
        self._failed = False

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict[str, Any]]:
        """verl's sample, then the guards on a training batch: their metrics join the step's."""
        guarded = self.run is not None and partition_id == "train"
        if guarded:
            self._guarded(self.run.starting, global_steps)
        batch, metrics = self.inner.sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if not guarded or not batch.keys:
            return batch, metrics
        try:
            rows = self._rows(batch, global_steps)
            rows.expected_groups = int(batch_size)  # groups whose sessions all failed have no rows at all
            guard_metrics = self.run.process(rows)
        except GuardError:
            raise
        except Exception as exc:  # rl_guards' own failure never stops verl: said once, the step goes on
            if not self._failed:
                self._failed = True
                logger.warning("rl_guards: the guards skipped step %s: %s: %s", global_steps, type(exc).__name__, exc)
            return batch, metrics
        return batch, {**metrics, **guard_metrics}

    def _guarded(self, call: Any, step: int) -> None:
        """``call(step)``: a guard's stop raised, rl_guards' own failure said once (the step goes on)."""
        try:
            call(step)
        except GuardError:
            raise
        except Exception as exc:
            if not self._failed:
                self._failed = True
                logger.warning("rl_guards: the guards skipped step %s: %s: %s", step, type(exc).__name__, exc)

    def _rows(self, batch: Any, step: int) -> Any:
        import transfer_queue as tq

        wanted = [*FIELDS, *([self.run.task_column] if self.run.task_column not in FIELDS else [])]
        keys = list(batch.keys)
        try:
            fields = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=wanted)
        except Exception:  # a field these rows do not hold (a dataset without extra_info): read all, take what is there
            fields = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id)
        held = set(fields.keys())
        return from_fields({f: fields[f] for f in wanted if f in held}, step=step, pad_token_id=self.pad_token_id)


__all__ = ["FIELDS", "GuardedReplayBuffer", "root_config"]
