"""The audit's driver of the one probe procedure (:mod:`rl_guards.core.probing`): dataset rows as row views, each
function called through its framework's caller, verdicts by quorum.

Each dataset row is its own group. Per function the verdicts come from its own scores only (``earnable=False``):
what another function pays never changes a function's findings. The weighted total (several functions) is judged
on its own: the degenerate completions it pays as much as its best right answer, naming the functions that pay
them, and whether it pays wrong answers more in every form it tells apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rl_guards.audit.checks import call_row, progress, shown
from rl_guards.audit.data import AuditRow
from rl_guards.audit.functions import AuditedFunction, Dead, Finding
from rl_guards.core.probing.calls import STALLED, FunctionPlan
from rl_guards.core.probing.procedure import RowResult, RowView
from rl_guards.core.probing.runner import ScoreFailed, run_rows
from rl_guards.core.probing.tally import Tally, findings_of, quorum
from rl_guards.core.probing.variants import FALLBACK, HACKABLE, PREFIX, SUFFIX, THINKING, Shape, split
from rl_guards.core.think_markup import THINK

KIND_OF = {
    PREFIX: "reads_prefix",
    SUFFIX: "reads_suffix",
    THINKING: "reads_thinking",
    FALLBACK: "reads_thinking",
    HACKABLE: "hackable",
}
BUILT_LONGEST = 4096  # characters: the probe lengths tried when the completions were built from the references


def _spread(data: Sequence[AuditRow], k: int) -> list[AuditRow]:
    if len(data) <= k:
        return list(data)
    step = len(data) / k
    return [data[int(i * step)] for i in range(k)]


def views(fns: Sequence[AuditedFunction], data: Sequence[AuditRow], rows: int, thinking: bool | None) -> list[RowView]:
    """The rows probed (spread over the dataset, those with a reference first), as the procedure takes them."""
    chosen = _spread([r for r in data if r.reference is not None] or list(data), rows)
    references = [r.reference for r in data if r.reference is not None]
    longest = max((len(c) for r in data for c in r.completions), default=0)
    if any(r.built for r in data):
        longest = max(longest, BUILT_LONGEST)
    out = []
    for row in chosen:
        thinks = thinking
        if thinks is None:
            thinks = any(split(c, THINK)[0] is not None for c in row.completions) or not row.completions
        order = _best_first(fns, row)
        out.append(
            RowView(
                key=row.index,
                group=row.index,
                shape=Shape(thinks=thinks, markup=THINK),
                reference=row.reference,
                others=tuple(r for r in references if r != row.reference)[:16],
                texts=tuple(row.completions[i] for i in order),
                scores={
                    f: [_finite(fn.scores.get(row.index, [None] * len(row.completions))[i]) for i in order]
                    for f, fn in enumerate(fns)
                },
                prompt_text=row.prompt_text,
                longest=longest,
                task=row.task,
            )
        )
    return out


def _best_first(fns: Sequence[AuditedFunction], row: AuditRow) -> list[int]:
    """The row's completions, the best by the weighted total first (the degenerate variants copy its shape)."""

    def total(i: int) -> float:
        return sum(
            f.audit.weight * (_finite(f.scores.get(row.index, [])[i] if i < len(f.scores.get(row.index, [])) else None)
                              or 0.0)
            for f in fns
        )  # fmt: skip

    return sorted(range(len(row.completions)), key=lambda i: (-total(i), i))


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def check_probes(
    fns: Sequence[AuditedFunction], data: Sequence[AuditRow], probe_rows: int, show_progress: bool,
    thinking: bool | None,
) -> list[Finding]:  # fmt: skip
    """Each live function's probe findings (added to its audit); the weighted total's findings (returned)."""
    live = [i for i, f in enumerate(fns) if not f.dead]
    if not live:
        return []
    rows = {r.index: r for r in data}
    row_views = views(fns, data, probe_rows, thinking)
    if not row_views:
        return []
    bar = progress(len(row_views), "audit: probes", show_progress)

    def score(fn: int, items: Sequence[tuple[RowView, str]], alone: bool) -> list[float | None]:
        f = fns[fn]
        try:
            values = f.call([call_row(rows[int(v.key)]) for v, _ in items], [t for _, t in items])  # type: ignore[arg-type]
        except Dead as exc:  # any other exception: run_rows scores it RAISED, with its type and text
            raise ScoreFailed(STALLED, str(exc)) from exc
        return [None if v is None else _finite(float(v)) for v in values]

    plans = [FunctionPlan(i, fns[i].audit.name, weight=fns[i].audit.weight) for i in live]
    fallback = {
        v.key: {i: min((s for s in v.scores.get(i, []) if s is not None), default=0.0) for i in range(len(fns))}
        for v in row_views
    }
    results = run_rows(row_views, plans, score, fallback=fallback, weights_of=len(fns))
    bar.update(len(row_views))
    bar.close()
    done = [r for r in results if r is not None]
    _function_findings(fns, live, done, rows)
    return _total_findings(fns, done, rows) if len(fns) > 1 else _single_total(fns[0], done, rows)


def _function_findings(
    fns: Sequence[AuditedFunction], live: list[int], results: list[RowResult], rows: dict[int, AuditRow]
) -> None:
    tally = Tally()
    examples: dict[tuple[int, str], tuple[int, str]] = {}
    for result in results:
        for f in live:
            tried, found = findings_of(result, f, earnable=False)
            tally.add(result.view.key, result.view.group, f, tried, set(found))
            for key, finding in found.items():
                examples.setdefault((f, key), (int(result.view.key), finding.detail))  # type: ignore[arg-type]
    for verdict in tally.verdicts(live):
        row, detail = examples[(verdict.fn, verdict.key)]
        fns[verdict.fn].audit.add(
            Finding(
                KIND_OF[verdict.probe],
                f"{detail}; seen on {len(verdict.found)} of the {len(verdict.tried)} rows probed, e.g. "
                f"{shown(rows[row])}",
                severity="info" if verdict.key == FALLBACK else "",  # a fallback: noted, not an alarm
                rows=[int(r) for r in verdict.found],  # type: ignore[call-overload]
            )
        )


def _total_tally(results: list[RowResult]) -> tuple[Tally, dict[str, tuple[int, Any]]]:
    """The weighted total's findings per row, as a tally of its own (function -1)."""
    tally = Tally()
    examples: dict[str, tuple[int, Any]] = {}
    for result in results:
        found = {h.variant: h for h in result.totals}
        tried = set(result.total_judged)
        if result.total_told:
            tried.add("inverted")
            if result.total_inverted:
                found["inverted"] = None  # type: ignore[assignment]
        tally.add(result.view.key, result.view.group, -1, tried, set(found))
        for key, hack in found.items():
            examples.setdefault(key, (int(result.view.key), hack))  # type: ignore[arg-type]
    return tally, examples


def _hack_message(fns: Sequence[AuditedFunction], hack: Any) -> str:
    payers = (
        ", ".join(f"{fns[f].audit.name} {gain:+g}" for f, gain in zip(hack.payers, hack.gains, strict=True))
        or "no single function pays it more than a right answer"
    )
    return (
        f"the weighted total pays the degenerate completion '{hack.variant}' {hack.total:g}, as much as its best right "
        f"answer ({hack.best_total:g}); paid by: {payers} (weighted, against their share of that answer)"
    )


def _total_findings(
    fns: Sequence[AuditedFunction], results: list[RowResult], rows: dict[int, AuditRow]
) -> list[Finding]:
    """The weighted total's findings; each function that pays a total's degenerate completion is told too."""
    tally, examples = _total_tally(results)
    out = []
    group_of = tally.group_of
    found_inv, tried_inv = tally.found.get((-1, "inverted"), []), tally.tried.get((-1, "inverted"), [])
    if quorum(found_inv, tried_inv, group_of):
        out.append(
            Finding(
                "inverted",
                f"the weighted total pays a wrong answer more than the right one in every answer form it tells apart; "
                f"seen on {len(found_inv)} of the {len(tried_inv)} rows probed",
                rows=[int(r) for r in found_inv],  # type: ignore[call-overload]
            )
        )
    for verdict in tally.verdicts([-1]):
        if verdict.key not in examples or examples[verdict.key][1] is None:
            continue
        row, hack = examples[verdict.key]
        message = f"{_hack_message(fns, hack)}; seen on {len(verdict.found)} of the {len(verdict.tried)} rows probed"
        out.append(Finding("hackable", message, rows=[int(r) for r in verdict.found]))  # type: ignore[call-overload]
        for f in hack.payers:
            fns[f].audit.add(Finding("hackable", f"{message}, e.g. {shown(rows[row])}", rows=[row]))
    return out


def _single_total(f: AuditedFunction, results: list[RowResult], rows: dict[int, AuditRow]) -> list[Finding]:
    """One function: its total is itself, so what the total finds (a shaping term paying padding) is its own."""
    for finding in _total_findings([f], results, rows):
        if finding.kind == "hackable":
            f.audit.add(finding)
    return []


__all__ = ["BUILT_LONGEST", "check_probes", "views"]
