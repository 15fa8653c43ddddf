"""A tiny two-task conversational dataset ("arith" and "echo") and the warm-up conversations built from it."""

from __future__ import annotations

import random
from dataclasses import dataclass

from datasets import Dataset

__all__ = ["ECHO_WORDS", "TASKS", "Example", "make_dataset", "make_examples"]

TASKS = ("arith", "echo")
# Short common words: two or three tokens each with the 2048-rank vocabulary.
ECHO_WORDS = (
    "apple", "river", "stone", "house", "light", "water", "table", "dream",
    "bread", "smile", "night", "chair", "green", "paper", "music", "cloud",
)  # fmt: skip


@dataclass(frozen=True)
class Example:
    """One synthetic task instance: the user's question, the expected answer, and a short reasoning."""

    task: str
    question: str
    answer: str
    reasoning: str


def _arith(rng: random.Random) -> Example:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return Example("arith", f"What is {a}+{b}? Answer with the number.", str(a + b), f"{a}+{b}={a + b}")


def _echo(rng: random.Random) -> Example:
    word = rng.choice(ECHO_WORDS)
    return Example("echo", f"Repeat the word: {word}", word, f"The word is {word}.")


_MAKERS = {"arith": _arith, "echo": _echo}


def _check_tasks(tasks: tuple[str, ...]) -> None:
    if not tasks:
        raise ValueError(f"tasks is empty: pick from {', '.join(TASKS)}")
    unknown = [task for task in tasks if task not in _MAKERS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}: available tasks are {', '.join(TASKS)}")


def make_examples(n_per_task: int, tasks: tuple[str, ...] = TASKS, *, seed: int = 0) -> list[Example]:
    """``n_per_task`` examples of each task, interleaved (arith, echo, arith, echo, ...), reproducible by seed."""
    _check_tasks(tasks)
    if n_per_task < 0:
        raise ValueError(f"n_per_task must be >= 0, got {n_per_task}")
    rngs = {task: random.Random(f"{seed}:{task}") for task in tasks}
    return [_MAKERS[task](rngs[task]) for _ in range(n_per_task) for task in tasks]


def make_dataset(
    n_per_task: int = 8,
    tasks: tuple[str, ...] = TASKS,
    *,
    seed: int = 0,
    thinking: bool | str | None = None,
) -> Dataset:
    """A conversational prompt dataset with ``prompt``, ``task``, ``answer`` and optionally ``enable_thinking``.

    ``prompt`` is ``[{"role": "user", "content": ...}]``. Rows interleave the tasks. ``thinking``: None omits
    the ``enable_thinking`` column; True/False sets it on every row; ``"mixed"`` alternates it within each task
    (row k of a task gets ``k % 2 == 0``), so every task has both. GRPOTrainer does not read that column itself
    (its chat-template kwargs are global); it is there for reward functions and guards.
    """
    if thinking is not None and not isinstance(thinking, bool) and thinking != "mixed":
        raise ValueError(f"thinking must be None, True, False or 'mixed', got {thinking!r}")
    examples = make_examples(n_per_task, tasks, seed=seed)
    columns: dict[str, list] = {
        "prompt": [[{"role": "user", "content": example.question}] for example in examples],
        "task": [example.task for example in examples],
        "answer": [example.answer for example in examples],
    }
    if thinking is not None:
        per_task = len(tasks)
        columns["enable_thinking"] = [
            (index // per_task) % 2 == 0 if thinking == "mixed" else bool(thinking) for index in range(len(examples))
        ]
    return Dataset.from_dict(columns)
