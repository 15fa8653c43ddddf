"""The guards each driver builds, in the order they run.

Start-of-training checks come first (preflight, template, reward sanity), then the tensor check (masking),
then the batch guards; the rollout recorder runs last so its dump carries what the others saw.
The contract tests run over every entry of both lists.

``BATCH_GUARDS``: :func:`rl_guards.install` (TRL). ``TINKER_GUARDS``: :mod:`rl_guards.tinker` (tinker-cookbook
loops): the masking concept checks the datums the loop trains on, prompts render through the run's renderer, the
reward probes step each row's env (:mod:`rl_guards.reward_calls.tinker`), and what needs TRL's own calling code
(preflight of a GRPOConfig, reward-function wrappers, drift generation) is not in it.
"""

from __future__ import annotations

from rl_guards.guards.base import Guard
from rl_guards.guards.datum_masks import DatumMaskGuard
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.drift import DriftGuard
from rl_guards.guards.group_integrity import GroupIntegrityGuard
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.guards.preflight import PreflightGuard
from rl_guards.guards.probes import RewardProbeGuard
from rl_guards.guards.recorder import RolloutRecorder
from rl_guards.guards.reward_errors import RewardErrorGuard
from rl_guards.guards.reward_sanity import RewardSanityGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.template import DoubleThinkGuard
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.guards.unpaid_rewards import UnpaidRewardGuard

BATCH_GUARDS: list[type[Guard]] = [
    PreflightGuard,
    DoubleThinkGuard,
    RewardSanityGuard,
    GRPOMaskGuard,
    RewardErrorGuard,
    TaskRewardMonitor,
    RoutingGuard,
    DeadGroupGuard,
    UnpaidRewardGuard,
    TruncationGuard,
    SlicingGuard,
    RewardProbeGuard,
    ThinkTagsGuard,
    DriftGuard,
    RolloutRecorder,
]

TINKER_GUARDS: list[type[Guard]] = [
    DoubleThinkGuard,
    RewardSanityGuard,  # on the first batch's env graders (envs are built per batch: no rows at start)
    DatumMaskGuard,
    TaskRewardMonitor,
    GroupIntegrityGuard,
    DeadGroupGuard,
    UnpaidRewardGuard,
    TruncationGuard,
    RewardProbeGuard,
    ThinkTagsGuard,
    RolloutRecorder,
]
