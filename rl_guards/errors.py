"""Typed errors. Each also subclasses the stdlib error it stands for, and its text says what to do."""

from __future__ import annotations

GUARD_STOP_EXIT_CODE = 3  # ``rl-guards grpo`` exit status when a guard stopped the run (1: a crash, 2: a bad config)


class RLGuardsWarning(UserWarning):
    """Kept for code that names it; rl_guards no longer emits Python warnings: every warning is one message on the
    ``rl_guards`` logger (:mod:`rl_guards.console`)."""


class RLGuardsError(Exception):
    """Base class of every error rl_guards raises on purpose."""


class ConfigError(RLGuardsError, ValueError):
    """A configuration value is invalid; the message names the field."""


class IncompatibleTrainerError(RLGuardsError, RuntimeError):
    """The trainer lacks an internal a guard relies on (TRL version drift)."""


class GuardError(RLGuardsError, RuntimeError):
    """A guard in ``mode: raise`` found a problem that corrupts training.

    ``guard`` is the guard's name, ``step`` the global step where it fired (or None before training).
    """

    def __init__(self, message: str, *, guard: str = "", step: int | None = None) -> None:
        super().__init__(message)
        self.guard = guard
        self.step = step


class MaskingError(GuardError):
    """Loss would land on tokens that must not carry it (prompt, padding, post-EOS), or not where it must."""


class TemplateError(GuardError):
    """The rendered chat template is wrong for the run: double ``<think>``, ignored thinking flag, mismatch."""


class RoutingError(GuardError):
    """A task's rows were scored by the wrong reward function, or left unscored."""


class RewardSanityError(GuardError):
    """A reward function does not rank known-good completions above known-bad ones."""


class PreflightError(GuardError):
    """A blocking finding of the start-of-training report."""


class ThinkMarkupError(GuardError):
    """Think markup anomalies above the configured limit."""


class TruncationError(GuardError):
    """Completions or strings are being cut short."""


class DeadGradientError(GuardError):
    """A task stopped contributing gradient."""


class GroupIntegrityError(GuardError):
    """A group holds rollouts of different prompts, so its advantages compare unlike problems."""


class RewardProbeError(GuardError):
    """A probe of a reward function found it reads only a prefix, reads the thinking, or pays a degenerate text."""


class RewardFunctionError(GuardError):
    """A reward function raised on some rows (the rows are shown)."""


class UnpaidRewardError(GuardError):
    """A reward function gives one score on every row of a task, below what it pays a right answer, while the
    task's total still moves: the run never gets that reward."""


class DriftError(GuardError):
    """Reward rose while behaviour on fixed probe prompts drifted beyond its thresholds."""
