"""The datum mask guard: stops a run whose training datums put loss on tokens the policy did not sample.

The masking concept for loops that train on datums (tinker-cookbook; rules in :mod:`rl_guards.core.datum_masks`),
as :class:`~rl_guards.guards.masks.GRPOMaskGuard` is for TRL's GRPO tensors; same config section (``masking``) and
metric names. It checks datums where the driver has them:

- on the batch (``batch.loss_inputs``: per row, the sequences as sampled and the datums built for them), decided
  with the batch's other guards: the datums a driver rebuilt with the framework's own functions;
- at :meth:`on_train_inputs`: the datums the trainer is given, as sent (a local backend sees them), each matched to
  the batch row whose sampled sequence it is.

Metrics (``rl_guards/masking/...``):

====================  ==========================================================
``checked_batches``   batches whose datums were checked so far (cumulative)
``violating_rows``    rows with a datum breaking a rule, per checked batch
``violations``        one per reported violation (from the Reporter)
====================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from rl_guards.config import GuardsConfig, MaskingConfig
from rl_guards.core import datum_masks as D
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.masks import LEGEND, render_spans, token_pieces
from rl_guards.errors import MaskingError
from rl_guards.guards.base import Guard, Reporter

RULES: dict[str, tuple[str, str]] = {
    D.OBSERVATION_LOSS: (
        "put loss (a non-zero advantage, weight or mask) on observation tokens the policy never sampled",
        "only the tokens the sampler returned may carry loss. Build datums from the trajectory as sampled "
        "(tinker_cookbook.rl.data_processing.trajectory_to_data does); an env or group builder that moves "
        "observation tokens (a prefill, a header, a tool result) into an action, or edits trajectories in "
        "compute_group_rewards, trains the model on text it never produced.",
    ),
    D.TARGET_SHIFT: (
        "have targets that are not their input tokens shifted by one (the loss trains the wrong tokens)",
        "build model_input and target_tokens with create_rightshifted_model_input_and_leftshifted_targets "
        "(tinker_cookbook.supervised.common), as trajectory_to_data does.",
    ),
    D.MASK_VALUES: (
        "have mask or weights values other than 0 and 1 (a weight of 2 doubles a token's loss)",
        "build mask / weights as 0/1 per target.",
    ),
    D.UNMATCHED_DATUM: (
        "hold token sequences no rollout of this batch produced, so their loss placement could not be checked",
        "if you build datums yourself, build them from the batch's trajectories; if these are meant (an extra "
        "supervised term), masking.mode: log silences this.",
    ),
}


@dataclass
class TrainInputs:
    """The datums a trainer is about to train on (every one of a step), and where they were seen."""

    datums: list[D.DatumView]
    source: str = "the datums sent to forward_backward"


class DatumMaskGuard(Guard):
    """Stops a run whose datums put loss on tokens the policy did not sample (``MaskingError``)."""

    name: ClassVar[str] = "masking"
    config_field: ClassVar[str] = "masking"
    FEATURES: ClassVar[tuple[str, ...]] = ("kinds", "checked")

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.config: MaskingConfig = config.masking
        self.checked = 0
        self.batches = 0

    def state_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.checked = int(state.get("checked", 0))
        self.batches = int(state.get("batches", 0))

    # ----- datums on the batch -------------------------------------------------------------------------------
    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        self.batches += 1
        due = (self.batches - 1) % self.config.check_every == 0
        kinds: list[float] = []
        checked: list[float] = []
        for row in batch.held_rows:
            loss_row = batch.loss_inputs[row] if row < len(batch.loss_inputs) else None
            if not due or not isinstance(loss_row, D.LossRow) or loss_row.datums is None:
                kinds.append(0.0)
                checked.append(0.0)
                continue
            own = {seq.key: seq for seq in loss_row.expected}
            bits = 0
            for datum in loss_row.datums:
                bits |= D.check_datum(datum, own.get(datum.key))[0]
            kinds.append(float(bits))
            checked.append(1.0)
        return {"kinds": kinds, "checked": checked}

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        checked = batch.feature("masking/checked")
        bits = batch.feature("masking/kinds")
        if checked is None or bits is None or not checked.any():
            return
        source = next(
            (r.source for r in batch.loss_inputs if isinstance(r, D.LossRow) and r.datums is not None and r.source),
            "",
        )
        found = {row: int(b) for row, b in enumerate(bits.astype(np.int64).tolist()) if b}
        self._decide(found, len(batch), batch, source, report)

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        loss_row = batch.loss_inputs[row] if row < len(batch.loss_inputs) else None
        if not isinstance(loss_row, D.LossRow) or not loss_row.datums:
            return None
        own = {seq.key: seq for seq in loss_row.expected}
        for datum in loss_row.datums:
            bits, bad = D.check_datum(datum, own.get(datum.key))
            if bits:
                return self._render(datum, bad)
        return None

    # ----- datums as the trainer is given them -----------------------------------------------------------------
    def on_train_inputs(self, batch: RolloutBatch | None, inputs: Any, report: Reporter) -> None:
        """Match each datum to the batch row whose sampled sequence it is, and check it (counted per datum)."""
        if not isinstance(inputs, TrainInputs) or batch is None:
            return
        expected = D.expected_by_key(
            {row: r.expected for row, r in enumerate(batch.loss_inputs) if isinstance(r, D.LossRow)}
        )
        by_kind: dict[str, list[tuple[int | None, D.DatumView, list[int]]]] = {}
        bad = 0
        for datum in inputs.datums:
            row, seq = expected.get(datum.key, (None, None))
            bits, positions = D.check_datum(datum, seq)
            bad += bool(bits)
            for kind in D.kinds_of(bits):
                by_kind.setdefault(kind, []).append((row, datum, positions))
        self.checked += 1
        report.metric("checked_batches", float(self.checked))
        report.metric("violating_rows", float(bad))
        total = len(inputs.datums)
        for kind in D.DATUM_KINDS:
            found = by_kind.get(kind)
            if not found:
                continue
            message = partial(self._sent_message, kind, found, total, inputs.source)
            if kind in D.SUSPECTED_DATUM_KINDS:
                report.suspect(kind, message)
            else:
                report.violation(kind, message, MaskingError)

    def _sent_message(
        self, kind: str, found: list[tuple[int | None, D.DatumView, list[int]]], total: int, source: str
    ) -> str:
        what, fix = RULES[kind]
        lines = [f"{kind}: {len(found)} of {total} datums {what} (checked on {source}).", LEGEND]
        for row, datum, positions in found[: self.config.max_rows_shown]:
            where = f"row {row}" if row is not None else "a datum no rollout of the batch sampled"
            lines.append(f"{where}: {self._render(datum, positions)}")
        lines.append(f"Fix: {fix}")
        return "\n".join(lines)

    # ----- verdict on the batch ---------------------------------------------------------------------------------
    def _decide(self, found: dict[int, int], rows: int, batch: RolloutBatch, source: str, report: Reporter) -> None:
        self.checked += 1
        report.metric("checked_batches", float(self.checked))
        report.metric("violating_rows", float(len(found)))
        by_kind: dict[str, list[int]] = {}
        for row, bits in sorted(found.items()):
            for kind in D.kinds_of(bits):
                by_kind.setdefault(kind, []).append(row)
        for kind in D.DATUM_KINDS:
            rows_of = by_kind.get(kind, [])
            if not rows_of:
                continue
            shown = rows_of[: self.config.max_rows_shown]
            message = partial(self._message, kind, len(rows_of), rows, shown, batch, source)
            if kind in D.SUSPECTED_DATUM_KINDS:
                report.suspect(kind, message, rows=shown)
            else:
                report.violation(kind, message, MaskingError, rows=shown)

    def _message(
        self, kind: str, count: int, rows: int, shown: Sequence[int], batch: RolloutBatch, source: str
    ) -> str:
        what, fix = RULES[kind]
        lines = [f"{kind}: {count} of {rows} rollouts {what} (checked on {source or 'the batch datums'}).", LEGEND]
        for row in shown:
            text = batch.evidence.get((self.name, row)) or self.row_evidence(batch, row)
            lines.append(f"row {row}: {text or '(rendered on the rank that holds it)'}")
        lines.append(f"Fix: {fix}")
        return "\n".join(lines)

    def _render(self, datum: D.DatumView, bad: Sequence[int]) -> str:
        decode = self.ctx.decode
        pieces = (
            token_pieces(decode, datum.targets) if decode is not None else [f"[{t}]" for t in datum.targets]
        )
        flagged = [False] * len(pieces)
        for i in bad:
            if 0 <= i < len(flagged):
                flagged[i] = True
        return "targets " + render_spans(pieces, datum.carries_loss(), flagged)


__all__ = ["RULES", "DatumMaskGuard", "TrainInputs"]
