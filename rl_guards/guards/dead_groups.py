"""Dead groups per task: groups with zero advantage, and tasks that stopped contributing gradient."""

from __future__ import annotations

import copy
import shlex
from typing import Any, ClassVar

from rl_guards.config import DeadGroupsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.group_size import advise_group_size, expected_dead_share
from rl_guards.core.groups import (
    REWARD_ATOL,
    TaskGroups,
    group_outcomes,
    outcome_passes,
    update_outcome_values,
    update_ranges,
)
from rl_guards.core.metric_keys import decode_task, encode_task
from rl_guards.errors import DeadGradientError
from rl_guards.guards.base import Guard, Reporter


class DeadGroupGuard(Guard):
    """Per task and batch: how many groups are dead (all totals equal, zero advantage), and why.

    Definitions (see :mod:`rl_guards.core.groups`): a group is dead when its rollouts' total rewards (TRL's
    weighted sum, None as 0) are all equal; *all pass* / *all fail* when that value is the top / bottom of the
    task's range observed so far in the run. The pass rate of a task is what its pass/fail reward functions say
    (see ``pass_rate`` below), over its last ``warn_after_steps`` train batches; shaped terms (a length penalty)
    do not move it.

    Per task, ``rl_guards_task/<task>/...``:

    ==========================  ===================================================================================
    key                         value
    ==========================  ===================================================================================
    ``dead_group_share``        share of the task's groups that are dead
    ``dead_all_pass``           share of its groups dead at the top of the range (too easy for this group size)
    ``dead_all_fail``           share of its groups dead at the bottom (too hard)
    ``live_groups``             groups with a non-zero advantage
    ``zero_adv_token_share``    share of the task's completion tokens whose row has zero advantage
    ``pass_rate``               share of the task's judged rows that passed (recent window): judged by its
                                pass/fail reward functions (those that gave it exactly two distinct scores so
                                far), passed when each gave its higher score; not logged while it has none
    ``expected_dead_share``     ``p**G + (1-p)**G`` at the current group size (the advisor, binary model)
    ``dead_streak``             consecutive train batches in which the task had no live group
    ==========================  ===================================================================================

    Global: ``rl_guards/dead_groups/dead_tasks`` (tasks whose streak reached ``warn_after_steps``),
    ``rl_guards/dead_groups/zero_adv_token_share``.

    Violation ``dead_task`` (:class:`~rl_guards.errors.DeadGradientError`) when a task had no live group for
    ``warn_after_steps`` consecutive train batches (batches without the task neither count nor reset); once per
    streak. Violation ``dead_share`` (same error) when a task still has live groups but more than
    ``dead_groups.max_dead_share`` of its groups were dead over its last ``warn_after_steps`` train batches, with
    the group-size advice; once until the share falls back. Eval batches are measured but do not touch the state;
    batches with one generation per prompt are skipped. At the end of training one ``group_size_advice`` finding
    lists the advisor's verdict for every task. Streaks, ranges, recent pass rates and dead shares survive a resume.
    """

    name: ClassVar[str] = "dead_groups"
    config_field: ClassVar[str] = "dead_groups"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: DeadGroupsConfig
        self.streaks: dict[str, int] = {}  # task -> consecutive train batches without a live group
        self.ranges: dict[str, list[float]] = {}  # task -> observed [low, high] total reward
        self.windows: dict[str, list[list[int]]] = {}  # task -> recent [passed, judged rows] per train batch
        # task -> reward function -> distinct scores seen (pass/fail functions give exactly two)
        self.outcome_values: dict[str, dict[str, list[float]]] = {}
        self.group_size: int = 0  # num_generations of the last train batch
        self.dead_windows: dict[str, list[list[int]]] = {}  # task -> recent [dead groups, groups] per train batch
        self.crowded: set[str] = set()  # tasks whose recent dead share is above max_dead_share (warned)

    # ----- per batch --------------------------------------------------------------------------------------
    def _pass_rate(self, task: str) -> float | None:
        """Pass rate of ``task`` over the recent window (None before any row)."""
        window = self.windows.get(task) or []
        rows = sum(n for _, n in window)
        return sum(p for p, _ in window) / rows if rows else None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if batch.num_generations < 2:  # e.g. eval with one generation per prompt: no groups to speak of
            return
        train = batch.mode == "train"
        totals = batch.weighted_totals  # trl_totals(batch), as the array it is made from
        ranges = self.ranges if train else copy.deepcopy(self.ranges)
        update_ranges(ranges, batch, totals)
        stats = group_outcomes(batch, ranges, totals)
        if train:
            update_outcome_values(self.outcome_values, batch)
        for task, (passed, judged) in outcome_passes(batch, self.outcome_values).items():
            stats[task].pass_rows, stats[task].judged = passed, judged
        if train:
            self.group_size = batch.num_generations
            self._update_state(stats)
        all_tokens = sum(s.tokens for s in stats.values())
        zero_tokens = sum(s.zero_adv_tokens for s in stats.values())
        report.metric("zero_adv_token_share", zero_tokens / all_tokens if all_tokens else 0.0)
        for task, s in stats.items():
            self._log_task(task, s, batch, report)
        threshold = self.config.warn_after_steps
        report.metric("dead_tasks", float(sum(1 for n in self.streaks.values() if n >= threshold)))
        if train:
            for task, s in stats.items():
                if s.groups and self.streaks.get(task) == threshold:
                    report.violation("dead_task", self._dead_message(task, s, batch), DeadGradientError)
                elif s.groups:
                    self._check_dead_share(task, batch, report)

    def _check_dead_share(self, task: str, batch: RolloutBatch, report: Reporter) -> None:
        """Most groups of a task dead over the last ``warn_after_steps`` batches (some still live): warned once per
        episode, with the group-size advice."""
        window = self.dead_windows.get(task) or []
        groups = sum(g for _, g in window)
        share = sum(d for d, _ in window) / groups if groups else 0.0
        if len(window) < self.config.warn_after_steps or share <= self.config.max_dead_share:
            self.crowded.discard(task)
            return
        if task in self.crowded:
            return
        self.crowded.add(task)
        rate = self._pass_rate(task)
        advice = (
            advise_group_size(task, rate, batch.num_generations, self.config.target_dead_share).message()
            if rate is not None
            else ""
        )
        report.violation(
            "dead_share",
            f"task {task!r}: {share:.0%} of its groups were dead (zero advantage) over the last {len(window)} batches "
            f"({groups} groups, G={batch.num_generations}), above dead_groups.max_dead_share "
            f"{self.config.max_dead_share:.0%}: most of its rollouts teach nothing. {advice} Fix: raise "
            "num_generations, rebalance the task's difficulty, or check its reward if it rarely varies.",
            DeadGradientError,
        )

    def _update_state(self, stats: dict[str, TaskGroups]) -> None:
        for task, s in stats.items():
            if not s.groups:
                continue
            self.streaks[task] = self.streaks.get(task, 0) + 1 if s.live == 0 else 0
            window = self.windows.setdefault(task, [])
            window.append([s.pass_rows, s.judged])
            del window[: -self.config.warn_after_steps]
            dead = self.dead_windows.setdefault(task, [])
            dead.append([s.dead, s.groups])
            del dead[: -self.config.warn_after_steps]

    def _log_task(self, task: str, s: TaskGroups, batch: RolloutBatch, report: Reporter) -> None:
        if s.groups:
            report.task_metric(task, "dead_group_share", s.share(s.dead))
            report.task_metric(task, "dead_all_pass", s.share(s.dead_all_pass))
            report.task_metric(task, "dead_all_fail", s.share(s.dead_all_fail))
            report.task_metric(task, "live_groups", float(s.live))
        report.task_metric(task, "zero_adv_token_share", s.zero_adv_token_share)
        rate = self._pass_rate(task) if batch.mode == "train" else s.pass_rate
        if rate is not None:
            report.task_metric(task, "pass_rate", rate)
            report.task_metric(task, "expected_dead_share", expected_dead_share(rate, batch.num_generations))
        if batch.mode == "train":
            report.task_metric(task, "dead_streak", float(self.streaks.get(task, 0)))

    def _dead_message(self, task: str, s: TaskGroups, batch: RolloutBatch) -> str:
        rate = self._pass_rate(task)
        low, high = self.ranges[task]
        head = (
            f"task {task!r} contributed no gradient for {self.streaks[task]} consecutive batches (step {batch.step}): "
            f"in every group all rollouts got the same total reward, so every advantage is zero."
        )
        if high - low <= REWARD_ATOL:
            # A reward that never varied is more often a broken or constant reward than a task too easy or too
            # hard: that comes first, the group-size advice only after it.
            lines = [
                f"{head} Every rollout of the task so far got the same total, {high:g}: first check the reward "
                "function, it may be broken or constant for this task (a parse that always fails, a wrong dataset "
                "column, the task routed to a function that does not score it). Score a few of these completions by "
                f"hand (`rl-guards rollouts {self._run_folder()} show --step {batch.step} --task {shlex.quote(task)}`)."
            ]
            if rate is not None:
                advice = advise_group_size(task, rate, batch.num_generations, self.config.target_dead_share)
                lines.append("Only if the reward can vary: " + advice.message())
            lines.append(
                "Fix: the reward function first; then num_generations or the task's difficulty (or drop the task)."
            )
            return "\n".join(lines)
        else:
            detail = (
                f" Last batch: {s.groups} group(s): {s.dead_all_pass} all at the best total seen ({high:g}), "
                f"{s.dead_all_fail} all at the worst ({low:g}), {s.dead_other} all at another value."
            )
        if rate is not None:
            detail += f" Recent pass rate {rate:.2f}."
        lines = [head + detail]
        if rate is not None:
            advice = advise_group_size(task, rate, batch.num_generations, self.config.target_dead_share)
            lines.append("Advisor: " + advice.message())
        lines.append(
            "Fix: if the reward cannot vary on this task (a constant or broken reward function), fix the reward; "
            "otherwise raise num_generations or rebalance the task's difficulty."
        )
        return "\n".join(lines)

    # ----- end of run -------------------------------------------------------------------------------------
    def _advice_text(self) -> str:
        """The advisor's verdict for every task seen in training (empty if none)."""
        lines = []
        for task in sorted(self.windows):
            rate = self._pass_rate(task)
            if rate is None or self.group_size < 2:
                continue
            advice = advise_group_size(task, rate, self.group_size, self.config.target_dead_share).message()
            low, high = self.ranges.get(task, [0.0, 0.0])
            if high - low <= REWARD_ATOL:  # the reward never varied: that comes before any group-size advice
                advice = (
                    f"{task}: every rollout got the total {high:g}: check the task's reward function first (it may be "
                    f"broken or constant). Only if it can vary: {advice}"
                )
            lines.append("  " + advice)
        return (
            "group-size advice (binary-reward model, lower bound when prompt difficulty varies):\n" + "\n".join(lines)
            if lines
            else ""
        )

    def on_train_end(self, report: Reporter) -> None:
        text = self._advice_text()
        if text:
            report.note("group_size_advice", text)

    # ----- resume -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # Task labels as key segments: the capped-tasks bucket and every name survive the JSON round trip.
        return {
            "streaks": {encode_task(t): n for t, n in self.streaks.items()},
            "ranges": {encode_task(t): list(r) for t, r in self.ranges.items()},
            "windows": {encode_task(t): [list(x) for x in w] for t, w in self.windows.items()},
            "group_size": self.group_size,
            "dead_windows": {encode_task(t): [list(x) for x in w] for t, w in self.dead_windows.items()},
            "crowded": sorted(encode_task(t) for t in self.crowded),
            "outcome_values": {encode_task(t): v for t, v in self.outcome_values.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streaks = {decode_task(t): int(n) for t, n in state.get("streaks", {}).items()}
        self.ranges = {decode_task(t): [float(r[0]), float(r[1])] for t, r in state.get("ranges", {}).items()}
        self.windows = {decode_task(t): [[int(p), int(n)] for p, n in w] for t, w in state.get("windows", {}).items()}
        self.group_size = int(state.get("group_size", 0))
        dead = state.get("dead_windows", {})
        self.dead_windows = {decode_task(t): [[int(d), int(g)] for d, g in w] for t, w in dead.items()}
        self.crowded = {decode_task(t) for t in state.get("crowded", [])}
        self.outcome_values = {
            decode_task(t): {str(f): [float(x) for x in xs] for f, xs in dict(v).items()}
            for t, v in dict(state.get("outcome_values") or {}).items()
        }
