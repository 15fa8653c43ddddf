"""rl_guards: guards for TRL GRPO runs that catch RL-for-LLM failure modes before they waste a run.

::

    import rl_guards
    run = rl_guards.install(trainer, rl_guards.GuardsConfig())
    trainer.train()
    print(run.summary())

``import rl_guards`` stays light: the TRL adapter (torch, transformers) is imported on first use of ``install``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rl_guards.config import GuardsArguments, GuardsConfig
from rl_guards.console import configure as _configure_console
from rl_guards.errors import (
    ConfigError,
    DeadGradientError,
    GroupIntegrityError,
    GuardError,
    IncompatibleTrainerError,
    MaskingError,
    PreflightError,
    RewardSanityError,
    RLGuardsError,
    RoutingError,
    TemplateError,
    ThinkMarkupError,
    TruncationError,
)

if TYPE_CHECKING:
    from rl_guards.trl.callback import GuardsCallback
    from rl_guards.trl.hook import GuardRun

__version__ = "0.1.0"

_configure_console()  # the rl_guards logger prints on stderr until the application configures logging itself


def install(trainer: Any, config: Any = None, **kwargs: Any) -> GuardRun:
    """Attach every enabled guard to a built TRL ``GRPOTrainer``; see :func:`rl_guards.trl.hook.install`."""
    from rl_guards.trl.hook import install as _install

    return _install(trainer, config, **kwargs)


def __getattr__(name: str) -> Any:
    # Lazy: the callback imports transformers, which ``import rl_guards`` must not pay for.
    if name == "GuardsCallback":
        from rl_guards.trl.callback import GuardsCallback

        return GuardsCallback
    raise AttributeError(f"module 'rl_guards' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "DeadGradientError",
    "GroupIntegrityError",
    "GuardError",
    "GuardsArguments",
    "GuardsCallback",
    "GuardsConfig",
    "IncompatibleTrainerError",
    "MaskingError",
    "PreflightError",
    "RLGuardsError",
    "RewardSanityError",
    "RoutingError",
    "TemplateError",
    "ThinkMarkupError",
    "TruncationError",
    "__version__",
    "install",
]
