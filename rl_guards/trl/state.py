"""The run's section in the HF trainer's ``trainer_state.json`` (``stateful_callbacks``): filing, shielding, reading.

What is saved and how it is restored is the engine's (:mod:`rl_guards.engine.state`); this module is where HF keeps
it and the ways HF's own resume can trip over it.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from rl_guards.engine.state import STATE_VERSION, engine_state, restore_engine

# Filed by HF under the class name of its ExportableState. Up to 437f4ff that was GuardRun itself; still read.
STATE_KEY = "GuardRunState"
LEGACY_STATE_KEY = "GuardRun"


class GuardRunState(TrainerCallback, ExportableState):
    """What the trainer saves of a run in ``trainer_state.json`` (``stateful_callbacks``).

    A small object apart from the run, because with ``restore_callback_states_from_checkpoint=True`` HF rebuilds
    each stateful callback as ``type(cb)(**saved["args"])``, sets the saved attributes on the new instance and puts
    it in the old one's place. Here that is harmless: any args are accepted, the attributes are kept as data in
    ``saved`` (never over a method), and the run binds the rebuilt instance to itself at train begin. The run's state
    itself is restored in place into the live run, from ``state.stateful_callbacks``, with or without that flag.
    """

    def __init__(self, **args: Any) -> None:
        object.__setattr__(self, "run", None)
        object.__setattr__(self, "saved", {"args": dict(args)})

    def __setattr__(self, name: str, value: Any) -> None:
        self.saved[name] = value  # HF's rebuild sets the saved attributes: kept as data

    def bind(self, run: Any) -> None:
        object.__setattr__(self, "run", run)

    def state(self) -> dict[str, Any]:
        if self.run is None:  # never bound (a run that never began): nothing of a run to save
            return {"args": {}, "attributes": {"version": STATE_VERSION}}
        return self.run.state()


def run_section(engine: Any, trainer: Any) -> dict[str, Any]:
    """The section saved at each checkpoint. Never raises."""
    step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
    return {"args": {}, "attributes": engine_state(engine, step)}


def restore_from(engine: Any, state: Any) -> bool:
    """Restore the saved section of ``state`` (a TrainerState) into ``engine``; True when there was one."""
    if not int(getattr(state, "global_step", 0) or 0):
        return False
    sections = getattr(state, "stateful_callbacks", None)
    if not isinstance(sections, dict):
        return False
    key = STATE_KEY if STATE_KEY in sections else LEGACY_STATE_KEY
    if key not in sections:
        return False  # a checkpoint written without rl_guards: everything starts fresh, nothing is wrong
    restore_engine(engine, sections[key], int(state.global_step))
    return True


def file_state(run: Any, trainer: Any, state: Any) -> None:
    """Make sure the trainer's next checkpoint can file this run's section.

    The trainer updates ``state.stateful_callbacks[name]`` in place at each save and indexes it by name: after a
    resume from a checkpoint written without rl_guards (or installed after the trainer built its state, as
    GuardsCallback does) the name is missing and the save raised KeyError after the model and optimizer were
    written, leaving the checkpoint without trainer_state.json. Also binds the section's object when HF's
    ``restore_callback_states_from_checkpoint`` rebuilt it, so that what it saves is this run's state.
    """
    callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
    if isinstance(callbacks, list):
        holders = [cb for cb in callbacks if isinstance(cb, GuardRunState)]
        if not holders:
            callbacks.append(run.saved_state)
        for holder in holders:
            holder.bind(run)
            run.saved_state = holder
    sections = getattr(state, "stateful_callbacks", None)
    if isinstance(sections, dict):
        sections.pop(LEGACY_STATE_KEY, None)  # restored above; the next checkpoint files it under STATE_KEY
        sections[STATE_KEY] = run.state()  # replaces what was restored (or dropped) with what will be saved


def shield_callback_restore(trainer: Any) -> None:
    """With ``restore_callback_states_from_checkpoint=True`` HF reads every saved section as ``{"args": dict,
    "attributes": dict}`` before any callback runs, and raises on anything else: a damaged rl_guards section
    would stop the resume there. HF is shown an empty section instead; the run's own restore reads the real one
    and says what it drops. (Private Trainer method, checked: without it nothing is wrapped.)"""
    original = getattr(trainer, "_load_callback_state", None)
    if not callable(original):
        return

    def _load_callback_state(*args: Any, **kwargs: Any) -> Any:
        sections = getattr(getattr(trainer, "state", None), "stateful_callbacks", None)
        held = sections.get(STATE_KEY) if isinstance(sections, dict) else None
        if held is None or _readable_by_hf(held):
            return original(*args, **kwargs)
        sections[STATE_KEY] = {"args": {}, "attributes": {}}
        try:
            return original(*args, **kwargs)
        finally:
            sections[STATE_KEY] = held

    trainer._load_callback_state = _load_callback_state


def _readable_by_hf(saved: Any) -> bool:
    """Whether transformers' ``_load_callback_state`` can rebuild a callback from this saved section."""
    items = saved if isinstance(saved, list) else [saved]
    return all(
        isinstance(item, dict)
        and isinstance(item.get("args", {}), dict)
        and isinstance(item.get("attributes", {}), dict)
        for item in items
    )


__all__ = ["LEGACY_STATE_KEY", "STATE_KEY", "GuardRunState", "file_state", "restore_from", "shield_callback_restore"]
