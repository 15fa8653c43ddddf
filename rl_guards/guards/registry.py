"""The guards :func:`rl_guards.install` builds, in the order they run.

Start-of-training checks come first (preflight, template, reward sanity), then the tensor check (masking),
then the batch guards; the rollout recorder runs last so its dump carries what the others saw.
The contract tests run over every entry.
"""

from __future__ import annotations

from rl_guards.guards.base import Guard
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.drift import DriftGuard
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
