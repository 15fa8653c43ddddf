"""What of a run survives a resume: the guards' states, the session (counts, first steps, warnings), the task
labels and the batch count, saved with every checkpoint and restored in place, part by part.

Never fatal either way: a part that cannot be saved is left out and said once; a part that cannot be restored (a
damaged file, another version's layout) starts fresh and is said once, and the resume goes on.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl_guards.engine.driver import Engine

logger = logging.getLogger("rl_guards")

STATE_VERSION = 1  # bumped when a saved part changes meaning; a newer section is not read, it is said and dropped
KNOWN_FIELDS = {"version", "guards", "session", "counts", "task_labels", "batches_seen"}


def engine_state(engine: Engine, step: int) -> dict[str, Any]:
    """The run's saved attributes (JSON as the trainer writes it). Never raises."""
    guards = {}
    for guard in engine.guards:
        part = _saveable(engine, guard.name, guard.state_dict, step)
        if part is not None:
            guards[guard.name] = part
    attributes: dict[str, Any] = {"version": STATE_VERSION, "guards": guards}
    for name, get in (("session", engine.session.state_dict), ("task_labels", engine.task_labels.state_dict)):
        part = _saveable(engine, name, get, step)
        if part is not None:
            attributes[name] = part
    attributes["batches_seen"] = int(engine.batches_seen)
    return attributes


def _saveable(engine: Engine, name: str, get: Any, step: int) -> Any:
    """``get()`` as the checkpoint will hold it, or None (said once per part) when it cannot be written."""
    try:
        # The trainer writes with json.dumps(sort_keys=True) after the model and optimizer are on disk: a part it
        # cannot write would leave the checkpoint without its state file. The copy is what resumes read.
        return json.loads(json.dumps(get(), sort_keys=True))
    except Exception as exc:
        message = (
            f"the state of {name!r} could not be saved ({type(exc).__name__}: {exc}); checkpoints leave it out, "
            "and a resume from one of them starts it fresh. The rest of the checkpoint is complete."
        )
        guard = name if name in {g.name for g in engine.guards} else "state"
        try:
            engine.record_warning(guard, "state_not_saved", message, step)
        except Exception:  # the session itself may be what is broken
            logger.warning("[rl_guards/%s] %s", guard, message)
        return None


def restore_engine(engine: Engine, saved: Any, step: int) -> None:
    """Restore a saved section (``{"attributes": {...}}``, or a list of them: the last) into ``engine``."""
    if isinstance(saved, list) and saved:
        saved = saved[-1]
    attributes = saved.get("attributes") if isinstance(saved, dict) else None
    if not isinstance(attributes, dict):
        say_not_restored(engine, step, ["everything (the saved section is not a dict of attributes)"], [])
        return
    version = attributes.get("version", 0)  # 0: sections saved before the state was versioned (same layout)
    if type(version) is not int or not 0 <= version <= STATE_VERSION:
        why = f"everything (saved by a version of rl_guards with state version {version!r}; this one reads up to "
        say_not_restored(engine, step, [f"{why}{STATE_VERSION})"], [])
        return
    dropped: list[str] = []
    guards = attributes.get("guards", {})
    if not isinstance(guards, dict):
        dropped.append(f"every guard's state (not a dict: {type(guards).__name__})")
        guards = {}
    for guard in engine.guards:
        if guard.name in guards:
            _load_part(guard.name, guard.state_dict, guard.load_state_dict, guards[guard.name], dropped)
    # 0.1 checkpoints saved only the counts, as [guard, kind, count] rows.
    session = attributes["session"] if "session" in attributes else {"counts": attributes.get("counts", [])}
    _load_part("session", engine.session.state_dict, engine.session.load_state_dict, session, dropped)
    if "task_labels" in attributes:
        labels = engine.task_labels
        _load_part("task_labels", labels.state_dict, labels.load_state_dict, attributes["task_labels"], dropped)
    seen = attributes.get("batches_seen", 0)
    if type(seen) is int and seen >= 0:
        engine.batches_seen = seen
    else:
        dropped.append(f"batches_seen ({type(seen).__name__} {seen!r:.80})")
    say_not_restored(engine, step, dropped, sorted(str(k) for k in attributes if k not in KNOWN_FIELDS))


def _load_part(name: str, current: Any, load: Any, saved: Any, dropped: list[str]) -> None:
    """``load(saved)``; when it fails, the part is put back as it was (fresh) and named in ``dropped``."""
    try:
        fresh = copy.deepcopy(current())
    except Exception:
        fresh = None
    try:
        if not isinstance(saved, dict):
            raise TypeError(f"not a dict: {type(saved).__name__}")
        load(saved)
    except Exception as exc:
        dropped.append(f"{name} ({type(exc).__name__}: {exc!s:.120})")
        if fresh is not None:
            try:
                load(fresh)
            except Exception as again:
                logger.warning("rl_guards: could not reset the %s state after a failed restore: %s", name, again)


def say_not_restored(engine: Engine, step: int, dropped: list[str], unknown: list[str]) -> None:
    """One warning for everything a resume could not take from the checkpoint (counted in the findings)."""
    if not dropped and not unknown:
        return
    parts = []
    if dropped:
        parts.append(f"dropped {'; '.join(dropped)}: these start fresh from this step")
    if unknown:
        parts.append(f"ignored fields this version does not know: {', '.join(unknown)}")
    message = (
        f"the checkpoint's rl_guards state could not be restored in full: {'. Also '.join(parts)}. The rest was "
        "restored and training goes on; the next checkpoint saves a complete section of this version."
    )
    warned = getattr(engine.session, "_warned", None)  # as restored: an earlier resume's warning of this kind
    if isinstance(warned, set):
        warned.discard(("state", "state_not_restored"))  # this message is about this resume: always said
    engine.record_warning("state", "state_not_restored", message, step)


__all__ = ["STATE_VERSION", "engine_state", "restore_engine", "say_not_restored"]
