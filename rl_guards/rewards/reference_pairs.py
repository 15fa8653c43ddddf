"""Reward sanity without a cases file: a row's reference answer against another row's, in every usual form.

For a few rows per task that have a reference answer (the ``answer``/``solution``/... column), the reference's final
answer and another row's are written the ways completions state an answer (every form of
:mod:`rl_guards.core.probing.forms`: bare, "The answer is X.", ``\\boxed{X}``, ``#### X``, ``<answer>X</answer>``,
``$X$``, a last line; each also after a think block, the shorter padded with trailing spaces to the same length, so a
length term scores both alike) and every reward function scores them through its framework's caller. Forms a
function cannot read (None, or the same score for both) say nothing; what counts:

- **inverted**: in the forms where a function tells the two apart, it pays the wrong answer more, never the right
  one (a sign flipped, a swapped column, ``1 - correct``);
- **total blind**: the weighted total over all functions never pays a right answer more than a wrong one in any
  form, on any row of a task (a constant or broken reward: every group of that task would be dead).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rl_guards.core.probing.forms import FORMS, admits, final_answer, render, wrong_answers
from rl_guards.core.probing.variants import NEUTRAL_LINE, compose
from rl_guards.core.think_markup import ThinkMarkup
from rl_guards.reward_calls.base import CallRow

REFERENCE_COLUMNS: tuple[str, ...] = ("answer", "solution", "ground_truth", "reference", "target", "gold")
EPS = 1e-9

# (function index, its rows, the texts) -> its scores; raises what the function raised
Score = Callable[[int, Sequence[CallRow], Sequence[str]], Sequence["float | None"]]


@dataclass
class ReferenceRow:
    """One dataset row used as a case: its task, prompt, other columns, right and wrong answers (raw)."""

    task: str
    prompt: Any
    columns: dict[str, Any]
    right: str
    wrong: str
    call: CallRow | None = None  # the framework's own call row (a driver's record), used as it is when given


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


def reference_column(
    dataset_columns: Sequence[str],
    funcs: Sequence[Any],
    configured: str | None,
    usual: Sequence[str] = REFERENCE_COLUMNS,
) -> str | None:
    """``configured``; else a reference column (one of ``usual``) some function takes by name; else the first usual
    one present."""
    present = set(dataset_columns)
    if configured:
        return configured if configured in present else None
    for fn in funcs:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        for name in usual:
            if name in params and name in present:
                return name
    return next((c for c in usual if c in present), None)


def pick_rows(
    rows: Sequence[dict[str, Any]], column: str, task_column: str, per_task: int, default_task: str
) -> list[ReferenceRow]:
    """Up to ``per_task`` rows of each task whose final answer differs from another row's of the same task."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get(column) is None or str(row.get(column)).strip() == "":
            continue
        task = row.get(task_column)
        by_task.setdefault(default_task if task is None else str(task), []).append(row)
    out: list[ReferenceRow] = []
    for task, task_rows in sorted(by_task.items()):
        answers = [str(r[column]) for r in task_rows]
        finals = [final_answer(a) or a for a in answers]
        for row, right, final in zip(task_rows, answers, finals, strict=True):
            wrong = wrong_answers(final, [f for f in finals if f != final], 1)
            if not wrong:
                continue
            columns = {k: v for k, v in row.items() if k not in ("prompt", "completion")}
            out.append(ReferenceRow(task, row.get("prompt", ""), columns, right, wrong[0]))
            if sum(r.task == task for r in out) >= per_task:
                break
    return out


def pick_calls(calls: Sequence[tuple[str, CallRow]], per_task: int) -> list[ReferenceRow]:
    """:func:`pick_rows` over a driver's call rows ``(task, call)`` (a batch's records): the reference is the one the
    framework passes the function, the wrong answer another row's of the same task."""
    rows = [
        {"task": task, "reference": str(call.reference), "prompt": call.prompt, "call": i}
        for i, (task, call) in enumerate(calls)
        if isinstance(call.reference, str | int | float) and not isinstance(call.reference, bool)
    ]
    picked = pick_rows(rows, "reference", "task", per_task, "")
    return [replace(r, columns={}, call=calls[int(r.columns["call"])][1]) for r in picked]


def texts(answer: str, markup: ThinkMarkup | None) -> list[str]:
    """``answer`` in every form, bare and after a think block (when the run has a markup)."""
    plain = [render(form, answer) for form in FORMS]
    if markup is None:
        return plain
    return plain + [compose(NEUTRAL_LINE, text, markup) for text in plain]


def form_labels(markup: ThinkMarkup | None) -> list[str]:
    return list(FORMS) + ([f"{form} after a think block" for form in FORMS] if markup is not None else [])


def check_reference_pairs(
    names: Sequence[str],
    score: Score,
    rows: Sequence[ReferenceRow],
    *,
    weights: Sequence[float] | None = None,
    markup: ThinkMarkup | None = None,
) -> PairReport:
    """Score right against wrong answers for every row with every function (see the module doc). ``score(f, rows,
    texts)`` calls function ``f`` through its framework's caller; a function that raises is not judged on the row."""
    weight_list = [float(w) for w in weights] if weights is not None else [1.0] * len(names)
    report = PairReport(rows=len(rows))
    told: dict[str, bool] = {}
    scored: set[str] = set()
    for case in rows:
        right_value = final_answer(case.right) or case.right
        labels = form_labels(markup)
        right, wrong = texts(right_value, markup), texts(case.wrong, markup)
        keep = [i for i, label in enumerate(labels) if admits(right_value, label.split()[0])]
        keep = [i for i in keep if admits(case.wrong, labels[i].split()[0])]
        right, wrong, labels = [right[i] for i in keep], [wrong[i] for i in keep], [labels[i] for i in keep]
        # equal lengths (trailing spaces): a length term scores both alike instead of looking inverted
        width = [max(len(r), len(w)) for r, w in zip(right, wrong, strict=True)]
        right = [r.ljust(n) for r, n in zip(right, width, strict=True)]
        wrong = [w.ljust(n) for w, n in zip(wrong, width, strict=True)]
        half = len(right)
        row = case.call or CallRow(prompt=case.prompt, columns=case.columns, reference=case.right)
        totals = [0.0] * (2 * half)
        for index, (name, weight) in enumerate(zip(names, weight_list, strict=False)):
            try:
                scores = list(score(index, [row] * (2 * half), right + wrong))
            except Exception as exc:  # a function that cannot score these texts is not judged on them
                report.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
                continue
            key = (name, case.task)
            if any(v is not None and v == v for v in scores):
                scored.add(case.task)
            for i in range(half):
                good, bad = scores[i], scores[half + i]
                if good is not None and good == good:
                    totals[i] += weight * good
                if bad is not None and bad == bad:
                    totals[half + i] += weight * bad
                if good is None or bad is None or good != good or bad != bad:
                    continue
                if good > bad + EPS:
                    report.up[key] = report.up.get(key, 0) + 1
                elif bad > good + EPS:
                    report.down[key] = report.down.get(key, 0) + 1
                    report.examples.setdefault(
                        key,
                        f"right {right[i].strip()!r} scored {good:g}, wrong {wrong[i].strip()!r} scored {bad:g} "
                        f"({labels[i]} form)",
                    )
        told[case.task] = told.get(case.task, False) or any(totals[i] > totals[half + i] + EPS for i in range(half))
    # a task no function scored at all (None everywhere: not their task) is routing's to report, not a blind total
    report.total_blind = sorted(task for task, ok in told.items() if not ok and task in scored)
    return report


__all__ = [
    "PairReport",
    "ReferenceRow",
    "check_reference_pairs",
    "form_labels",
    "pick_calls",
    "pick_rows",
    "reference_column",
    "texts",
]
