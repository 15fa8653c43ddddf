"""A batch's trajectory groups -> the engine's rows (:class:`~rl_guards.engine.assembly.LocalRows`).

One row per trajectory, group after group (rows ``g*G .. g*G+G-1`` are group ``g``): the initial observation is the
prompt, the sampled action tokens the completion (every turn's, concatenated), the sampler's ``stop_reason ==
"length"`` on any turn marks it truncated. Reward columns, so that their weighted sum is the cookbook's total reward
(``TrajectoryGroup.get_total_rewards``): ``env`` (the steps' rewards) and ``group`` (``compute_group_rewards``'s),
weight 1, and the stray-think penalty when it is on; the numeric step metrics an env reports (``correct``,
``format``) follow with weight 0, so that pass/fail judgements (a task's pass rate) can read them without moving
the total. The task of a group is its first ``logging_tags()`` entry, else the env's own ``task`` attribute (the
``tasks.task_column`` name), else ``tasks.default_task``. A ``ProblemEnv``'s question is the row's prompt text and
its reference answer the ``answer`` column (the reward probes call and quote them).

Each trajectory is recorded as the sampler produced it (:func:`record`) before the group's own
``compute_group_rewards`` runs, so that a grader that edits trajectories cannot hide what was sampled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_guards.core.datum_masks import LossRow, sampled_sequences
from rl_guards.core.think_markup import ThinkMarkup, prompts_open_block
from rl_guards.engine.assembly import LocalRows
from rl_guards.guards.base import RunContext

ENV_REWARD, GROUP_REWARD, PENALTY = "env", "group", "stray_think_penalty"
SKIPPED_METRIC_PREFIXES = ("stop/", "parse_error_masked", "rl_guards")  # one-hot stop reasons, masking flags, ours


@dataclass
class Rollout:
    """One trajectory as sampled: its turns' (observation, action) tokens, and what the env said of it."""

    turns: list[tuple[list[int], list[int]]]
    truncated: bool
    env_reward: float
    metrics: dict[str, float]
    env: Any = None
    error: str | None = None  # why the row cannot be read (an image observation, no turn)

    @property
    def prompt_ids(self) -> list[int]:
        return list(self.turns[0][0]) if self.turns else []

    @property
    def completion_ids(self) -> list[int]:
        return [t for _, ac in self.turns for t in ac]


@dataclass
class GroupResult:
    """One group of a batch: its rollouts, rewards, and the metric dicts it handed back to the cookbook."""

    position: int  # its place in the dataset's get_batch list
    task: str
    rollouts: list[Rollout]
    final_rewards: list[float]
    penalties: list[float] | None
    metric_dicts: list[dict[str, Any]]
    advantages: list[float]
    loss_rows: list[LossRow]
    grader_calls: list[Any] = field(default_factory=list)

    @property
    def totals(self) -> list[float]:
        """The cookbook's total reward per trajectory (steps' rewards plus the group reward)."""
        return [r.env_reward + f for r, f in zip(self.rollouts, self.final_rewards, strict=True)]

    @property
    def constant(self) -> bool:
        """All totals equal: the cookbook's ``remove_constant_reward_groups`` would drop the group."""
        totals = self.totals
        return all(t == totals[0] for t in totals)


def _tokens(model_input: Any) -> list[int]:
    """A ModelInput's tokens; ValueError when it holds something other than text."""
    out: list[int] = []
    for chunk in getattr(model_input, "chunks", []):
        tokens = getattr(chunk, "tokens", None)
        if tokens is None:
            raise ValueError(f"{type(chunk).__name__} chunks are not read by rl_guards yet (text only)")
        out.extend(int(t) for t in tokens)
    return out


def record(trajectory: Any, env: Any) -> Rollout:
    """A trajectory as the sampler produced it (copies: later edits to the trajectory do not reach it)."""
    metrics: dict[str, list[float]] = {}
    turns: list[tuple[list[int], list[int]]] = []
    error = None
    truncated = False
    reward = 0.0
    for transition in trajectory.transitions:
        reward += float(transition.reward)
        if transition.ac.stop_reason == "length":
            truncated = True
        for key, value in (transition.metrics or {}).items():
            if key.startswith(SKIPPED_METRIC_PREFIXES):
                continue
            if isinstance(value, int | float) and math.isfinite(float(value)):
                metrics.setdefault(key, []).append(float(value))
        try:
            turns.append((_tokens(transition.ob), [int(t) for t in transition.ac.tokens]))
        except ValueError as exc:
            error = str(exc)
    if not turns and error is None:
        error = "the trajectory has no turn"
    return Rollout(
        turns=turns,
        truncated=truncated,
        env_reward=reward,
        metrics={k: sum(v) / len(v) for k, v in metrics.items()},
        env=env,
        error=error,
    )


def expected_rows(rollouts: Sequence[Rollout]) -> list[LossRow]:
    """Per rollout: the sequences a trainer is given for it, with its sampled tokens marked (no datums yet)."""
    return [LossRow(sampled_sequences(r.turns)) for r in rollouts]


def task_of(builder: Any, env: Any, task_column: str, default_task: str) -> str:
    """The group's task: its first logging tag, else the env's own task attribute, else the default."""
    try:
        tags = list(builder.logging_tags() or [])
    except Exception:
        tags = []
    if tags:
        return str(tags[0])
    value = getattr(env, task_column, None)
    return value if isinstance(value, str) and value else default_task


def local_rows(
    step: int, groups: Sequence[GroupResult], ctx: RunContext, markup: ThinkMarkup, max_tokens: int, penalty: bool
) -> LocalRows:
    """The batch's rows, group after group, as the engine takes them (failed rows, skipped with a finding, when
    groups differ in size or a rollout cannot be read)."""
    sizes = {len(g.rollouts) for g in groups}
    rollouts = [r for g in groups for r in g.rollouts]
    errors = [r.error for r in rollouts if r.error]
    n = len(rollouts)
    if len(sizes) != 1 or errors:
        why = errors[0] if errors else f"groups of different sizes {sorted(sizes)} (an error-tolerant strategy)"
        return LocalRows.failed(step, "train", n, [[0.0]] * n, why)
    metric_names = sorted({k for r in rollouts for k in r.metrics})
    names = [ENV_REWARD, GROUP_REWARD] + ([PENALTY] if penalty else []) + metric_names
    weights = [1.0, 1.0] + ([1.0] if penalty else []) + [0.0] * len(metric_names)
    matrix: list[list[float]] = []
    for g in groups:
        for i, r in enumerate(g.rollouts):
            row = [r.env_reward, g.final_rewards[i]]
            if penalty:
                row.append(g.penalties[i] if g.penalties is not None else 0.0)
            row += [r.metrics.get(k, math.nan) for k in metric_names]
            matrix.append(row)
    prompts = [r.prompt_ids for r in rollouts]
    completions = [r.completion_ids for r in rollouts]
    texts = [ctx.decode_text(ids) if ctx.decode_text is not None else "" for ids in completions]
    calls = [c for g in groups for c in g.grader_calls]
    for row_index, call in enumerate(calls):  # a group numbers its own from 0
        call.row = row_index
        call.text = texts[row_index]
    return LocalRows(
        step=step,
        mode="train",
        num_generations=sizes.pop(),
        reward_names=names,
        reward_weights=weights,
        rewards=matrix,
        advantages=[a for g in groups for a in g.advantages],
        tasks=[g.task for g in groups for _ in g.rollouts],
        completions=texts,
        completion_ids=completions,
        prompt_ids=prompts,
        prompts=[_env_value(r.env, "get_question") for r in rollouts],
        truncated=[r.truncated for r in rollouts],
        thinking=[ctx.chat_template_kwargs.get("enable_thinking")] * n,
        prompt_opened=prompts_open_block(prompts, ctx.decode, markup),
        columns={"answer": [_env_value(r.env, "get_reference_answer") for r in rollouts]},
        max_completion_length=int(max_tokens),
        decode=ctx.decode,
        reward_inputs=calls,
        loss_inputs=[row for g in groups for row in g.loss_rows],
    )


def _env_value(env: Any, getter: str) -> Any:
    """A ProblemEnv's question or reference answer (None where the env has none, or it raises)."""
    get = getattr(env, getter, None)
    try:
        value = get() if callable(get) else None
    except Exception:
        return None
    return value if isinstance(value, str | int | float) else None


__all__ = [
    "ENV_REWARD",
    "GROUP_REWARD",
    "PENALTY",
    "GroupResult",
    "Rollout",
    "expected_rows",
    "local_rows",
    "record",
    "task_of",
]
