"""The constructor path: ``GRPOTrainer(..., callbacks=[GuardsCallback(config)])`` gives every guard, as ``install()``.

A TrainerCallback never receives the trainer. At ``on_train_begin`` this one finds the trainer that is calling it
(the caller's ``self`` up the stack, a ``transformers.Trainer``) and installs the guards on it with
:func:`rl_guards.install`; the guards' own callback joins the handler and runs its start-of-training checks in the
same event. When no trainer with TRL's rollout methods is found (a custom loop, a trainer that scores rollouts
elsewhere), the start-of-training checks run (the same list and function as ``install()`` and ``rl-guards
preflight``: :mod:`rl_guards.engine.start_checks`), and one warning names the guards that are off and the fix.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from transformers import TrainerCallback

from rl_guards.collators.trainer_metrics import calling_trainer
from rl_guards.config import GuardsConfig
from rl_guards.console import say
from rl_guards.core.severity import WARNING
from rl_guards.engine.start_checks import context_without_trainer, run_start_checks, start_guards
from rl_guards.errors import ConfigError
from rl_guards.guards.base import Guard, GuardSession
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.trl.wandb_io import RunTracker

logger = logging.getLogger("rl_guards")

_MAX_FRAMES = 12  # how far up the stack the trainer dispatching on_train_begin is looked for


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
        self._session.tracker = RunTracker()  # the preflight report still reaches the run's tracker
        self.guards: list[Guard] = start_guards(self.config)  # the start checks install() and the CLI run

    @property
    def session(self) -> GuardSession:
        """Findings and counts: the installed guards', else the start checks'."""
        return self.run.session if self.run is not None else self._session

    def summary(self) -> str:
        return self.run.summary() if self.run is not None else self._session.summary_text()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            return
        trainer = calling_trainer(_MAX_FRAMES)
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
        started = [g.name for g in self.guards]
        off = sorted({cls.name for cls in BATCH_GUARDS if _checks_batches(cls)})  # their batch checks, at least
        message = (
            f"[rl_guards] warning: GuardsCallback could not put the batch guards on this run ({reason}); only the "
            f"start-of-training checks run ({', '.join(started)}). Off: the batch checks of {', '.join(off)}. "
            "Fix: call rl_guards.install(trainer, config) on the built GRPOTrainer / RLOOTrainer before "
            "trainer.train()."
        )
        say(message, severity=WARNING)
        tokenizer = kwargs.get("processing_class")
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        train = getattr(kwargs.get("train_dataloader"), "dataset", None)
        evaluation = getattr(kwargs.get("eval_dataloader"), "dataset", None)
        ctx = context_without_trainer(
            args,
            tokenizer,
            train_dataset=train,
            eval_dataset=evaluation,
            world_size=int(getattr(args, "world_size", 1) or 1),
        )
        ctx.is_main_process = bool(getattr(args, "process_index", 0) == 0)
        step = int(state.global_step)
        verdict = run_start_checks(ctx, self.config, guards=self.guards, session=self._session, step=step)
        if verdict.stop is not None:
            raise verdict.stop


def _checks_batches(cls: type[Guard]) -> bool:
    """Does the guard check rollout batches (what needs the trainer's rollout methods)?"""
    return any(getattr(cls, hook) is not getattr(Guard, hook) for hook in ("on_batch", "after_batch", "check_tensors"))


def _unreachable(trainer: Any) -> str | None:
    """Why the batch guards cannot be installed on ``trainer`` (None: they can)."""
    if trainer is None:
        return "no transformers.Trainer is calling it"
    from rl_guards.trl.context import REQUIRED_METHODS

    missing = [m for m in REQUIRED_METHODS if not callable(getattr(trainer, m, None))]
    if missing:
        return f"{type(trainer).__name__} has no {', '.join(missing)}: it scores rollouts where the guards cannot see"
    return None
