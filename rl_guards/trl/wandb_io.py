"""Tracker side channel for what does not fit the trainer's scalar metrics: tables, reports, alerts, summary, config.

Scalars never go through here: they travel in the trainer's own metric buffer so that HF's tracker callbacks log
them with the step. What goes through here reaches W&B and trackio alike, whichever has an active run:

- W&B: a table or page about a trainer step (a rollout dump's, a checkpoint's drift probes, the preflight report at
  step 0) is a row of its own at that step (``train/global_step``, the x-axis HF gives the run), so it sits at its
  step whenever it is written; other values ``run.log(commit=False)`` (merged into the row HF commits next);
  ``run.summary``, ``run.alert``, ``run.config``.
- trackio (local-first; TRL sends it its completions table too): a value about a step is logged at that step (the
  router makes HF's ``TrackioCallback`` log its rows at the trainer's step too, not at trackio's own counter); other
  values are held and merged into the next row HF's callback logs (:func:`take_trackio_rows`), or logged at once
  when no such callback runs; ``trackio.alert``; the run config (written with the run's first row); trackio has no
  run summary, so the summary entries go out as one ``rl_guards/summary`` table at train end
  (:func:`flush_trackio`).

Tables and HTML are built tracker-neutral (:func:`table`, :class:`Html`) and converted per tracker. Everything is
best effort: no run, no import, or an error → a no-op.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("rl_guards")

SUMMARY_TABLE_KEY = "rl_guards/summary"  # trackio's stand-in for the W&B run summary
STEP_KEY = "train/global_step"  # the trainer's step, as HF's tracker callbacks log it (W&B's x-axis)


@dataclass(frozen=True)
class Table:
    """A table for any tracker: ``wandb.Table`` / ``trackio.Table`` when logged."""

    columns: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class Html:
    """Rendered HTML (``wandb.Html``); trackio gets it as Markdown."""

    html: str


class _TrackioState:
    merge = False  # a router holds rows for HF's TrackioCallback (else they are logged at once)
    pending: dict[str, Any] = {}  # noqa: RUF012 (process-wide, like the trackers' own current run)
    summary: dict[str, Any] = {}  # noqa: RUF012


def wandb_run() -> Any:
    """The active wandb run, or None (wandb missing or not initialised)."""
    module = sys.modules.get("wandb")  # a run exists only if wandb was imported
    return getattr(module, "run", None) if module is not None else None


def trackio_run() -> Any:
    """The active trackio run, or None."""
    module = sys.modules.get("trackio")
    if module is None:
        return None
    try:
        return module.context_vars.current_run.get()
    except Exception:
        return None


def active_run() -> Any:
    """A tracker run to deliver to (W&B's, else trackio's), or None when there is none."""
    return wandb_run() or trackio_run()


def _for_wandb(value: Any) -> Any:
    import wandb

    if isinstance(value, Table):
        return wandb.Table(columns=value.columns, data=value.rows)
    if isinstance(value, Html):
        return wandb.Html(value.html)
    return value


def _for_trackio(value: Any) -> Any:
    import trackio

    if isinstance(value, Table):
        return trackio.Table(columns=value.columns, data=[[_cell(c) for c in row] for row in value.rows])
    if isinstance(value, Html):
        return trackio.Markdown(value.html)
    return value


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value, default=str)


def log(data: dict[str, Any], step: int | None = None) -> bool:
    """Log ``data`` to every active tracker; True if some tracker took it. ``step``: the trainer's step the values are
    about (a row of their own at that step); None: merged into the trainer's next row."""
    logged = False
    run = wandb_run()
    if run is not None:
        try:
            values = {k: _for_wandb(v) for k, v in data.items()}
            if step is None:
                run.log(values, commit=False)
            else:
                run.log({**values, STEP_KEY: int(step)})
            logged = True
        except Exception as exc:  # logging problems at run time only warn
            logger.warning("rl_guards: could not log %s to W&B: %s", sorted(data), exc)
    if trackio_run() is not None:
        if _TrackioState.merge and step is None:
            _TrackioState.pending.update(data)
            logged = True
        else:
            logged = _log_trackio(data, step) or logged
    return logged


def _log_trackio(data: dict[str, Any], step: int | None = None) -> bool:
    try:
        import trackio

        values = {k: _for_trackio(v) for k, v in data.items()}
        if step is None:
            trackio.log(values)
        else:
            trackio.log({**values, STEP_KEY: int(step)}, step=int(step))
        return True
    except Exception as exc:
        logger.warning("rl_guards: could not log %s to trackio: %s", sorted(data), exc)
        return False


def take_trackio_rows() -> dict[str, Any]:
    """The values held for trackio since its last row, converted (merged into the row HF's callback logs)."""
    pending, _TrackioState.pending = _TrackioState.pending, {}
    out = {}
    for key, value in pending.items():
        try:
            out[key] = _for_trackio(value)
        except Exception as exc:
            logger.warning("rl_guards: could not log %s to trackio: %s", key, exc)
    return out


def flush_trackio() -> None:
    """Send what is held for trackio and the summary table; called before HF's callback finishes the run."""
    if trackio_run() is None:
        return
    data = dict(_TrackioState.pending)
    _TrackioState.pending = {}
    if _TrackioState.summary:
        rows = [[k, _cell(v)] for k, v in sorted(_TrackioState.summary.items())]
        data[SUMMARY_TABLE_KEY] = Table(["key", "value"], rows)
    if data:
        _log_trackio(data)


def reset_trackio(merge: bool) -> None:
    """A new run: nothing held; ``merge``: hold rows for HF's TrackioCallback."""
    _TrackioState.merge = merge
    _TrackioState.pending = {}
    _TrackioState.summary = {}


def table(columns: list[str], rows: list[list[Any]]) -> Table:
    """A tracker-neutral table."""
    return Table(list(columns), [list(r) for r in rows])


def set_summary(values: dict[str, Any]) -> bool:
    """Write keys into the run summary (W&B: the run's overview page; trackio: the train-end summary table)."""
    done = False
    run = wandb_run()
    if run is not None:
        try:
            for key, value in values.items():
                run.summary[key] = value
            done = True
        except Exception as exc:
            logger.warning("rl_guards: could not write the W&B summary: %s", exc)
    if trackio_run() is not None:
        _TrackioState.summary.update(values)
        done = True
    return done


def alert(title: str, text: str, level: str = "warning") -> bool:
    """An alert (``level``: a severity, :mod:`rl_guards.core.severity`); W&B itself drops a repeat of a title within
    5 minutes."""
    done = False
    if wandb_run() is not None:
        try:
            import wandb

            levels = {"info": wandb.AlertLevel.INFO, "blocking": wandb.AlertLevel.ERROR}
            wandb_run().alert(title=title, text=text, level=levels.get(level, wandb.AlertLevel.WARN), wait_duration=300)
            done = True
        except Exception as exc:
            logger.warning("rl_guards: could not send the W&B alert %r: %s", title, exc)
    if trackio_run() is not None:
        try:
            import trackio

            levels = {"info": trackio.AlertLevel.INFO, "blocking": trackio.AlertLevel.ERROR}
            trackio.alert(title=title, text=text, level=levels.get(level, trackio.AlertLevel.WARN))
            done = True
        except Exception as exc:
            logger.warning("rl_guards: could not send the trackio alert %r: %s", title, exc)
    return done


def update_config(values: dict[str, Any]) -> bool:
    """Add entries to the run config (shown with the run's settings)."""
    done = False
    run = wandb_run()
    if run is not None:
        try:
            run.config.update(values, allow_val_change=True)
            done = True
        except Exception as exc:
            logger.warning("rl_guards: could not write the W&B config: %s", exc)
    tk = trackio_run()
    if tk is not None:
        try:
            tk.config.update(json.loads(json.dumps(values, default=str)))
            done = True
        except Exception as exc:
            logger.warning("rl_guards: could not write the trackio config: %s", exc)
    return done


class RunTracker:
    """The guards' :class:`~rl_guards.guards.session.Tracker`: W&B and trackio runs of this process, as above."""

    def active(self) -> bool:
        return active_run() is not None

    def log(self, data: dict[str, Any], step: int | None = None) -> bool:
        return log(data, step)

    def table(self, columns: list[str], rows: list[list[Any]]) -> Table:
        return table(columns, rows)

    def html(self, text: str) -> Html:
        return Html(text)

    def set_summary(self, values: dict[str, Any]) -> bool:
        return set_summary(values)
