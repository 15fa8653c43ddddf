"""The datums a cookbook loop trains on, as the masking guard reads them.

Two sources, said in every finding:

- **sent**: the datums a ``forward_backward`` request carries, exactly as the loop sent them (``mask`` already
  stripped), seen by the local backend's tap (:meth:`rl_guards.tinker.run.TinkerRun.attach`). Checked before the
  request runs: a stop fails the request, so the step never trains.
- **rebuilt**: against the real service nothing on this side sees the request, so each group's datums are rebuilt
  with the cookbook's own functions, the ones its loop calls (``compute_advantages`` and ``trajectory_to_data`` on the
  trajectories and rewards it will train on), and checked with the batch. What the loop changes after the group's
  rewards (``incorporate_kl_penalty`` scales the advantages of action tokens only) is not seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rl_guards.core.datum_masks import LOSS_INPUTS, DatumView, LossRow

SENT = "the datums sent to forward_backward (seen by the local Tinker backend)"
REBUILT = "datums rebuilt with the cookbook's own compute_advantages + trajectory_to_data"


def datum_view(datum: Any) -> DatumView:
    """A ``tinker.Datum`` as plain lists."""
    inputs = datum.loss_fn_inputs
    targets = inputs["target_tokens"].to_numpy().reshape(-1).astype("int64").tolist()
    loss = {name: inputs[name].to_numpy().reshape(-1).tolist() for name in LOSS_INPUTS if name in inputs}
    return DatumView([int(t) for t in datum.model_input.to_ints()], targets, loss)


def rebuilt_rows(
    trajectories: Sequence[Any], final_rewards: Sequence[float], metrics: Sequence[dict[str, Any]], rows: list[LossRow]
) -> tuple[list[float], list[LossRow]]:
    """The group's advantages and, per trajectory, its :class:`LossRow` with the datums the cookbook builds."""
    from tinker_cookbook.rl.data_processing import trajectory_to_data

    advantages = advantages_of(trajectories, final_rewards, metrics)
    out = []
    for trajectory, advantage, row in zip(trajectories, advantages, rows, strict=True):
        datums = [datum_view(d) for d in trajectory_to_data(trajectory, advantage, include_provenance=False)]
        out.append(LossRow(row.expected, datums, REBUILT))
    return advantages, out


def advantages_of(
    trajectories: Sequence[Any], final_rewards: Sequence[float], metrics: Sequence[dict[str, Any]]
) -> list[float]:
    """The group's advantages, with the cookbook's own ``compute_advantages``."""
    from tinker_cookbook.rl.data_processing import compute_advantages
    from tinker_cookbook.rl.types import TrajectoryGroup

    group = TrajectoryGroup(list(trajectories), list(final_rewards), list(metrics))
    return [float(a) for a in compute_advantages([group])[0].tolist()]


__all__ = ["REBUILT", "SENT", "advantages_of", "datum_view", "rebuilt_rows"]
