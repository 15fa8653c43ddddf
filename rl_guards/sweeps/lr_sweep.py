"""Short GRPO runs over learning rates x schedulers, compared per task.

RL does not necessarily share SFT's learning-rate characteristics, and the framework's default schedule (linear
decay) is a choice too. This runs the grid sequentially in one process, one W&B run per cell in one W&B group,
reads each run's per-task reward curve from ``trainer.state.log_history`` and writes a comparison::

    result = run_lr_sweep(make_trainer, base_args, [3e-7, 1e-6, 3e-6], schedulers=("constant", "linear"),
                          output_dir="sweeps/lr")
    print(result.markdown())          # also in <output_dir>/sweep_summary.md and sweep_summary.json

Curves come from ``rl_guards_task/<task>/reward_mean`` when the guards are installed (the ``tasks`` monitor),
else from TRL's own ``reward`` (one pseudo-task, ``all``).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.metric_keys import parse_task_metric_key

logger = logging.getLogger("rl_guards")

TASK_REWARD_METRIC = "reward_mean"
TRL_REWARD_KEY = "reward"
ALL_TASKS = "all"


@dataclass
class SweepRun:
    """One cell of the grid."""

    name: str
    learning_rate: float
    scheduler: str
    output_dir: str
    steps: int = 0  # optimizer steps completed
    curves: dict[str, list[list[float]]] = field(default_factory=dict)  # task -> [[step, reward], ...]
    error: str | None = None  # the exception text when the run failed

    def final(self, task: str) -> float | None:
        """Last logged reward of the task."""
        curve = self.curves.get(task)
        return curve[-1][1] if curve else None

    def mean(self, task: str) -> float | None:
        """Mean of the task's logged rewards over the run."""
        curve = self.curves.get(task)
        return sum(v for _, v in curve) / len(curve) if curve else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["final"] = {t: self.final(t) for t in sorted(self.curves)}
        out["mean"] = {t: self.mean(t) for t in sorted(self.curves)}
        return out


@dataclass
class SweepResult:
    """All runs of a sweep and where the summary was written."""

    group: str
    runs: list[SweepRun]
    output_dir: str

    @property
    def tasks(self) -> list[str]:
        return sorted({t for run in self.runs for t in run.curves})

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "tasks": self.tasks, "runs": [r.to_dict() for r in self.runs]}

    def markdown(self) -> str:
        """One row per run: lr, scheduler, steps, then final / mean reward per task."""
        tasks = self.tasks
        header = ["run", "lr", "scheduler", "steps"] + [f"{t} final" for t in tasks] + [f"{t} mean" for t in tasks]
        lines = [
            f"LR sweep `{self.group}`: reward per task (final = last logged value, mean = over the run)",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
        ]
        for run in self.runs:
            cells = [run.name, f"{run.learning_rate:g}", run.scheduler, str(run.steps)]
            cells += [_fmt(run.final(t)) for t in tasks] + [_fmt(run.mean(t)) for t in tasks]
            if run.error:
                cells[0] += f" (failed: {run.error.splitlines()[0][:80]})"
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def reward_curves(log_history: Sequence[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Per-task reward curves ``task -> [[step, value], ...]`` from a trainer's ``state.log_history``.

    Uses ``rl_guards_task/<task>/reward_mean`` when present, else TRL's ``reward`` as task ``all``. Eval rows
    (``eval_*`` keys) are skipped.
    """
    curves: dict[str, list[list[float]]] = {}
    for row in log_history:
        step = float(row.get("step", 0))
        for key, value in row.items():
            parsed = parse_task_metric_key(key)
            if parsed is not None and parsed[1] == TASK_REWARD_METRIC and _is_number(value):
                curves.setdefault(parsed[0], []).append([step, float(value)])
    if curves:
        return curves
    for row in log_history:
        value = row.get(TRL_REWARD_KEY)
        if _is_number(value):
            curves.setdefault(ALL_TASKS, []).append([float(row.get("step", 0)), float(value)])
    return curves


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(float(value))


def run_name(group: str, learning_rate: float, scheduler: str) -> str:
    """``<group>-lr<lr>-<scheduler>``."""
    return f"{group}-lr{learning_rate:g}-{scheduler}"


def run_lr_sweep(
    make_trainer: Callable[[Any], Any],
    base_args: Any,
    learning_rates: Sequence[float],
    schedulers: Sequence[str] = ("constant", "linear"),
    output_dir: str | os.PathLike[str] = "lr_sweep",
    *,
    group: str | None = None,
    print_summary: bool = True,
) -> SweepResult:
    """Train one short run per (learning rate, scheduler), sequentially, and compare their reward curves.

    ``make_trainer(args)`` builds a fresh trainer (a fresh model) from the GRPOConfig it is given; each run's
    args are a copy of ``base_args`` with ``learning_rate``, ``lr_scheduler_type``, ``run_name`` and
    ``output_dir`` (``<output_dir>/<run_name>``) set. W&B runs share the group ``group`` (default: the output
    folder's name) through ``WANDB_RUN_GROUP``, and each is finished before the next starts. A failing run is
    recorded with its error and the sweep goes on. Writes ``sweep_summary.json`` and ``sweep_summary.md``.
    """
    if not learning_rates:
        raise ValueError("learning_rates is empty: give at least one learning rate")
    if not schedulers:
        raise ValueError("schedulers is empty: give at least one lr_scheduler_type, e.g. ('constant', 'linear')")
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    group = group or root.resolve().name
    runs: list[SweepRun] = []
    for scheduler in schedulers:
        for lr in learning_rates:
            runs.append(_run_one(make_trainer, base_args, float(lr), str(scheduler), root, group))
    result = SweepResult(group=group, runs=runs, output_dir=str(root))
    (root / "sweep_summary.json").write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    (root / "sweep_summary.md").write_text(result.markdown() + "\n", encoding="utf-8")
    if print_summary:
        print(result.markdown(), flush=True)
    return result


def _run_one(
    make_trainer: Callable[[Any], Any], base_args: Any, lr: float, scheduler: str, root: Path, group: str
) -> SweepRun:
    name = run_name(group, lr, scheduler)
    args = copy.deepcopy(base_args)
    # Set attributes rather than dataclasses.replace: GRPOConfig.__post_init__ rejects its own derived fields
    # (generation_batch_size and steps_per_generation both set) when run a second time.
    args.learning_rate = lr
    args.lr_scheduler_type = scheduler
    args.run_name = name
    args.output_dir = str(root / name)
    run = SweepRun(name=name, learning_rate=lr, scheduler=scheduler, output_dir=args.output_dir)
    previous_group = os.environ.get("WANDB_RUN_GROUP")
    os.environ["WANDB_RUN_GROUP"] = group
    trainer = None
    try:
        trainer = make_trainer(args)
        trainer.train()
    except Exception as exc:  # one diverging or failing cell must not lose the others
        run.error = f"{type(exc).__name__}: {exc}"
        logger.warning("rl_guards: LR sweep run %s failed: %s", name, run.error)
    finally:
        if trainer is not None:
            run.steps = int(trainer.state.global_step)
            run.curves = reward_curves(trainer.state.log_history)
        _finish_wandb()
        if previous_group is None:
            os.environ.pop("WANDB_RUN_GROUP", None)
        else:
            os.environ["WANDB_RUN_GROUP"] = previous_group
    return run


def _finish_wandb() -> None:
    """End the active W&B run so the next cell starts its own (HF's WandbCallback never finishes it)."""
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish()
    except Exception as exc:
        logger.warning("rl_guards: could not finish the W&B run: %s", exc)


__all__ = ["SweepResult", "SweepRun", "reward_curves", "run_lr_sweep", "run_name"]
