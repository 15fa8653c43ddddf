"""Group-size advisor: how many groups a task's pass rate leaves dead, and which group size fixes it.

Model: a binary reward, rollouts of a group independent, every prompt of the task passing with the same
probability ``p``. A group of ``G`` is dead (all pass or all fail, zero advantage) with probability
``p**G + (1 - p)**G``, which falls as ``G`` grows for ``0 < p < 1``.

Caveats, stated in every advice: prompts differ in difficulty; with per-prompt rates ``p_i`` the dead share
is the mean of ``p_i**G + (1 - p_i)**G``, which (the function being convex) is at least the value at the mean
rate, so this estimate is a lower bound when difficulty varies. A task whose prompts are each always solved
or never solved stays dead at every ``G``. For graded rewards ``p`` is the share of rollouts that reach the
task's best observed total, and the estimate is rougher still.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_GROUP_SIZE = 2  # GRPO needs two rollouts per prompt for a non-zero advantage
MAX_GROUP_SIZE = 64  # the advisor does not recommend more


def expected_dead_share(pass_rate: float, group_size: int) -> float:
    """``p**G + (1-p)**G``: probability that a group of ``G`` binary rollouts is all pass or all fail."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass_rate must be within [0, 1], got {pass_rate!r}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size!r}")
    return pass_rate**group_size + (1.0 - pass_rate) ** group_size


def smallest_group_size(pass_rate: float, target_dead_share: float, max_group_size: int = MAX_GROUP_SIZE) -> int | None:
    """Smallest ``G >= 2`` with expected dead share below ``target_dead_share``; None if no ``G <= max`` does."""
    for g in range(MIN_GROUP_SIZE, max_group_size + 1):
        if expected_dead_share(pass_rate, g) < target_dead_share:
            return g
    return None


@dataclass(frozen=True)
class GroupSizeAdvice:
    """The advisor's verdict for one task."""

    task: str
    pass_rate: float
    group_size: int  # current G
    expected_dead_share: float  # at the current G
    target_dead_share: float
    recommended: int | None  # smallest G under the target; None when no G <= MAX_GROUP_SIZE reaches it

    @property
    def ok(self) -> bool:
        return self.expected_dead_share < self.target_dead_share

    def message(self) -> str:
        head = (
            f"task {self.task!r}: pass rate {self.pass_rate:.2f}, group size {self.group_size} -> expected dead "
            f"share {self.expected_dead_share:.2f} (target < {self.target_dead_share:.2f})"
        )
        if self.ok:
            return f"{head}: fine."
        if self.recommended is None:
            hardness = "easy" if self.pass_rate >= 0.5 else "hard"
            return (
                f"{head}: no group size <= {MAX_GROUP_SIZE} brings it under the target; the task is too {hardness} "
                f"for the model: change the data (filter {'solved' if hardness == 'easy' else 'unsolvable'} prompts, "
                f"adjust difficulty) or drop the task."
            )
        return (
            f"{head}: num_generations={self.recommended} would bring it under the target "
            f"({expected_dead_share(self.pass_rate, self.recommended):.2f}; a lower bound when prompt difficulty "
            f"varies; keep the generation batch divisible by it)."
        )


def advise_group_size(
    task: str, pass_rate: float, group_size: int, target_dead_share: float, max_group_size: int = MAX_GROUP_SIZE
) -> GroupSizeAdvice:
    """Expected dead share at the current group size and the smallest group size meeting the target."""
    return GroupSizeAdvice(
        task=task,
        pass_rate=pass_rate,
        group_size=group_size,
        expected_dead_share=expected_dead_share(pass_rate, group_size),
        target_dead_share=target_dead_share,
        recommended=smallest_group_size(pass_rate, target_dead_share, max_group_size),
    )
