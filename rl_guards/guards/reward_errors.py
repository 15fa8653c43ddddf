"""Reward functions that raised on some rows of a batch: the rows shown decoded, the run kept (warn) or stopped on
every rank together (raise). The catching is done by :mod:`rl_guards.rewards.row_errors`, installed by the hook."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.completions import completion_text
from rl_guards.errors import RewardFunctionError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rollouts.render import printable

_MAX_SHOWN = 3
_BITS = 52  # functions per feature: the bits a float64 holds exactly


def feature_names(n_funcs: int) -> tuple[str, ...]:
    """The declared features for ``n_funcs`` reward functions: ``raised`` (functions 0-51), ``raised1`` (52-103)..."""
    return ("raised", *(f"raised{k}" for k in range(1, -(-n_funcs // _BITS))))


def raised_cells(batch: RolloutBatch, features: dict[str, list[float]] | None = None) -> np.ndarray | None:
    """Rows x functions, True where a reward function raised: this guard's per-row bits decoded (``features``: its
    gathered features by name; default the batch's), None when the batch does not carry them."""
    n_funcs = len(batch.reward_names)
    if not n_funcs:
        return None
    if features is None:
        prefix = f"{RewardErrorGuard.name}/"
        features = {k[len(prefix) :]: v for k, v in batch.features.items() if k.startswith(prefix)}
    cells = np.zeros((len(batch), n_funcs), dtype=bool)
    for k, name in enumerate(feature_names(n_funcs)):
        bits = features.get(name)
        if bits is None or len(bits) != len(batch):
            return None
        values = batch.column_array(bits).astype(np.int64)
        for f in range(k * _BITS, min(n_funcs, (k + 1) * _BITS)):
            cells[:, f] = (values >> (f - k * _BITS)) & 1
    return cells


class RewardErrorGuard(Guard):
    """Reads which rows each reward function raised on (per rank, gathered as per-row bits: all ranks agree).

    A function that raised on some rows had them scored None and kept its other scores; one that raised on every
    row of a batch had the whole batch scored None. Violations (:class:`~rl_guards.errors.RewardFunctionError`,
    default mode warn): ``raised:<fn>`` with up to three rows decoded (prompt tail, completion, the exception and
    where it was raised).

    ======================================  ==================================================================
    key                                     value
    ======================================  ==================================================================
    ``rl_guards/reward_errors/rows``        (function, row) pairs scored None because the function raised
    ======================================  ==================================================================
    """

    name: ClassVar[str] = "reward_errors"
    config_field: ClassVar[str] = "reward_errors"
    FEATURES: ClassVar[tuple[str, ...]] = ("raised",)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._errors: dict[int, dict[int, str]] = {}  # held row -> function index -> error

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        # declared width: one feature per 52 reward functions, so that no function goes unseen
        self.FEATURES = feature_names(len(ctx.reward_funcs))  # type: ignore[misc]

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        held = list(batch.held_rows)
        self._errors = {}
        log = getattr(self.ctx, "reward_error_log", None)
        if log is None:
            return {name: [0.0] * len(held) for name in self.FEATURES}
        errors, whole = log.take()
        for index, row_errors in errors.items():
            for err in row_errors:
                rows = held if err.row < 0 else [held[err.row]] if err.row < len(held) else []
                for row in rows[:1] if err.row < 0 else rows:
                    self._errors.setdefault(row, {})[index] = err.error
        for index, error in whole.items():
            for row in held:
                self._errors.setdefault(row, {})[index] = f"{error} (raised on every row of the batch)"
        out: dict[str, list[float]] = {}
        for k, name in enumerate(self.FEATURES):
            low, high = k * _BITS, (k + 1) * _BITS
            out[name] = [
                float(sum(1 << (f - low) for f in self._errors.get(row, {}) if low <= f < high)) for row in held
            ]
        return out

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        errors = self._errors.get(row)
        return json.dumps({str(k): v for k, v in errors.items()}) if errors else None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        cells = raised_cells(batch, self.features(batch))
        if cells is None or not cells.any():
            return
        report.metric("rows", float(cells.sum()))
        for f, fname in enumerate(batch.reward_names):
            rows = np.flatnonzero(cells[:, f]).tolist()
            if rows:
                shown = rows[:_MAX_SHOWN]
                report.violation(
                    f"raised:{fname}",
                    lambda f=f, fname=fname, rows=rows, shown=shown: self._message(batch, f, fname, rows, shown),
                    RewardFunctionError,
                    rows=shown,
                )

    def _message(self, batch: RolloutBatch, f: int, fname: str, rows: list[int], shown: list[int]) -> str:
        mode = self.config.mode
        outcome = "stopped the run" if mode == "raise" else "those rows were scored None and training went on"
        lines = [
            f"reward function {fname!r} raised on {len(rows)} of {len(batch)} rows at step {batch.step} "
            f"({batch.mode}); {outcome}:"
        ]
        for row in shown:
            text = batch.evidence.get((self.name, row))
            if text is None and batch.holds(row):
                text = self.row_evidence(batch, row)
            error = json.loads(text).get(str(f), "?") if text else "(on another rank)"
            prompt = batch.prompts[row] if row < len(batch.prompts) else None
            tail = completion_text(prompt)[-120:] if prompt is not None else ""
            completion = completion_text(batch.completions[row]) if batch.completions[row] is not None else ""
            lines.append(f"  row {row} (task {batch.tasks[row]!r}): {error}")
            lines.append(f"    prompt ...{printable(tail)}")
            lines.append(f"    completion {printable(completion[:300])}{'...' if len(completion) > 300 else ''}")
        lines.append(
            "Fix: make the function return None (not scored) or 0.0 for rows it cannot parse instead of raising; "
            "reward_errors.mode: raise stops on the first such batch."
        )
        return "\n".join(lines)
