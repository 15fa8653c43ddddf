"""The floors of the house (``DESIGN.md``): a module imports only from its own floor or lower.

Every ``import`` and ``from ... import`` of every module under ``rl_guards/`` is checked, deferred ones (inside a
function) included, with no exemptions. A new room (a sub-package) must be given a floor here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rl_guards"

# bottom to top
FLOORS: dict[str, int] = {
    "errors": 1,  # typed errors and the warning class
    "console": 1,  # the rl_guards logger and the one table renderer (rich)
    "core": 1,  # pure detectors: no torch, no transformers
    "config": 2,
    "tensors": 3,  # torch only: mask rules on device tensors, collectives
    "chat": 3,  # chat-template rendering with a tokenizer, no trainer
    "rewards": 4,  # reward-function wrappers
    "reward_calls": 4,  # calling a reward function as its framework does (one module per framework)
    "rollouts": 4,  # records on disk: the dump format, writer, readers, report
    "guards": 5,  # framework-free guards, the session, the mask guard and the recorder
    "collators": 6,
    "engine": 6,  # the trainer-free driver
    "trl": 7,  # the TRL adapter
    "tinker": 7,  # the tinker-cookbook driver, and its local Tinker-API backend (which imports no guard floor)
    "verl": 7,  # the verl driver: a reward manager and a step hook
    "audit": 7,  # the offline reward audit (another driver)
    "sweeps": 7,  # learning-rate sweeps over a trainer factory (another driver)
    "cli": 8,
    "testing": 8,  # the tiny fixture and helpers for users' tests
    "__init__": 8,  # the package face
    "__main__": 8,  # python -m rl_guards
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "rl_guards":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, relative ones resolved."""
    return _imports_of(path.read_text(encoding="utf-8"), _module_of(path), path.name == "__init__.py")


def _imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "rl_guards":  # from rl_guards import x: x may be a room
                found += [(node.lineno, f"rl_guards.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


def _files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_room_has_a_floor() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in PACKAGE.glob("*.py")}
    assert rooms - FLOORS.keys() == set(), "give the new room a floor in FLOORS (and DESIGN.md)"


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_or_across(path: Path) -> None:
    module = _module_of(path)
    room = "__init__" if module == "rl_guards" else _room(module)
    assert room in FLOORS, f"{module}: no floor for room {room!r}"
    upward = []
    for line, target in _imports(path):
        other = _room(target)
        if other is not None and FLOORS.get(other, 0) > FLOORS[room]:
            upward.append(f"line {line}: {target} (floor {FLOORS[other]} > {room}'s {FLOORS[room]})")
    assert not upward, f"{module} imports upward:\n" + "\n".join(upward)


def test_the_check_sees_deferred_and_relative_imports() -> None:
    """The parser itself: an import inside a function, a relative one and ``from rl_guards import`` are found."""
    source = "def f():\n    from rl_guards.trl import hook\n    from ..guards import base\nfrom rl_guards import cli\n"
    targets = [t for _, t in _imports_of(source, "rl_guards.core.probe", is_package=False)]
    assert sorted(targets) == ["rl_guards.cli", "rl_guards.guards", "rl_guards.trl"]
