"""Weights & Biases side channel for what does not fit the trainer's scalar metrics (tables, reports).

Scalars never go through here: they travel in the trainer's own metric buffer so that HF's WandbCallback
logs them with the step. Everything here is best effort: no run, no import, or an error → a no-op.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("rl_guards")


def active_run() -> Any:
    """The active wandb run, or None (wandb missing or not initialised)."""
    try:
        import wandb
    except Exception:  # wandb is optional at run time
        return None
    return wandb.run


def log(data: dict[str, Any]) -> bool:
    """Log ``data`` to the active run without advancing its step; True if it was logged."""
    run = active_run()
    if run is None:
        return False
    try:
        run.log(data, commit=False)
        return True
    except Exception as exc:  # logging problems at run time only warn
        logger.warning("rl_guards: could not log %s to W&B: %s", sorted(data), exc)
        return False


def table(columns: list[str], rows: list[list[Any]]) -> Any:
    """A ``wandb.Table`` or None when wandb is unavailable."""
    try:
        import wandb

        return wandb.Table(columns=columns, data=rows)
    except Exception as exc:
        logger.warning("rl_guards: could not build a W&B table: %s", exc)
        return None


def set_summary(values: dict[str, Any]) -> bool:
    """Write keys into the run summary (shown on the run's overview page)."""
    run = active_run()
    if run is None:
        return False
    try:
        for key, value in values.items():
            run.summary[key] = value
        return True
    except Exception as exc:
        logger.warning("rl_guards: could not write the W&B summary: %s", exc)
        return False


def alert(title: str, text: str, level: str = "warning") -> bool:
    """A W&B alert (``level``: info, warning, error); W&B itself drops a repeat of a title within 5 minutes."""
    run = active_run()
    if run is None:
        return False
    try:
        import wandb

        levels = {"info": wandb.AlertLevel.INFO, "warning": wandb.AlertLevel.WARN, "error": wandb.AlertLevel.ERROR}
        run.alert(title=title, text=text, level=levels.get(level, wandb.AlertLevel.WARN), wait_duration=300)
        return True
    except Exception as exc:
        logger.warning("rl_guards: could not send the W&B alert %r: %s", title, exc)
        return False


def update_config(values: dict[str, Any]) -> bool:
    """Add entries to the run config (shown with the run's settings)."""
    run = active_run()
    if run is None:
        return False
    try:
        run.config.update(values, allow_val_change=True)
        return True
    except Exception as exc:
        logger.warning("rl_guards: could not write the W&B config: %s", exc)
        return False
