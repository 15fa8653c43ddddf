"""A collator wrapper's metrics, into the log of the trainer that calls it.

A collator never sees the trainer, and nothing pops what it counts. On every call the wrapper hands the metrics of
that batch to :class:`CollatorMetrics`, which finds the trainer whose data loader is calling (the caller's ``self``
up the stack, a ``transformers.Trainer``) and appends them to TRL's metric buffer (``trainer._metrics[mode]``,
averaged into the next ``log()`` and cleared there, so they reach ``log_history`` and every tracker)::

    trainer = SFTTrainer(...)
    trainer.data_collator = MaskCheckingCollator(trainer.data_collator, tok)
    trainer.train()   # rl_guards/masking/checked_batches, .../violating_rows in trainer.state.log_history

Without such a trainer (a custom loop, ``dataloader_num_workers > 0``: the collator runs in the workers) only the
last value and the sum of each key are kept: memory stays bounded however long the run.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Collection
from typing import Any

MAX_FRAMES = 24  # how far up the stack the trainer is looked for (a DataLoader's collate is ~8 frames down)


@functools.cache
def _trainer_class() -> type:
    from transformers import Trainer  # a lazy attribute of transformers: slow to look up on every batch

    return Trainer


def calling_trainer(max_frames: int = MAX_FRAMES) -> Any:
    """The ``transformers.Trainer`` whose method is on the call stack, or None."""
    trainer_class = _trainer_class()
    frame = inspect.currentframe()
    try:
        for _ in range(max_frames):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, trainer_class):
                return candidate
        return None
    finally:
        del frame


class CollatorMetrics:
    """Delivers a collator's per-batch metrics to the calling trainer's buffer; keeps bounded running values."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}  # the latest value of each key
        self.sums: dict[str, float] = {}  # the sum of each key over every batch
        self.delivered = 0  # values handed to a trainer's buffer

    def deliver(self, metrics: dict[str, list[float]], cumulative: Collection[str] = ()) -> bool:
        """Record ``metrics`` (a session's :meth:`pop_metrics`); True when a trainer's buffer took them.

        A ``cumulative`` key (a running count) replaces its buffered values, as TRL's ``num_tokens``: the log shows
        the count at that step, not an average of counts."""
        values = {k: [v for v in vs if not math.isnan(v)] for k, vs in metrics.items()}
        values = {k: vs for k, vs in values.items() if vs}
        for key, vs in values.items():
            self.last[key] = vs[-1]
            self.sums[key] = self.sums.get(key, 0.0) + sum(vs)
        if not values:
            return False
        trainer = calling_trainer()
        buffers = getattr(trainer, "_metrics", None)
        if not isinstance(buffers, dict):
            return False
        model = getattr(trainer, "model", None)
        mode = "train" if getattr(model, "training", True) else "eval"
        buffer = buffers.get(mode)
        if buffer is None:
            return False
        for key, vs in values.items():
            if key in cumulative:
                buffer[key] = vs[-1:]
            else:
                buffer[key].extend(vs)
            self.delivered += len(vs)
        return True


__all__ = ["CollatorMetrics", "calling_trainer"]
