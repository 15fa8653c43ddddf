"""Reward sanity without a cases file: a row's reference answer against another row's, in several usual forms.

For a few rows per task that have a reference answer (the ``answer``/``solution``/... column), the right answer and
another row's (wrong) answer are written the ways completions usually state an answer (bare, "The answer is X.",
``\\boxed{X}``; each also after a think block; the shorter padded with trailing spaces to the same length, so a
length term scores both alike) and every reward function scores them as TRL would call it. Forms a
function cannot read (None, or the same score for both) say nothing; what counts:

- **inverted**: in the forms where a function tells the two apart, it pays the wrong answer more, never the right
  one (a sign flipped, a swapped column, ``1 - correct``);
- **total blind**: the weighted total over all functions never pays a right answer more than a wrong one in any
  form, on any row of a task (a constant or broken reward: every group of that task would be dead).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_guards.core.probes import NEUTRAL_LINE, compose
from rl_guards.core.think_markup import ThinkMarkup
from rl_guards.rewards.callables import reward_name
from rl_guards.rewards.calls import call_reward

REFERENCE_COLUMNS: tuple[str, ...] = ("answer", "solution", "ground_truth", "reference", "target", "gold")
FORMS: tuple[str, ...] = ("{}", "The answer is {}.", "\\boxed{{{}}}")
EPS = 1e-9


@dataclass
class ReferenceRow:
    """One dataset row used as a case: its task, prompt, other columns, right and wrong answers."""

    task: str
    prompt: Any
    columns: dict[str, Any]
    right: str
    wrong: str


@dataclass
class PairReport:
    """Per (function, task): how often it told right from wrong, each way; and tasks the total never tells."""

    up: dict[tuple[str, str], int] = field(default_factory=dict)  # right scored higher
    down: dict[tuple[str, str], int] = field(default_factory=dict)  # wrong scored higher
    examples: dict[tuple[str, str], str] = field(default_factory=dict)  # a line showing a "down" pair
    total_blind: list[str] = field(default_factory=list)
    rows: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # function -> exception

    @property
    def inverted(self) -> list[tuple[str, str]]:
        """(function, task) pairs that paid the wrong answer more and never the right one."""
        return sorted(k for k, n in self.down.items() if n and not self.up.get(k))


def reference_column(dataset_columns: Sequence[str], funcs: Sequence[Any], configured: str | None) -> str | None:
    """``configured``; else a reference column some function takes by name; else the first usual one present."""
    present = set(dataset_columns)
    if configured:
        return configured if configured in present else None
    for fn in funcs:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        for name in REFERENCE_COLUMNS:
            if name in params and name in present:
                return name
    return next((c for c in REFERENCE_COLUMNS if c in present), None)


def pick_rows(
    rows: Sequence[dict[str, Any]], column: str, task_column: str, per_task: int, default_task: str
) -> list[ReferenceRow]:
    """Up to ``per_task`` rows of each task whose reference differs from another row's of the same task."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get(column) is None or str(row.get(column)).strip() == "":
            continue
        task = row.get(task_column)
        by_task.setdefault(default_task if task is None else str(task), []).append(row)
    out: list[ReferenceRow] = []
    for task, task_rows in sorted(by_task.items()):
        answers = [str(r[column]) for r in task_rows]
        for row, right in zip(task_rows, answers, strict=True):
            wrong = next((a for a in answers if a != right), None)
            if wrong is None:
                break
            columns = {k: v for k, v in row.items() if k not in ("prompt", "completion")}
            out.append(ReferenceRow(task, row.get("prompt", ""), columns, right, wrong))
            if sum(r.task == task for r in out) >= per_task:
                break
    return out


def texts(answer: str, markup: ThinkMarkup | None) -> list[str]:
    """``answer`` in every form, bare and after a think block (when the run has a markup)."""
    plain = [form.format(answer) for form in FORMS]
    if markup is None:
        return plain
    return plain + [compose(NEUTRAL_LINE, text, markup) for text in plain]


def check_reference_pairs(
    funcs: Sequence[Any],
    rows: Sequence[ReferenceRow],
    *,
    weights: Sequence[float] | None = None,
    markup: ThinkMarkup | None = None,
    trainer_state: Any = None,
) -> PairReport:
    """Score right against wrong answers for every row with every function (see the module doc)."""
    weight_list = [float(w) for w in weights] if weights is not None else [1.0] * len(funcs)
    report = PairReport(rows=len(rows))
    told: dict[str, bool] = {}
    for case in rows:
        right, wrong = texts(case.right, markup), texts(case.wrong, markup)
        # equal lengths (trailing spaces): a length term scores both alike instead of looking inverted
        width = [max(len(r), len(w)) for r, w in zip(right, wrong, strict=True)]
        right = [r.ljust(n) for r, n in zip(right, width, strict=True)]
        wrong = [w.ljust(n) for w, n in zip(wrong, width, strict=True)]
        n = len(right) + len(wrong)
        conversational = isinstance(case.prompt, list)
        completions: list[Any] = [[{"role": "assistant", "content": t}] if conversational else t for t in right + wrong]
        columns = {k: [v] * n for k, v in case.columns.items()}
        totals = [0.0] * n
        for fn, weight in zip(funcs, weight_list, strict=False):
            name = reward_name(fn)
            try:
                scores = call_reward(
                    fn, prompts=[case.prompt] * n, completions=completions, columns=columns, trainer_state=trainer_state
                )
            except Exception as exc:  # a function that cannot score these texts is not judged on them
                report.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
                continue
            key = (name, case.task)
            half = len(right)
            for i in range(half):
                good, bad = scores[i], scores[half + i]
                if good is not None:
                    totals[i] += weight * good
                if bad is not None:
                    totals[half + i] += weight * bad
                if good is None or bad is None:
                    continue
                if good > bad + EPS:
                    report.up[key] = report.up.get(key, 0) + 1
                elif bad > good + EPS:
                    report.down[key] = report.down.get(key, 0) + 1
                    report.examples.setdefault(
                        key, f"right {right[i]!r} scored {good:g}, wrong {wrong[i]!r} scored {bad:g}"
                    )
        half = len(right)
        told[case.task] = told.get(case.task, False) or any(totals[i] > totals[half + i] + EPS for i in range(half))
    report.total_blind = sorted(task for task, ok in told.items() if not ok)
    return report


__all__ = ["PairReport", "ReferenceRow", "check_reference_pairs", "pick_rows", "reference_column", "texts"]
