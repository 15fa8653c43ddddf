"""TRL-style reward functions for the tiny two-task dataset.

Each takes ``completions`` (conversational ``[{"role": "assistant", "content": ...}]`` or plain strings) and the
dataset columns as keyword lists, and returns one float per row, or ``None`` for rows of another task when a
``task`` column is given (TRL then leaves that row out of this function's statistics).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rl_guards.core.completions import completion_text

__all__ = [
    "LENGTH_PENALTY_PER_TOKEN",
    "arith_correct",
    "completion_text",
    "echo_match",
    "final_answer",
    "length_penalty",
]

LENGTH_PENALTY_PER_TOKEN = 0.01  # length_penalty: reward per completion token (a character counts 1/4 token)


def final_answer(text: str) -> str:
    """The part after the last ``</think>``; empty if a ``<think>`` was opened and never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return ""
    return text


_LEAD = re.compile(r"^(?:the\s+(?:answer|word)\s+is\s*:?\s*)", re.I)


def _normalised(text: str) -> str:
    """A final answer compared as a whole: stripped, an "The answer is" lead and end punctuation removed."""
    return _LEAD.sub("", text.strip()).strip().rstrip(".!?").strip()


def _task_rewards(
    task_name: str, completions: Sequence[Any], answer: Sequence[str], task: Sequence[str] | None, fold_case: bool
) -> list[float | None]:
    if len(answer) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    rewards: list[float | None] = []
    for index, (completion, expected) in enumerate(zip(completions, answer, strict=True)):
        if task is not None and task[index] != task_name:
            rewards.append(None)
            continue
        got, want = _normalised(final_answer(completion_text(completion))), str(expected).strip()
        if fold_case:
            got, want = got.lower(), want.lower()
        rewards.append(1.0 if got == want else 0.0)
    return rewards


def arith_correct(
    completions: Sequence[Any], answer: Sequence[str], task: Sequence[str] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 if the final answer is the number (optionally "The answer is N."), else 0.0; None off task.

    The whole final answer is compared, so an echoed question or a list of numbers earns nothing."""
    return _task_rewards("arith", completions, answer, task, fold_case=False)


def echo_match(
    completions: Sequence[Any], answer: Sequence[str], task: Sequence[str] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 if the final answer is the word (any case, end punctuation allowed), else 0.0; None off task."""
    return _task_rewards("echo", completions, answer, task, fold_case=True)


def length_penalty(
    completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: Any
) -> list[float | None]:
    """``-LENGTH_PENALTY_PER_TOKEN`` per completion token (from ``completion_ids``; else characters / 4); all rows."""
    if completion_ids is not None:
        return [-LENGTH_PENALTY_PER_TOKEN * len(ids) for ids in completion_ids]
    return [-LENGTH_PENALTY_PER_TOKEN * len(completion_text(c)) / 4 for c in completions]


# Fixed names: they become the reward keys TRL logs (rewards/<name>/mean) and must not change with refactors.
arith_correct.__name__ = "arith_correct"
echo_match.__name__ = "echo_match"
length_penalty.__name__ = "length_penalty"
