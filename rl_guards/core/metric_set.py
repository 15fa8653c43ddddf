"""Which metrics reach the logs: a small default set, quiet when healthy; every metric with ``metrics.level: full``.

At the default level a metric is logged when its name is listed here:

- always: the few curves that show the run is watched and what it is made of;
- once it has been non-zero in the run (then at every step, so its curve has no holes): counts and shares that are
  zero on a healthy run (violations, holes, anomalies, cut texts, write errors), so W&B gains a panel only when
  something breaks;
- never, when it would repeat a metric TRL already logs (in a run with a single task, the per-task reward, dead
  share and truncated share equal TRL's ``reward``, ``frac_reward_zero_std`` and ``completions/clipped_ratio``).

Keys are ``<guard>/<metric>`` (without the ``rl_guards/`` prefix) and, per task, the metric after the task name.
Only rl_guards' own metrics are filtered: a guard of your own (any other guard name or per-task metric) logs
everything it reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rl_guards.core.metric_keys import METRIC_PREFIX, parse_task_metric_key

LEVELS = ("default", "full")

ALWAYS: frozenset[str] = frozenset(
    {
        "masking/checked_batches",  # the mask check runs (a cumulative count)
        "think_tags/thinking_share",  # the thinking / non-thinking mix
        "dead_groups/zero_adv_token_share",  # completion tokens that carry no gradient
    }
)
WHEN_NONZERO: frozenset[str] = frozenset(
    {
        "masking/violating_rows",
        "think_tags/anomalous_rate",
        "dead_groups/dead_tasks",
        "groups/mixed_groups",
        "routing/unscored_rows",
        "routing/misrouted_rows",
        "routing/unrouted_rows",
        "slicing/cut_completions",
        "slicing/cut_inputs",
        "slicing/length_caps",
        "rollouts/write_errors",
        "rollouts/dropped_dumps",
        "rollouts/repaired_rows",
        "preflight/blocking",
        "preflight/warnings",
        "reward_sanity/failures",
        "template/findings",
        "blind_judge/leak_rate",
        "probes/findings",
        "drift/alarms",
        "reward_errors/rows",
        "unpaid_rewards/unpaid",
    }
)
WHEN_NONZERO_SUFFIXES: tuple[str, ...] = ("/violations", "/internal_errors")
# rl_guards' own guards and reward wrappers (a new built-in guard adds its name here and its defaults above)
BUILTIN_GUARDS: frozenset[str] = frozenset(
    {"masking", "think_tags", "stray_think_penalty", "template", "tasks", "routing", "dead_groups", "truncation",
     "slicing", "rollouts", "preflight", "reward_sanity", "blind_judge", "probes", "reward_errors", "drift", "hook",
     "groups", "unpaid_rewards"}
)  # fmt: skip
BUILTIN_TASK_METRICS: frozenset[str] = frozenset(
    {"reward_mean", "reward_std", "completion_length", "rows", "groups", "dead_group_share", "dead_all_pass",
     "dead_all_fail", "live_groups", "zero_adv_token_share", "pass_rate", "expected_dead_share", "dead_streak",
     "truncated_rate", "nonfinite_rewards"}
)  # fmt: skip
BUILTIN_TASK_PREFIXES: tuple[str, ...] = ("think/", "reward/", "drift/")
TASK_ALWAYS: frozenset[str] = frozenset({"reward_mean", "pass_rate", "dead_group_share", "think/thinking_share"})
TASK_WHEN_NONZERO: frozenset[str] = frozenset(
    {"truncated_rate", "think/anomalous_rate", "drift/moved", "nonfinite_rewards"}
)
# per-task metric -> the TRL metric it equals when every row belongs to one task
TRL_TWINS_OF_ONE_TASK: dict[str, str] = {
    "reward_mean": "reward",
    "dead_group_share": "frac_reward_zero_std",
    "truncated_rate": "completions/clipped_ratio",
}


@dataclass
class MetricFilter:
    """Decides, per logged value, whether it reaches the logs (see the module docstring)."""

    level: str = "default"
    single_task: bool = False  # the run has no task column: per-task twins of TRL metrics are dropped
    # per-task metrics the driver's framework already logs per task (tinker-cookbook: env/<tag>/reward/total and
    # env/<tag>/by_group/frac_*): dropped at the default level
    framework_twins: frozenset[str] = frozenset()
    nonzero_seen: set[str] = field(default_factory=set)  # keys already non-zero in the run (state: survives resume)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"metric level must be one of {list(LEVELS)}, got {self.level!r}")

    def keep(self, key: str, value: float) -> bool:
        """True when ``key`` (a full ``rl_guards...`` key) with ``value`` is logged."""
        if self.level == "full":
            return True
        task = parse_task_metric_key(key)
        if task is not None:
            metric = task[1]
            if metric not in BUILTIN_TASK_METRICS and not metric.startswith(BUILTIN_TASK_PREFIXES):
                return True  # a guard of the user's own
            if self.single_task and metric in TRL_TWINS_OF_ONE_TASK:
                return False
            if metric in self.framework_twins:
                return False
            if metric in TASK_ALWAYS:
                return True
            return metric in TASK_WHEN_NONZERO and self._seen_nonzero(key, value)
        name = key.removeprefix(f"{METRIC_PREFIX}/")
        if name.split("/", 1)[0] not in BUILTIN_GUARDS:
            return True  # a guard of the user's own
        if name in ALWAYS:
            return True
        if name in WHEN_NONZERO or name.endswith(WHEN_NONZERO_SUFFIXES):
            return self._seen_nonzero(key, value)
        return False

    def _seen_nonzero(self, key: str, value: float) -> bool:
        if key not in self.nonzero_seen and value != 0 and value == value:  # NaN never counts as non-zero
            self.nonzero_seen.add(key)
        return key in self.nonzero_seen
