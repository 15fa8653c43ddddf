"""rl_guards' settings in a verl config: the ``reward.rl_guards`` section, read the same way by the reward manager
(in every reward worker) and by the trainer-side hook.

::

    reward:
      reward_manager: {source: importlib, name: GuardedRewardManager, module: {path: pkg://rl_guards.verl}}
      rl_guards:
        inner: naive                 # verl's own reward-loop manager that scores (naive, dapo, gdpo, ...)
        config: guards.yaml          # optional: a guards YAML (as for `rl-guards grpo --guards_config`)
        set: [routing.mode=warn]     # optional: section.field=value overrides, applied last
        output_dir: null             # default: trainer.default_local_dir (findings and dumps go to <dir>/rl_guards)
        score_terms: []              # [stray_think_penalty]: add the penalty (its section's weight) to the reward
        think_tags: {mode: warn}     # any guards section inline, as in a guards YAML

Precedence, field by field: the inline sections < the ``config`` file < ``set`` (as ``rl-guards grpo``: the YAML's
``guards:`` section < ``--guards_config`` < ``--guards_set``). With Hydra, keys rl_guards does not know are added
with ``+``: ``+reward.rl_guards.inner=dapo``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.errors import ConfigError

SECTION = "rl_guards"  # under the verl config's ``reward``
DRIVER_KEYS = ("inner", "inner_module", "inner_name", "config", "set", "output_dir", "score_terms")
GUARDS_DIR = "rl_guards"  # under the run's folder: findings.jsonl, rollouts/, the saved state


def plain(value: Any) -> Any:
    """A DictConfig / ListConfig (resolved) or a plain value, as plain Python containers."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # a plain dict from a test or a script
        pass
    return value


def select(config: Any, path: str, default: Any = None) -> Any:
    """``config.a.b.c`` for a DictConfig or nested dicts; ``default`` where a key is missing or null."""
    node = config
    for key in path.split("."):
        if node is None:
            return default
        try:
            node = node.get(key) if hasattr(node, "get") else getattr(node, key, None)
        except Exception:  # OmegaConf raises on keys a struct config does not declare
            return default
    return default if node is None else node


@dataclass
class VerlSettings:
    """What the driver reads from ``reward.rl_guards``: the inner manager, the guards config, the output folder."""

    inner: str = "naive"
    inner_module: str | None = None  # a manager of the user's own: verl's importlib form (pkg://... or a file)
    inner_name: str | None = None
    guards: GuardsConfig = field(default_factory=GuardsConfig)
    output_dir: str | None = None
    score_terms: list[str] = field(default_factory=list)  # terms rl_guards adds to verl's reward

    @classmethod
    def from_config(cls, config: Any) -> VerlSettings:
        """From a whole verl config (the ``reward.rl_guards`` section; defaults where it is absent)."""
        section = plain(select(config, f"reward.{SECTION}", {}))
        if not isinstance(section, dict):
            raise ConfigError(f"reward.{SECTION} must be a mapping, got {type(section).__name__}")
        sets = section.get("set") or []
        if isinstance(sets, str):
            sets = [sets]
        if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
            raise ConfigError(f"reward.{SECTION}.set must be a list of section.field=value strings, got {sets!r}")
        inline = {k: v for k, v in section.items() if k not in DRIVER_KEYS}
        guards = GuardsConfig.layered(inline, section.get("config") or None, sets)
        terms = section.get("score_terms") or []
        if isinstance(terms, str):
            terms = [terms]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ConfigError(f"reward.{SECTION}.score_terms must be a list of names, got {terms!r}")
        inner = section.get("inner") or "naive"
        if not isinstance(inner, str):
            raise ConfigError(f"reward.{SECTION}.inner must be a reward manager name, got {inner!r}")
        return cls(
            inner=inner,
            inner_module=section.get("inner_module") or None,
            inner_name=section.get("inner_name") or None,
            guards=guards,
            output_dir=section.get("output_dir") or None,
            score_terms=list(terms),
        )


def run_folder(config: Any, settings: VerlSettings) -> str:
    """The run's folder: ``reward.rl_guards.output_dir``, else verl's ``trainer.default_local_dir`` (where its
    checkpoints go), else ``checkpoints/<project>/<experiment>`` as verl's default spells it."""
    folder = settings.output_dir or select(config, "trainer.default_local_dir")
    if not folder:
        project = select(config, "trainer.project_name", "verl")
        experiment = select(config, "trainer.experiment_name", "run")
        folder = os.path.join("checkpoints", str(project), str(experiment))
    return os.path.expandvars(os.path.expanduser(str(folder)))


__all__ = ["DRIVER_KEYS", "GUARDS_DIR", "SECTION", "VerlSettings", "plain", "run_folder", "select"]
