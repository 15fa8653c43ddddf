"""The constructor path: ``GRPOTrainer(..., callbacks=[GuardsCallback(config)])`` gives every guard, as ``install()``.

A TrainerCallback never receives the trainer. At ``on_train_begin`` this one finds the trainer that is calling it
(the caller's ``self`` up the stack, a ``transformers.Trainer``) and installs the guards on it with
:func:`rl_guards.install`; the guards' own callback joins the handler and runs its start-of-training checks in the
same event. When no trainer with TRL's rollout methods is found (a custom loop, a trainer that scores rollouts
elsewhere), only the start-of-training checks run, and one warning names the guards that are off and the fix.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from typing import Any

from transformers import TrainerCallback

from rl_guards.config import GuardsConfig
from rl_guards.errors import ConfigError
from rl_guards.guards.base import Guard, GuardSession, RLGuardsWarning, RunContext, run_hook
from rl_guards.guards.preflight import PreflightGuard
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.guards.template import DoubleThinkGuard

logger = logging.getLogger("rl_guards")

# Guards whose checks need nothing but args, tokenizer and dataset (what runs without the trainer).
START_GUARDS: tuple[type[Guard], ...] = (PreflightGuard, DoubleThinkGuard)
_MAX_FRAMES = 12  # how far up the stack the trainer is looked for


def calling_trainer() -> Any:
    """The ``transformers.Trainer`` whose method is on the call stack (the one dispatching this event), or None."""
    from transformers import Trainer

    frame = inspect.currentframe()
    try:
        for _ in range(_MAX_FRAMES):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer):
                return candidate
        return None
    finally:
        del frame


class GuardsCallback(TrainerCallback):
    """Every guard from ``callbacks=[...]``; ``run`` is the installed :class:`~rl_guards.trl.hook.GuardRun`."""

    def __init__(self, config: GuardsConfig | dict[str, Any] | str | os.PathLike[str] | None = None) -> None:
        if isinstance(config, dict):
            config = GuardsConfig.from_dict(config)
        elif isinstance(config, str | os.PathLike):  # a YAML path, as install() takes it
            config = GuardsConfig.from_yaml(config)
        elif config is not None and not isinstance(config, GuardsConfig):
            raise ConfigError(
                f"GuardsCallback(config): pass a GuardsConfig, a dict or the path of a YAML file, got "
                f"{type(config).__name__}"
            )
        self.config = config or GuardsConfig()
        self.run: Any = None  # the GuardRun, once installed
        self._session = GuardSession()  # the start checks' findings when the guards could not be installed
        self.guards: list[Guard] = [g for g in (cls(self.config) for cls in START_GUARDS) if g.enabled]

    @property
    def session(self) -> GuardSession:
        """Findings and counts: the installed guards', else the start checks'."""
        return self.run.session if self.run is not None else self._session

    def summary(self) -> str:
        return self.run.summary() if self.run is not None else self._session.summary_text()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            return
        trainer = calling_trainer()
        reason = _unreachable(trainer)
        if reason is None:
            from rl_guards.trl.hook import GuardRun, install

            handler = getattr(trainer, "callback_handler", None)
            existing = next((cb for cb in getattr(handler, "callbacks", []) if isinstance(cb, GuardRun)), None)
            # install() adds the guards' callback to the handler: it runs this same on_train_begin next.
            self.run = existing or install(trainer, self.config)
            return
        self._start_checks_only(args, state, kwargs, reason)

    def _start_checks_only(self, args: Any, state: Any, kwargs: dict[str, Any], reason: str) -> None:
        started = {cls.name for cls in START_GUARDS}
        off = sorted({cls(self.config).name for cls in BATCH_GUARDS} - started)
        message = (
            f"rl_guards: GuardsCallback could not put the batch guards on this run ({reason}); only the "
            f"start-of-training checks run ({', '.join(sorted(started))}). Off: {', '.join(off)}. Fix: call "
            "rl_guards.install(trainer, config) on the built GRPOTrainer / RLOOTrainer before trainer.train()."
        )
        warnings.warn(message, RLGuardsWarning, stacklevel=2)
        logger.warning(message)
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
            run_hook(guard, "on_train_begin", self._session, int(state.global_step))


def _unreachable(trainer: Any) -> str | None:
    """Why the batch guards cannot be installed on ``trainer`` (None: they can)."""
    if trainer is None:
        return "no transformers.Trainer is calling it"
    from rl_guards.trl.hook import REQUIRED_METHODS

    missing = [m for m in REQUIRED_METHODS if not callable(getattr(trainer, m, None))]
    if missing:
        return f"{type(trainer).__name__} has no {', '.join(missing)}: it scores rollouts where the guards cannot see"
    return None
