"""The cookbook's checkpoints as the guards see them: where a resumed loop starts, the checkpoints it wrote
(``<log_path>/checkpoints.jsonl``, read with the cookbook's own reader), and the guards' state saved with each one.

The state of the guards at checkpoint ``<name>`` (streaks, windows, counts, first steps; the engine's
``engine_state``, as TRL checkpoints hold it) goes to ``<rl_guards folder>/state/<name>.json`` when the loop hands out
the batch after it (nothing has changed the state since the checkpoint was written) or at the end; a resume from
that checkpoint restores it in place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rl_guards.engine.driver import Engine
from rl_guards.engine.state import engine_state, restore_engine

STATE_FOLDER = "state"


def resume_point(log_path: str) -> tuple[int, str | None]:
    """Where the loop starts: the batch and name of the cookbook's last resumable checkpoint (0, None: fresh)."""
    try:
        from tinker_cookbook.checkpoint_utils import get_last_checkpoint

        last = get_last_checkpoint(log_path)
    except Exception:
        return 0, None
    if last is None:
        return 0, None
    return int(getattr(last, "batch", 0) or 0), str(getattr(last, "name", "") or "") or None


def written(log_path: str) -> list[dict[str, Any]]:
    """The checkpoints the cookbook wrote so far: ``{"name", "batch"}`` each, in order."""
    try:
        from tinker_cookbook.checkpoint_utils import load_checkpoints_file

        records = load_checkpoints_file(log_path)
    except Exception:
        return []
    out = []
    for record in records:
        name, batch = getattr(record, "name", None), getattr(record, "batch", None)
        if name is not None and batch is not None:
            out.append({"name": str(name), "batch": int(batch)})
    return out


def state_file(folder: str | Path, checkpoint: str) -> Path:
    return Path(folder) / STATE_FOLDER / f"{checkpoint}.json"


def save_state(engine: Engine, folder: str | Path, checkpoint: str, step: int) -> None:
    """The guards' state at ``checkpoint`` to its file (atomically). Never fatal: a failure is a warning."""
    path = state_file(folder, checkpoint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"attributes": engine_state(engine, step)}, sort_keys=True))
        tmp.replace(path)
    except OSError as exc:
        engine.record_warning("state", "state_not_saved", f"could not write {path}: {exc}", step)


def restore_state(engine: Engine, folder: str | Path, checkpoint: str, step: int) -> str | None:
    """Restore the state saved with ``checkpoint``; a note when there is none (the guards start fresh)."""
    path = state_file(folder, checkpoint)
    if not path.is_file():
        return (
            f"resumed at step {step} from checkpoint {checkpoint!r} without rl_guards state ({path} is missing): "
            "the guards start fresh"
        )
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        saved = {"attributes": f"unreadable: {exc}"}
    restore_engine(engine, saved, step)  # a damaged part starts fresh and is said once
    return None


__all__ = ["STATE_FOLDER", "restore_state", "resume_point", "save_state", "state_file", "written"]
