"""Reward functions and reward-function wrappers for TRL's ``reward_funcs``.

- :class:`StrayThinkPenalty`: penalise stray / malformed think tags (on/off and weighted from the config).
- :func:`route`: each task's rows to its own reward functions (None for other tasks' rows).
- :func:`blind_judge`: hand a judge the final answer only; :func:`check_judge_inputs` finds leaks.
- :func:`watch_inputs`: record what a reward function receives, to catch strings sliced on the way.
- :func:`check_reward_sanity` / :func:`assert_reward_sanity`: known-good above known-bad, before training.
"""

from __future__ import annotations

from rl_guards.rewards.blind_judge import blind_judge, check_judge_inputs
from rl_guards.rewards.routing import route
from rl_guards.rewards.sanity import assert_reward_sanity, check_reward_sanity
from rl_guards.rewards.slicing import watch_inputs
from rl_guards.rewards.stray_think import StrayThinkPenalty

__all__ = [
    "StrayThinkPenalty",
    "assert_reward_sanity",
    "blind_judge",
    "check_judge_inputs",
    "check_reward_sanity",
    "route",
    "watch_inputs",
]
