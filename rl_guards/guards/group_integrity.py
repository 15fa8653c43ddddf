"""Group integrity: stops a run whose groups hold rollouts of different prompts."""

from __future__ import annotations

from typing import ClassVar

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.group_prompts import mixed_groups, prompt_key
from rl_guards.core.templates import visible_tail
from rl_guards.errors import GroupIntegrityError
from rl_guards.guards.base import Guard, Reporter

PROMPT_CHARS = 160  # characters of each differing prompt's end shown


class GroupIntegrityGuard(Guard):
    """Every rollout of a group must answer the same prompt (its initial observation, token for token).

    Advantages are centred within a group; a group of different problems compares unlike rollouts
    (:mod:`rl_guards.core.group_prompts`). Each row's prompt ids are digested where the row is held and the digests
    travel with the batch's numbers, so the check sees every rank's rows.

    =====================================  ==========================================================
    key                                    value
    =====================================  ==========================================================
    ``rl_guards/groups/mixed_groups``      groups of the batch whose rollouts answered different prompts
    =====================================  ==========================================================

    Violation ``mixed_group`` (:class:`~rl_guards.errors.GroupIntegrityError`), with the differing prompts.
    """

    name: ClassVar[str] = "groups"
    config_field: ClassVar[str] = "groups"
    FEATURES: ClassVar[tuple[str, ...]] = ("prompt_key",)

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        return {"prompt_key": [prompt_key(batch.prompt_ids[row]) for row in batch.held_rows]}

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        keys = batch.feature("groups/prompt_key")
        if keys is None or batch.num_generations < 2:
            return
        mixed = mixed_groups(keys, batch.num_generations)
        report.metric("mixed_groups", float(len(mixed)))
        if mixed:
            shown = [row for group in mixed[:2] for row in group[:2]]
            report.violation("mixed_group", lambda: self._message(batch, mixed), GroupIntegrityError, rows=shown)

    def _message(self, batch: RolloutBatch, mixed: list[list[int]]) -> str:
        g = batch.num_generations
        lines = [
            f"{len(mixed)} of {batch.num_groups} groups (G={g}) at step {batch.step} hold rollouts of different "
            "prompts: their advantages compare unlike problems (a rollout scores above its group's mean because its "
            "question was easier, not because its answer was better)."
        ]
        decode = self.ctx.decode or batch.decode
        for group in mixed[:2]:
            lines.append(f"  group {group[0] // g} (rows {min(group)}..{max(group)}):")
            for row in group[:2]:
                ids = batch.prompt_ids[row]
                text = decode(ids) if decode is not None and ids else f"{len(ids)} prompt tokens"
                lines.append(f"    row {row} prompt ends {visible_tail(str(text), width=PROMPT_CHARS)}")
        lines.append(
            "Fix: every env of a group must be built for the same problem: make the group builder's make_envs "
            "return num_envs copies of one problem (tinker-cookbook's ProblemGroupBuilder(env_thunk=partial(Env, "
            "problem), num_envs=G)), not one env per dataset row; a group of one problem per env is a batch, not a "
            "group."
        )
        return "\n".join(lines)



__all__ = ["GroupIntegrityGuard"]
