"""The guards :func:`rl_guards.install` builds, in the order they run on each batch.

Add a guard here once it exists; the contract tests run over every entry.
"""

from __future__ import annotations

from rl_guards.guards.base import Guard

BATCH_GUARDS: list[type[Guard]] = []
