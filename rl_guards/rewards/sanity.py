"""Reward sanity preflight: do the reward functions rank known-good completions above known-bad ones?

Cases, per task (a YAML or JSON file, a list or ``{"cases": [...]}``)::

    - task: math
      prompt: [{role: user, content: "What is 2+2?"}]      # or a plain string
      answer: "4"                                          # any other key is a dataset column
      good: ["The answer is 4."]
      bad: ["The answer is 5.", ""]

Each function is called as TRL calls it (``prompts=``, ``completions=``, ``completion_ids=None``, the columns,
``trainer_state=None``, no-op ``log_extra``/``log_metric``), on the good and bad completions of a case
together. A function that returns None for every row does not serve the task; one that serves it must give
every good completion a higher reward than every bad one: ``min(good) > max(bad)``, unless it is named in
``shaping`` (a length penalty or format bonus is not meant to tell right from wrong). The weighted total that
GRPO optimises (the functions that scored, times ``weights``) must always rank good above bad: it is reported as
the ``(total)`` row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.console import render_table
from rl_guards.errors import ConfigError, RewardSanityError
from rl_guards.rewards.callables import reward_name
from rl_guards.rewards.calls import call_reward

__all__ = [
    "SanityCase",
    "SanityReport",
    "SanityResult",
    "assert_reward_sanity",
    "check_reward_sanity",
    "load_reward_cases",
]

_RESERVED = ("task", "prompt", "good", "bad")


@dataclass
class SanityCase:
    """Known-good and known-bad completions for one prompt of one task."""

    task: str
    prompt: Any  # a string or a list of chat messages
    good: list[str]
    bad: list[str]
    columns: dict[str, Any] = field(default_factory=dict)  # other dataset columns, one value for the case

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "case") -> SanityCase:
        if not isinstance(data, dict):
            raise ConfigError(f"{where} must be a mapping with task, prompt, good, bad; got {type(data).__name__}")
        missing = [k for k in _RESERVED if k not in data]
        if missing:
            raise ConfigError(f"{where} lacks {missing} (needs task, prompt, good, bad)")
        for key in ("good", "bad"):
            value = data[key]
            if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}.{key} must be a non-empty list of completion strings")
        columns = {k: v for k, v in data.items() if k not in _RESERVED}
        return cls(str(data["task"]), data["prompt"], list(data["good"]), list(data["bad"]), columns)


@dataclass
class SanityResult:
    """One function on one case."""

    case: int  # index of the case
    task: str
    func: str
    # "ok", "fail" (some bad >= some good), "not_served" (all None), "partial" (some None), "error",
    # "shaping" (a shaping term that does not separate good from bad: shown, not a failure)
    status: str
    min_good: float | None = None
    max_bad: float | None = None
    detail: str = ""


@dataclass
class SanityReport:
    """Every function on every case, and what went wrong."""

    results: list[SanityResult]
    unserved_tasks: list[str]  # tasks no function scored at all

    @property
    def failures(self) -> list[SanityResult]:
        return [r for r in self.results if r.status in ("fail", "partial", "error")]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.unserved_tasks

    def table(self) -> str:
        """Readable table of the functions that serve each case."""
        rows = [r for r in self.results if r.status != "not_served"]
        header = ("case", "task", "function", "min good", "max bad", "status")
        cells = [
            (
                str(r.case),
                r.task,
                r.func,
                _fmt(r.min_good),
                _fmt(r.max_bad),
                r.status + (f" ({r.detail})" if r.detail else ""),
            )
            for r in rows
        ]
        lines = [render_table(header, cells, styled=False)]
        if self.unserved_tasks:
            lines.append(f"tasks no reward function scores: {self.unserved_tasks}")
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def load_reward_cases(path: str | Path) -> list[SanityCase]:
    """Cases from a YAML or JSON file (a list, or a mapping with a ``cases`` list)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"reward sanity cases file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: expected a non-empty list of cases (or a mapping with a 'cases' list)")
    return [SanityCase.from_dict(c, f"{path.name}: case {i}") for i, c in enumerate(data)]


TOTAL = "(total)"


def check_reward_sanity(
    reward_funcs: Sequence[Any],
    cases: Sequence[SanityCase | dict[str, Any]],
    *,
    task_column: str = "task",
    weights: Sequence[float] | None = None,
    shaping: Sequence[str] = (),
) -> SanityReport:
    """Score every case with every function and compare good against bad (see module doc)."""
    if weights is not None and len(weights) != len(reward_funcs):
        raise ConfigError(f"{len(weights)} reward weights for {len(reward_funcs)} reward functions")
    weight_list = [float(w) for w in weights] if weights is not None else [1.0] * len(reward_funcs)
    parsed = [c if isinstance(c, SanityCase) else SanityCase.from_dict(c, f"case {i}") for i, c in enumerate(cases)]
    results: list[SanityResult] = []
    served: dict[str, bool] = {}
    for index, case in enumerate(parsed):
        completions_text = case.good + case.bad
        n = len(completions_text)
        conversational = isinstance(case.prompt, list)
        completions: list[Any] = (
            [[{"role": "assistant", "content": c}] for c in completions_text] if conversational else completions_text
        )
        columns = {key: [value] * n for key, value in case.columns.items()}
        columns[task_column] = [case.task] * n
        served.setdefault(case.task, False)
        totals: list[float | None] = [None] * n
        for fn, weight in zip(reward_funcs, weight_list, strict=True):
            name = reward_name(fn)
            if not callable(fn) or isinstance(fn, str):
                results.append(SanityResult(index, case.task, name, "error", detail="not a callable reward function"))
                continue
            try:
                scores = call_reward(fn, prompts=[case.prompt] * n, completions=completions, columns=columns)
            except Exception as exc:  # raised, or returned something that is not a number or None
                results.append(SanityResult(index, case.task, name, "error", detail=f"{type(exc).__name__}: {exc}"))
                continue
            if all(s is None for s in scores):
                results.append(SanityResult(index, case.task, name, "not_served"))
                continue
            served[case.task] = True
            for i, value in enumerate(scores):
                if value is not None:
                    totals[i] = (totals[i] or 0.0) + weight * value
            good, bad = scores[: len(case.good)], scores[len(case.good) :]
            if any(s is None for s in scores):
                skipped = [i for i, s in enumerate(scores) if s is None]
                results.append(SanityResult(index, case.task, name, "partial", detail=f"None for rows {skipped}"))
                continue
            result = _compare(index, case, name, good, bad)
            if result.status == "fail" and name in shaping:
                result.status = "shaping"
            results.append(result)
        if any(t is not None for t in totals) and all(t is not None for t in totals):
            results.append(_compare(index, case, TOTAL, totals[: len(case.good)], totals[len(case.good) :]))
    return SanityReport(results, sorted(t for t, ok in served.items() if not ok))


def _compare(index: int, case: SanityCase, name: str, good: list[Any], bad: list[Any]) -> SanityResult:
    """``ok`` when every good score is above every bad score, else ``fail`` naming the closest pair."""
    min_good, max_bad = min(good), max(bad)
    if min_good > max_bad:
        return SanityResult(index, case.task, name, "ok", min_good, max_bad)
    worst_good, best_bad = case.good[good.index(min_good)], case.bad[bad.index(max_bad)]
    detail = f"good {worst_good[:40]!r} <= bad {best_bad[:40]!r}"  # cut for the table only
    return SanityResult(index, case.task, name, "fail", min_good, max_bad, detail)


def assert_reward_sanity(
    reward_funcs: Sequence[Any],
    cases: Sequence[SanityCase | dict[str, Any]],
    *,
    task_column: str = "task",
    weights: Sequence[float] | None = None,
    shaping: Sequence[str] = (),
) -> SanityReport:
    """:func:`check_reward_sanity`, raising :class:`RewardSanityError` with the table when anything fails."""
    report = check_reward_sanity(reward_funcs, cases, task_column=task_column, weights=weights, shaping=shaping)
    if not report.ok:
        raise RewardSanityError(sanity_message(report), guard="reward_sanity")
    return report


def sanity_message(report: SanityReport) -> str:
    """Failure text: what failed, the table, the fix."""
    n = len(report.failures)
    return (
        f"reward functions disagree with known-good/known-bad completions ({n} failing function/case pair(s)"
        f"{', unscored tasks ' + str(report.unserved_tasks) if report.unserved_tasks else ''}):\n{report.table()}\n"
        "Fix: a 'fail' row ranks a bad completion at or above a good one (fix the reward or the case; name shaping "
        "terms such as a length penalty in reward_sanity.shaping; the '(total)' row must pass); 'partial' "
        "means None for some rows of a task the function serves; 'error' is an exception; a task no function "
        "scores gets zero advantage in training."
    )
