"""The wrappers rl_guards puts in a cookbook config: a dataset builder (chz, like every cookbook builder), its
dataset, and a group builder around each of the recipe's ``EnvGroupBuilder``s.

Nothing of the cookbook is patched: ``Config.dataset_builder`` is replaced by :class:`GuardedDatasetBuilder`
(``inner`` is the recipe's builder, which builds the data as before), whose dataset hands out
:class:`GuardedGroupBuilder`s. Those delegate ``make_envs``, ``logging_tags`` and ``cleanup`` and, in
``compute_group_rewards``, record the group as sampled, call the recipe's own ``compute_group_rewards`` and give
the group to the run (:mod:`rl_guards.tinker.run`). They hold only the run's id (the group builders stay picklable,
as the cookbook requires); in a process where the run does not live (a rollout executor's worker), a wrapper is a
plain pass-through and says so once.

``config.json`` shows the wrapper with the recipe's builder under ``inner``; every field below is serialisable, so a
config written out and read back (or given on a command line) makes the same run: a builder whose run is not in
this process makes it from these fields on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chz
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, Trajectory

from rl_guards.config import GuardsConfig
from rl_guards.tinker.run import RunSpec, TinkerRun, live_run

logger = logging.getLogger("rl_guards")
_warned_missing: set[str] = set()


@chz.chz
class GuardedDatasetBuilder(RLDatasetBuilder):
    """The recipe's dataset builder, with rl_guards on every batch it hands out."""

    # The recipe's own dataset builder (it builds the data; rl_guards only wraps what it returns).
    inner: RLDatasetBuilder
    # Which run of this process the batches report to (made from the fields below when absent).
    run_id: str
    # The run's folder (the cookbook's Config.log_path): dumps and findings go to <log_path>/rl_guards/.
    log_path: str
    # The model and renderer the loop samples with (the cookbook's Config.model_name / renderer_name).
    model_name: str
    renderer_name: str | None = None
    # The sampling cap (the cookbook's Config.max_tokens): truncation is judged against it.
    max_tokens: int = 0
    # The loop drops groups with one reward (Config.remove_constant_reward_groups): rl_guards still sees them.
    remove_constant_reward_groups: bool = False
    # The guards config as a nested dict (GuardsConfig.to_dict()); None: every guard with its defaults.
    guards: dict[str, Any] | None = None
    # A guards YAML file and section.field=value overrides, applied after `guards` (rl-guards' own precedence).
    guards_config: str | None = None
    guards_set: list[str] = chz.field(default_factory=list)
    # Add rl_guards' stray-think penalty to every group's rewards (stray_think_penalty section: weight, codes).
    stray_think_penalty: bool = False
    # The loop trains synchronously (no async_config / stream_minibatch_config).
    sync: bool = True

    def run(self) -> TinkerRun:
        """The run these batches report to (made now when this process has none with this id)."""
        run = live_run(self.run_id)
        if run is None:
            config = GuardsConfig.layered(self.guards, self.guards_config, list(self.guards_set) or None)
            spec = RunSpec(self.log_path, self.model_name, self.renderer_name, self.max_tokens,
                           self.remove_constant_reward_groups, self.sync)  # fmt: skip
            run = TinkerRun(config, spec, run_id=self.run_id, stray_think_penalty=self.stray_think_penalty)
        return run

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train, test = await self.inner()
        run = self.run()
        run.start(*_tokenizer_and_renderer(self))
        return GuardedDataset(train, self.run_id), test


def _tokenizer_and_renderer(builder: GuardedDatasetBuilder) -> tuple[Any, Any]:
    """The tokenizer (the cookbook's get_tokenizer, as the loop loads it) and the run's renderer."""
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tokenizer = get_tokenizer(builder.model_name)
    renderer = None
    name = builder.renderer_name
    if name is None:
        try:
            from tinker_cookbook import model_info

            name = model_info.get_recommended_renderer_name(builder.model_name)
        except Exception:
            name = None
    if name is not None:
        from tinker_cookbook import renderers

        try:
            renderer = renderers.get_renderer(name, tokenizer)
        except Exception as exc:  # a renderer only the recipe knows: the envs' own renderer is read at train start
            logger.info("rl_guards: renderer %r not built here (%s); the envs' renderer is used", name, exc)
    return tokenizer, renderer


class GuardedDataset(RLDataset):
    """The recipe's dataset; each batch's group builders wrapped."""

    def __init__(self, inner: RLDataset, run_id: str) -> None:
        self.inner = inner
        self.run_id = run_id

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        builders = list(self.inner.get_batch(index))
        run = live_run(self.run_id)
        if run is None:
            return builders
        step = run.next_batch(len(builders))
        return [GuardedGroupBuilder(b, self.run_id, step, i) for i, b in enumerate(builders)]

    def __len__(self) -> int:
        return len(self.inner)


@dataclass(frozen=True)
class GuardedGroupBuilder(EnvGroupBuilder):
    """One of the recipe's group builders; reports its group to the run in ``compute_group_rewards``."""

    inner: EnvGroupBuilder
    run_id: str
    step: int
    position: int

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Any]]:
        run = live_run(self.run_id)
        if run is None:
            if self.run_id not in _warned_missing:
                _warned_missing.add(self.run_id)
                logger.warning(
                    "rl_guards: run %s does not live in this process (a rollout executor's worker?): its groups "
                    "are not checked here",
                    self.run_id,
                )
            return await self.inner.compute_group_rewards(trajectory_group, env_group)
        rollouts = run.record_group(self.step, trajectory_group, env_group)
        out = await self.inner.compute_group_rewards(trajectory_group, env_group)
        return run.group_done(self.step, self.position, self.inner, trajectory_group, env_group, rollouts, out)

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()


__all__ = ["GuardedDataset", "GuardedDatasetBuilder", "GuardedGroupBuilder"]
