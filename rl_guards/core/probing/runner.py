"""Every row's procedure in lockstep (pure): per pass, one call per function over all the rows (each text once per
row), so a judge that costs per call is called a few times per probe, not once per text."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from rl_guards.core.probing.calls import RAISED, Call, Failed, FunctionPlan, Reply
from rl_guards.core.probing.procedure import RowResult, RowView, probe_row

Scorer = Callable[[int, Sequence[tuple[RowView, str]], bool], Sequence["float | None"]]


class ScoreFailed(Exception):
    """A scorer's call failed: ``state`` RAISED (the function raised) or STALLED (it ran past its deadline)."""

    def __init__(self, state: str, detail: str) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail


def run_rows(
    views: Sequence[RowView],
    plans: Sequence[FunctionPlan],
    score: Scorer,
    *,
    fallback: Mapping[Hashable, Mapping[int, float]] | None = None,
    weights_of: int = 0,
    may_continue: Callable[[list[Call]], bool] | None = None,
) -> list[RowResult | None]:
    """Every row's procedure in lockstep: per pass, one ``score(fn, [(view, text), ...], alone=False)`` call per
    function over all the rows' texts (each text once per row), and one per ``alone`` call. ``may_continue(calls)``
    is asked before each pass (a time budget): False stops the probe there (those rows get None). A merged call that
    fails is retried row by row, so one row's text does not cost the others their verdicts."""
    gens = [probe_row(v, plans, fallback=(fallback or {}).get(v.key), weights_of=weights_of) for v in views]
    results: list[RowResult | None] = [None] * len(views)
    pending: dict[int, list[Call]] = {}
    for i, gen in enumerate(gens):
        try:
            pending[i] = next(gen)
        except StopIteration as done:
            results[i] = done.value
    while pending:
        calls = [c for i in sorted(pending) for c in pending[i]]
        if may_continue is not None and not may_continue(calls):
            for i in pending:
                gens[i].close()
            break
        replies = _dispatch(pending, views, score)
        nxt: dict[int, list[Call]] = {}
        for i in sorted(pending):
            try:
                nxt[i] = gens[i].send(replies[i])
            except StopIteration as done:
                results[i] = done.value
        pending = nxt
    return results


def _dispatch(pending: Mapping[int, list[Call]], views: Sequence[RowView], score: Scorer) -> dict[int, list[Reply]]:
    """The replies to every row's calls: merged per function (each (row, text) once), ``alone`` calls one by one."""
    replies: dict[int, list[Reply | None]] = {i: [None] * len(calls) for i, calls in pending.items()}
    merged: dict[int, list[tuple[int, int]]] = {}
    for i, calls in pending.items():
        for j, call in enumerate(calls):
            if call.alone:
                replies[i][j] = _call(score, call.fn, [(views[i], t) for t in call.texts], True)
            else:
                merged.setdefault(call.fn, []).append((i, j))
    for fn, where in merged.items():
        items: dict[tuple[int, str], int] = {}
        for i, j in where:
            for text in pending[i][j].texts:
                items.setdefault((i, text), len(items))
        reply = _call(score, fn, [(views[i], text) for i, text in items], False)
        if isinstance(reply, Failed) and reply.state == RAISED and len({i for i, _ in where}) > 1:
            for i, j in where:  # one row's text may be the cause: the others keep their verdicts
                replies[i][j] = _call(score, fn, [(views[i], t) for t in pending[i][j].texts], False)
            continue
        for i, j in where:
            replies[i][j] = reply if isinstance(reply, Failed) else [reply[items[(i, t)]] for t in pending[i][j].texts]
    return {i: [r if r is not None else Failed(RAISED, "no reply") for r in rs] for i, rs in replies.items()}


def _call(score: Scorer, fn: int, items: list[tuple[RowView, str]], alone: bool) -> Reply:
    try:
        values = list(score(fn, items, alone))
    except ScoreFailed as failed:
        return Failed(failed.state, failed.detail)
    except Exception as exc:  # the scorer's own conversion failed: the function is left out, never the run
        return Failed(RAISED, f"{type(exc).__name__}: {exc}")
    if len(values) != len(items):
        return Failed(RAISED, f"returned {len(values)} scores for {len(items)} texts")
    return values


__all__ = ["ScoreFailed", "Scorer", "run_rows"]
