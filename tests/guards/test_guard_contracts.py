"""Contract tests over every registered guard (found by introspection of the registry)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rl_guards.config import GuardConfig, GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import Guard, GuardSession, RunContext, run_hook
from rl_guards.guards.registry import BATCH_GUARDS, TINKER_GUARDS

# every guard of every driver's list (two guards may share a concept's name across drivers: "masking")
GUARDS = sorted(set(BATCH_GUARDS) | set(TINKER_GUARDS), key=lambda cls: (cls.name, cls.__name__))


def _batch(step: int = 0) -> RolloutBatch:
    """A small, plausible two-task batch: one live group, one dead group."""
    return RolloutBatch(
        step=step,
        mode="train",
        num_generations=2,
        reward_names=["r"],
        reward_weights=[1.0],
        rewards=[[1.0], [0.0], [1.0], [1.0]],
        advantages=[0.7, -0.7, 0.0, 0.0],
        tasks=["a", "a", "b", "b"],
        completions=["<think>x</think>yes", "no", "ok", "ok"],
        completion_ids=[[1, 2, 9], [3, 9], [4, 9], [4, 9]],
        prompt_ids=[[5, 6], [5, 6], [7], [7]],
        truncated=[False, False, False, False],
        thinking=[True, False, None, None],
        max_completion_length=16,
    )


@pytest.mark.parametrize("registry", [BATCH_GUARDS, TINKER_GUARDS], ids=["trl", "tinker"])
def test_registry_names_are_unique_and_match_config_sections(registry: list[type[Guard]]) -> None:
    names = [cls.name for cls in registry]
    assert len(names) == len(set(names))
    sections = {f.name for f in dataclasses.fields(GuardsConfig)}
    for cls in registry:
        assert cls.name, cls
        assert cls.config_field in sections, f"{cls.__name__}.config_field={cls.config_field!r} not in GuardsConfig"


@pytest.mark.parametrize("cls", GUARDS, ids=lambda c: c.__name__)
def test_guard_is_documented_and_configurable(cls: type[Guard]) -> None:
    assert issubclass(cls, Guard)
    assert cls.__doc__ and len(cls.__doc__.strip()) > 20, f"{cls.__name__} needs a docstring"
    config = GuardsConfig()
    guard = cls(config)
    assert isinstance(guard.config, GuardConfig)
    assert guard.config.mode in ("raise", "warn", "log")
    disabled = GuardsConfig.from_dict({cls.config_field: {"enabled": False}})
    assert cls(disabled).enabled is False


@pytest.mark.parametrize("cls", GUARDS, ids=lambda c: c.__name__)
def test_guard_metrics_are_namespaced_and_state_round_trips(cls: type[Guard], tmp_path: Path) -> None:
    config = GuardsConfig.from_dict({cls.config_field: {"mode": "log"}})
    guard = cls(config)
    guard.setup(RunContext(output_dir=str(tmp_path)))
    session = GuardSession()
    run_hook(guard, "on_train_begin", session, 0)
    for step in range(3):
        run_hook(guard, "on_batch", session, step, _batch(step))
    run_hook(guard, "on_save", session, 3, str(tmp_path / "checkpoint-3"))
    run_hook(guard, "on_train_end", session, 3)
    assert (cls.name, "internal_error") not in session.counts, session.findings
    for key in session.pop_metrics():
        assert key.startswith((f"rl_guards/{cls.name}/", "rl_guards_task/")), key

    state = guard.state_dict()
    text = json.dumps(state)  # JSON-serialisable, so it fits trainer_state.json
    fresh = cls(config)
    fresh.setup(RunContext(output_dir=str(tmp_path)))
    fresh.load_state_dict(json.loads(text))
    assert fresh.state_dict() == state


# Public attributes of a guard that are not hooks: identity, config and declared feature names (data, not calls).
NOT_HOOKS = {
    "name", "config_field", "enabled", "FEATURES", "TENSOR_FEATURES", "HOOKS", "COLLECTIVE_HOOKS", "MAX_PENDING",
}  # fmt: skip


def test_the_base_class_declares_every_hook() -> None:
    for hook in Guard.HOOKS:
        assert callable(getattr(Guard, hook, None)), f"Guard.{hook} is in HOOKS but not defined"
    public = {n for n in dir(Guard) if not n.startswith("_")}
    assert public - NOT_HOOKS == set(Guard.HOOKS)


@pytest.mark.parametrize("cls", GUARDS, ids=lambda c: c.__name__)
def test_every_public_method_is_a_declared_hook(cls: type[Guard]) -> None:
    """The driver calls hooks only (no hasattr discovery): a guard's other methods are its own (private)."""
    import inspect

    extra = []
    for name, value in inspect.getmembers(cls):
        if name.startswith("_") or name in NOT_HOOKS or isinstance(value, property) or name.isupper():
            continue
        if callable(value) and name not in Guard.HOOKS:
            extra.append(name)
    assert extra == [], f"{cls.__name__}: public methods that are not hooks: {extra}"
    for hook in Guard.HOOKS:  # an overridden hook keeps the base signature's parameters
        mine, base = inspect.signature(getattr(cls, hook)), inspect.signature(getattr(Guard, hook))
        assert list(mine.parameters) == list(base.parameters), f"{cls.__name__}.{hook}{mine} vs Guard{base}"


@pytest.mark.parametrize("cls", GUARDS, ids=lambda c: c.name)
def test_collective_hooks_are_hooks_the_guard_implements(cls: type[Guard]) -> None:
    """The driver runs these in lockstep sections: a name that is no hook of the guard would leave one unguarded."""
    for hook in cls.COLLECTIVE_HOOKS:
        assert hook in Guard.HOOKS and overrides_hook(cls, hook), f"{cls.__name__}.COLLECTIVE_HOOKS: {hook}"


def overrides_hook(cls: type[Guard], hook: str) -> bool:
    return getattr(cls, hook) is not getattr(Guard, hook)


def test_the_engine_calls_only_declared_hooks() -> None:
    import re

    import rl_guards.engine as engine

    called = set()
    for path in Path(engine.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        hook_call = r'(?:run_hook\(guard, |self\._run\(|overrides\([a-z]+, |_dispatch\()"([a-z_]+)"'
        called |= set(re.findall(hook_call, text))
        called |= set(re.findall(r"\b(?:g|guard|verdicts\[0\])\.([a-z_]+)\(", text))
    assert {"on_batch", "after_batch", "check_tensors", "before_save"} <= called, sorted(called)
    assert called <= set(Guard.HOOKS) | {"name"}, sorted(called - set(Guard.HOOKS))
