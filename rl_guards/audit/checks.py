"""The audit's checks besides the probes: every row scored (raises, None, NaN, the wrong type, speed), the same
input twice, right against wrong reference answers, and the projected cost per step."""

from __future__ import annotations

import math
import statistics
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from rl_guards.audit.data import AuditRow
from rl_guards.audit.functions import AuditedFunction, Dead, Finding
from rl_guards.core.probing.variants import NEUTRAL_LINE, compose
from rl_guards.core.think_markup import THINK
from rl_guards.reward_calls import CallRow, RewardTypeError
from rl_guards.rewards.reference_pairs import ReferenceRow, check_reference_pairs

MARKUP = THINK
# completions a policy writes early or when truncated, scored on a few rows: a function must not raise, or return
# NaN or a value that is not a score, on them (None is TRL's "not mine"; verl and OpenRLHF cannot take it)
EDGES: tuple[tuple[str, str], ...] = (
    ("empty", ""),
    ("only think tags", compose(NEUTRAL_LINE, "", MARKUP)),
    ("cut inside the thinking", f"{MARKUP.open_tag}\nLet me work out the"),
    ("no answer", "I am not sure."),
)
EDGE_ROWS = 4
EPS = 1e-9


def call_row(row: AuditRow) -> CallRow:
    """What a framework hands a reward function for this dataset row."""
    return CallRow(prompt=row.prompt, columns=row.columns, reference=row.reference)


def progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=None if enabled else True, leave=False, file=sys.stderr)


def shown(row: AuditRow, completion: str | None = None) -> str:
    prompt = row.prompt_text.strip().replace("\n", " ")
    text = f"row {row.index} (prompt {prompt[-80:]!r}"
    if completion is not None:
        text += f", completion {completion[:120]!r}" + ("…" if len(completion) > 120 else "")
    return text + ")"


def describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "/rl_guards/" not in f.filename.replace("\\", "/")]
    where = f" (at {user[-1].filename.rsplit('/', 1)[-1]}:{user[-1].lineno})" if user else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _score_batch(
    f: AuditedFunction, row: AuditRow, texts: list[str], *, timed: bool
) -> tuple[list[Any], list[tuple[str, str]]]:
    """The function's scores of ``texts`` on ``row``; when the call raises, text by text (which ones raise)."""
    rows = [call_row(row)] * len(texts)
    try:
        return f.call(rows, texts, timed=timed), []
    except Dead:
        raise
    except Exception as exc:
        if len(texts) == 1:
            return [None], [(texts[0], describe(exc))]
        first = describe(exc)
    scores: list[Any] = []
    raised: list[tuple[str, str]] = []
    for text in texts:
        try:
            scores += f.call([call_row(row)], [text])
        except Dead:
            raise
        except Exception as exc:
            scores.append(None)
            raised.append((text, describe(exc)))
    return scores, raised or [(texts[0], first)]


def score_rows(fns: Sequence[AuditedFunction], data: Sequence[AuditRow], show_progress: bool) -> None:
    """Every row's completions scored by every function (one call per row), and its edge completions on a few rows:
    raises / wrong_type / nan / returns_none findings; the scores kept for the other checks."""
    bar = progress(len(fns) * len(data), "audit: scoring rows", show_progress)
    for f in fns:
        raised: list[tuple[AuditRow, str | None, str]] = []
        edges: list[tuple[AuditRow, str, Any]] = []
        try:
            for row in data:
                bar.update(1)
                scores, errors = _score_batch(f, row, list(row.completions), timed=True)
                f.scores[row.index] = [_number(v) for v in scores]
                raised += [(row, text, error) for text, error in errors]
            for row in data[:EDGE_ROWS]:
                texts = [t for _, t in EDGES]
                scores, errors = _score_batch(f, row, texts, timed=False)
                edges += list(zip([row] * len(texts), texts, scores, strict=True))
                raised += [(row, text, error) for text, error in errors]
        except Dead:
            pass
        f.audit.rows_scored = sum(1 for s in f.scores.values() if any(_finite(v) for v in s))
        _row_findings(f, list(data), raised, edges)
    bar.close()


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _finite(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _row_findings(
    f: AuditedFunction,
    data: list[AuditRow],
    raised: list[tuple[AuditRow, str | None, str]],
    edges: list[tuple[AuditRow, str, Any]],
) -> None:
    n = len(data)
    typed = [(r, c, e) for r, c, e in raised if e.startswith(RewardTypeError.__name__)]
    thrown = [(r, c, e) for r, c, e in raised if not e.startswith(RewardTypeError.__name__)]
    for kind, items in (("raises", thrown), ("wrong_type", typed)):
        if not items:
            continue
        rows = sorted({r.index for r, _, _ in items})
        row, completion, error = items[0]
        if kind == "wrong_type":
            error = error.split(" (at ", 1)[0].removeprefix(f"{RewardTypeError.__name__}: ")
        verb = "raises" if kind == "raises" else "returns a value that is not a score"
        swallowed = "verifiers logs it" in error  # verifiers scored it 0.0: the run goes on, on a wrong reward
        f.audit.add(
            Finding(
                kind,
                f"{verb} on {len(items)} completion(s) in {len(rows)} of {n} rows, e.g. {shown(row, completion)}: "
                f"{error}",
                severity="warning" if swallowed else "",
                rows=rows,
            )
        )
    nan = [(r, c) for r in data for c, v in zip(r.completions, f.scores.get(r.index, []), strict=False)
           if v is not None and math.isnan(v)]  # fmt: skip
    nan += [(r, c) for r, c, v in edges if v is not None and isinstance(v, float) and math.isnan(v)]
    if nan:
        rows = sorted({r.index for r, _ in nan})
        f.audit.add(Finding("nan", f"returns NaN on {len(rows)} of {n} rows, e.g. {shown(*nan[0])}", rows=rows))
    raised_rows = {r.index for r, _, _ in raised}
    none_rows = [r for r in data if r.index not in raised_rows and any(v is None for v in f.scores.get(r.index, []))]
    strict = f.audit.framework in ("verl", "openrlhf")
    edge_none = [(r, c) for r, c, v in edges if v is None and r.index not in raised_rows]
    if strict and (none_rows or edge_none):
        example = shown(*edge_none[0]) if not none_rows else shown(none_rows[0], _first_none(f, none_rows[0]))
        f.audit.add(
            Finding(
                "returns_none",
                f"returns None on {len(none_rows)} of {n} rows{' and on degenerate completions' if edge_none else ''}"
                f", e.g. {example}",
                severity="blocking",
                rows=[r.index for r in none_rows],
            )
        )
        return
    if not none_rows:
        return
    # TRL: None for a whole row is "not my task" (left out of the function's mean); None for some completions of a
    # row is a score the policy can move
    mixed = [r for r in none_rows if any(v is not None for v in f.scores[r.index])]
    shown_row = (mixed or none_rows)[0]
    message = (
        f"returns None on {len(none_rows)} of {n} rows ({len(mixed)} of them for some completions only), e.g. "
        f"{shown(shown_row, _first_none(f, shown_row))}"
    )
    if mixed or len(none_rows) == n:
        f.audit.add(Finding("returns_none", message, rows=[r.index for r in (mixed or none_rows)]))
    else:
        f.audit.add(Finding("returns_none", message + " (whole rows: not its task)", severity="info"))


def _first_none(f: AuditedFunction, row: AuditRow) -> str | None:
    return next((c for c, v in zip(row.completions, f.scores[row.index], strict=False) if v is None), None)


def check_repeat(fns: Sequence[AuditedFunction], data: Sequence[AuditRow]) -> None:
    """The first rows scored a second time: the same completion must earn the same reward."""
    for f in fns:
        for row in data:
            first = f.scores.get(row.index)
            if f.dead or first is None or not any(_finite(v) for v in first):
                continue
            try:
                again = [_number(v) for v in f.call([call_row(row)] * len(row.completions), list(row.completions))]
            except Exception:  # Dead too: rows already says why
                continue
            changed = [
                i
                for i, (a, b) in enumerate(zip(first, again, strict=False))
                if _finite(a) and _finite(b) and abs((a or 0.0) - (b or 0.0)) > EPS
            ]
            if changed:
                i = changed[0]
                f.audit.add(
                    Finding(
                        "nondeterministic",
                        f"scored the same completion {first[i]:g} then {again[i]:g}: {shown(row, row.completions[i])}",
                        rows=[row.index],
                    )
                )
                break


def check_inverted(fns: Sequence[AuditedFunction], data: Sequence[AuditRow]) -> list[str]:
    """Right against wrong reference answers, every form, with and without a think block: an ``inverted`` finding
    per function; the tasks whose weighted total never tells them apart."""
    from rl_guards.core.probing.forms import final_answer, wrong_answers

    live = [f for f in fns if not f.dead]
    finals = [final_answer(r.reference) for r in data]
    cases = []
    for row, right in zip(data, finals, strict=True):
        if right is None:
            continue
        wrong = wrong_answers(right, [a for a in finals if a is not None and a != right], 1)
        if not wrong:
            continue
        cases.append(ReferenceRow(row.task, row.prompt, dict(row.columns), str(row.reference), wrong[0]))
        if len(cases) >= 8:
            break
    if not cases or not live:
        return []

    def score(index: int, rows: Sequence[CallRow], texts: Sequence[str]) -> list[Any]:
        values = live[index].call(list(rows), list(texts))
        return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]

    names = [f.audit.name for f in live]
    report = check_reference_pairs(names, score, cases, weights=[f.audit.weight for f in live], markup=MARKUP)
    by_name = {f.audit.name: f for f in live}
    for name, task in report.inverted:
        down = report.down.get((name, task), 0)
        by_name[name].audit.add(
            Finding(
                "inverted",
                f"pays a wrong answer more than the right one in {down} of the right/wrong pairs it tells apart "
                f"(every answer form, on {report.rows} rows) and never the right one more (task {task or '-'}): "
                f"{report.examples.get((name, task), '')}",
            )
        )
    return report.total_blind


def speed(f: AuditedFunction, batch_size: int, slow_step_s: float) -> None:
    """Completions per second, p50/p99 latency, and the reward seconds a step of ``batch_size`` would take."""
    if not f.latencies:
        return
    ordered = sorted(f.latencies)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    per = f.seconds / max(f.completions, 1)
    step = per * batch_size
    f.audit.speed = {
        "rows_per_s": round(f.completions / max(f.seconds, 1e-9), 1),
        "p50_ms": round(1000 * statistics.median(ordered), 4),
        "p99_ms": round(1000 * p99, 4),
        "step_s": round(step, 4),
        "batch_size": batch_size,
        "completions": f.completions,
    }
    if step > slow_step_s:
        f.audit.add(
            Finding(
                "slow",
                f"{per * 1000:.1f} ms per completion: {step:.1f} s of reward scoring per step at {batch_size} "
                f"completions (over {slow_step_s:g} s)",
            )
        )


__all__ = ["EDGES", "call_row", "check_inverted", "check_repeat", "progress", "score_rows", "shown", "speed"]
