"""The core, the guards, the engine and the rollout records stay framework-free: importing them loads neither torch
nor transformers (the engine imports torch only for collectives, when there are other ranks)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import rl_guards.core
import rl_guards.engine
import rl_guards.guards
import rl_guards.rollouts


def _modules() -> list[str]:
    names = []
    for package in (rl_guards.core, rl_guards.guards, rl_guards.engine, rl_guards.rollouts):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            names.append(info.name)
    return sorted(names)


@pytest.mark.slow
def test_core_and_guards_import_without_torch_or_transformers() -> None:
    modules = _modules()
    assert len(modules) > 15
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "heavy = sorted(k for k in ('torch', 'transformers', 'trl') if k in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", f"framework modules pulled in by the core/guards: {out.stdout.strip()}"
