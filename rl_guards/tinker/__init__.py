"""rl_guards in tinker-cookbook RL loops: the same guards as for TRL, in one line.

::

    from tinker_cookbook.rl import train
    import rl_guards.tinker

    config = train.Config(...)                                   # the recipe's config, as before
    config, run = rl_guards.tinker.guard(config)                 # the one line
    asyncio.run(run.main())                                      # train.main(config), then the guards' end
    print(run.summary())

``guard`` swaps ``config.dataset_builder`` for :class:`~rl_guards.tinker.dataset.GuardedDatasetBuilder` (the recipe's
builder inside it; nothing of the cookbook is patched). Metrics reach the cookbook's own logger (``metrics.jsonl``,
W&B, ...) as ``env/all/rl_guards/<guard>/<metric>`` and ``env/all/rl_guards_task/<task>/<metric>``; findings are
written to ``<log_path>/rl_guards/findings.jsonl`` as they happen, rollout dumps next to them
(``rl-guards rollouts <log_path>/rl_guards list``). A guard in raise mode ends the loop with its own error before
the failing batch trains. Details and the key mapping: ``docs/tinker.md``.

The local backend (dry runs on CPU, no Tinker account) is :mod:`rl_guards.tinker.backend`; ``guard(...,
backend=local)`` also checks the datums it receives, as sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl_guards.config import GuardsConfig
    from rl_guards.tinker.dataset import GuardedDatasetBuilder
    from rl_guards.tinker.run import TinkerRun


def guard(
    config: Any,
    guards_config: GuardsConfig | dict[str, Any] | str | None = None,
    *,
    backend: Any = None,
    stray_think_penalty: bool = False,
    guards_set: list[str] | None = None,
) -> tuple[Any, TinkerRun]:
    """The cookbook ``Config`` with rl_guards on its dataset, and the run's handle.

    ``guards_config``: a GuardsConfig, a dict or a YAML path (default: every guard with its defaults); ``guards_set``:
    ``section.field=value`` overrides. ``backend``: a running :class:`~rl_guards.tinker.backend.LocalTinker` whose
    received datums are checked as sent (the config's ``base_url`` is set to it when unset). ``stray_think_penalty``:
    add rl_guards' stray-think penalty to every group's rewards (the ``stray_think_penalty`` section's weight).
    """
    import chz

    from rl_guards.config import GuardsConfig
    from rl_guards.errors import ConfigError
    from rl_guards.tinker.dataset import GuardedDatasetBuilder
    from rl_guards.tinker.run import RunSpec, TinkerRun

    if isinstance(config.dataset_builder, GuardedDatasetBuilder):
        raise ConfigError("rl_guards is already on this config's dataset; call rl_guards.tinker.guard() once")
    if guards_config is None:
        guards = GuardsConfig()
    elif isinstance(guards_config, GuardsConfig):
        guards = guards_config
    elif isinstance(guards_config, dict):
        guards = GuardsConfig.from_dict(guards_config)
    elif isinstance(guards_config, str):
        guards = GuardsConfig.from_yaml(guards_config)
    else:
        kind = type(guards_config).__name__
        raise ConfigError(f"guards_config must be a GuardsConfig, dict or YAML path, got {kind}")
    if guards_set:
        guards = guards.with_overrides(list(guards_set))
    guards.validate()
    sync = getattr(config, "async_config", None) is None and getattr(config, "stream_minibatch_config", None) is None
    spec = RunSpec(
        log_path=str(config.log_path),
        model_name=str(config.model_name),
        renderer_name=getattr(config, "renderer_name", None),
        max_tokens=int(config.max_tokens),
        remove_constant_reward_groups=bool(getattr(config, "remove_constant_reward_groups", False)),
        sync=sync,
    )
    run = TinkerRun(guards, spec, stray_think_penalty=stray_think_penalty)
    builder = GuardedDatasetBuilder(
        inner=config.dataset_builder,
        run_id=run.run_id,
        log_path=spec.log_path,
        model_name=spec.model_name,
        renderer_name=spec.renderer_name,
        max_tokens=spec.max_tokens,
        remove_constant_reward_groups=spec.remove_constant_reward_groups,
        guards=guards.to_dict(),
        stray_think_penalty=stray_think_penalty,
        sync=sync,
    )
    changes: dict[str, Any] = {"dataset_builder": builder}
    if backend is not None:
        run.attach(backend)
        if getattr(config, "base_url", None) is None:
            changes["base_url"] = backend.url
    config = chz.replace(config, **changes)
    run.cookbook_config = config
    return config, run


def __getattr__(name: str) -> Any:
    if name in ("GuardedDatasetBuilder", "GuardedDataset", "GuardedGroupBuilder"):
        from rl_guards.tinker import dataset

        return getattr(dataset, name)
    if name in ("TinkerRun", "RunSpec"):
        from rl_guards.tinker import run

        return getattr(run, name)
    if name == "GraderCall":
        from rl_guards.tinker.graders import GraderCall

        return GraderCall
    raise AttributeError(f"module 'rl_guards.tinker' has no attribute {name!r}")


__all__ = ["GraderCall", "GuardedDatasetBuilder", "RunSpec", "TinkerRun", "guard"]
