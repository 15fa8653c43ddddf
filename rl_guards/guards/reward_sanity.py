"""Reward sanity preflight: known-good completions must outscore known-bad ones, before step 0."""

from __future__ import annotations

from typing import Any, ClassVar

from rl_guards.config import RewardSanityConfig
from rl_guards.errors import ConfigError, RewardSanityError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rewards.sanity import check_reward_sanity, load_reward_cases, sanity_message


class RewardSanityGuard(Guard):
    """Scores the cases of ``reward_sanity.cases_file`` with the trainer's reward functions at train start.

    See :mod:`rl_guards.rewards.sanity` for the case format and the rule (``min(good) > max(bad)`` for every
    function that serves the case's task). Does nothing without a cases file.

    ======================================  ============================================================
    key                                     value
    ======================================  ============================================================
    ``rl_guards/reward_sanity/failures``    failing (function, case) pairs, plus tasks nothing scores
    ``rl_guards/reward_sanity/checked``     (function, case) pairs where the function serves the case
    ======================================  ============================================================

    Violation ``reward_sanity`` (:class:`~rl_guards.errors.RewardSanityError`, default mode raise) with the
    table of scores; when all pass, an ``info`` finding with the same table.
    """

    name: ClassVar[str] = "reward_sanity"
    config_field: ClassVar[str] = "reward_sanity"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: RewardSanityConfig

    def on_train_begin(self, report: Reporter) -> None:
        if not self.config.cases_file:
            return
        try:
            cases = load_reward_cases(self.config.cases_file)
        except (ConfigError, OSError, ValueError) as exc:  # a bad cases file is the user's to fix, not a guard bug
            report.violation(
                "cases_file",
                f"reward_sanity.cases_file {self.config.cases_file!r} could not be read: {exc}",
                RewardSanityError,
            )
            return
        weights = getattr(self.ctx.args, "reward_weights", None)
        if weights is not None and len(weights) != len(self.ctx.reward_funcs):
            weights = None
        result = check_reward_sanity(
            self.ctx.reward_funcs,
            cases,
            task_column=self.guards_config.tasks.task_column,
            weights=weights,
            shaping=self.config.shaping,
        )
        report.metric("failures", float(len(result.failures) + len(result.unserved_tasks)))
        report.metric("checked", float(sum(r.status != "not_served" for r in result.results)))
        if result.ok:
            report.info(
                "reward_sanity_ok", f"reward functions rank good above bad on {len(cases)} case(s):\n" + result.table()
            )
        else:
            report.violation("reward_sanity", sanity_message(result), RewardSanityError)
