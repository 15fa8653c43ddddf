"""Probes of the run's own reward functions on live rows: does one read only a prefix or suffix, read the thinking,
or pay a degenerate completion as much as a right answer? (the procedure and rules: :mod:`rl_guards.core.probing`).

This guard schedules the probes and keeps them within their time budget; the procedure itself is the one the
offline audit runs, and each call goes to the function through its framework's caller (``ctx.checked_calls``).
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import ProbesConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.probing.calls import RAISED, STALLED, FunctionPlan
from rl_guards.core.probing.procedure import RowView, noting_latent_cuts
from rl_guards.core.probing.runner import ScoreFailed, run_rows
from rl_guards.core.probing.tally import Tally, decode, encode, findings_of
from rl_guards.core.probing.variants import FALLBACK
from rl_guards.errors import RewardProbeError
from rl_guards.guards import probe_budget, probe_report, probe_views
from rl_guards.guards.base import Guard, Reporter
from rl_guards.guards.probe_budget import LATER_ROWS, SPARE
from rl_guards.guards.probe_report import KINDS
from rl_guards.rewards.checked_calls import Stalled
from rl_guards.rewards.slicing import drain_watched


def _no_scores(fn: int, items: Any, alone: bool) -> list[float | None]:
    raise AssertionError("not called: the pass is refused")  # run_rows only builds the rows' variants here


class RewardProbeGuard(Guard):
    """Re-scores real rows of train batches with each reward function on controlled variants of their completions.

    When: the first train batch the budget allows, then again ``probes.every_steps`` steps later, for as long as the
    run goes (completions change form as it trains). Budget: the probes' wall time stays within ``probes.budget`` of
    the run's elapsed time on this rank, at every step: a probe is sized to the time it may take (each function's
    cost per text measured on the run's own calls), and a pass that would go past the budget is not started. Each
    rank probes up to ``probes.rows`` of its rows per task (``LATER_ROWS`` after the first probe, and only the answer
    forms each function told apart before); each function's result on a row crosses ranks as bits, so every rank
    reaches the same verdicts. Every call is bounded in time (``probes.call_timeout`` at most): a function that
    overruns is left out of later probes, with a ``stalled:<fn>`` finding naming the text it was on.

    Violations (default mode warn, :class:`~rl_guards.errors.RewardProbeError`), one kind per function:
    ``reads_prefix:<fn>``, ``reads_suffix:<fn>`` (neither for ``probes.prefix_ok``), ``reads_thinking:<fn>`` (not
    for ``probes.process_rewards``), ``hackable:<fn>`` (the run's weighted total pays a degenerate completion as
    much as a right answer, and this function pays it), ``stalled:<fn>``. A function that grades the thinking only
    where the answer after it is not in a form it reads (a fallback) is not reported in a run; the audit notes it.

    ======================================  ==================================================================
    key                                     value
    ======================================  ==================================================================
    ``rl_guards/probes/findings``           (function, probe) findings in this batch (when non-zero)
    ``rl_guards/probes/time_share``         probe seconds / the run's elapsed seconds, this rank (full only)
    ``rl_guards/probes/probed_rows``        rows probed in this batch, all ranks (full only)
    ======================================  ==================================================================
    """

    name: ClassVar[str] = "probes"
    config_field: ClassVar[str] = "probes"
    FEATURES: ClassVar[tuple[str, ...]] = ("probed",)  # + one verdict mask per reward function (setup)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: ProbesConfig
        self.rounds = 0
        self.aborted = 0  # rounds the budget stopped before any row finished (no verdict: not counted in rounds)
        self._prep = 0.0  # seconds to build one row's variants (the most seen)
        self._row_cost = 0.0  # seconds a row of the last whole round cost, all in
        self.last_step = -1
        self.spent = 0.0  # seconds spent probing (this rank)
        self.elapsed = 0.0  # seconds of the run seen (this rank), probes included
        self.forms: dict[str, list[str]] = {}  # function -> the answer forms it told apart (later probes keep to them)
        self.texts: list[int] = []  # texts scored by each probe round (this rank)
        self.tasks_probed: set[str] = set()
        self.coverage: dict[str, Any] = {}
        self._tick: float | None = None
        self._details: dict[int, list[dict[str, str]]] = {}

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        self.FEATURES = (*type(self).FEATURES, *(f"fn{i}" for i in range(len(ctx.reward_funcs))))  # type: ignore[misc]

    def _functions(self) -> list[tuple[int, str]]:
        """(index, name) of the functions probed: every one the driver can call, but ``probes.skip`` and stalled."""
        funcs = self.ctx.reward_funcs
        names = self.ctx.reward_func_names or [getattr(f, "__name__", str(i)) for i, f in enumerate(funcs)]
        return [(i, name) for i, name in enumerate(names) if self._may_call(i, name)]

    def on_train_begin(self, report: Reporter) -> None:
        self._tick = time.perf_counter()  # the run's clock starts here: the first batch's generation counts

    def _allowance(self) -> float:
        return self.config.budget * self.elapsed - self.spent

    # ----- per batch -------------------------------------------------------------------------------------
    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        held = list(batch.held_rows)
        now = time.perf_counter()
        if batch.mode == "train":
            self.elapsed += 0.0 if self._tick is None else now - self._tick
            self._tick = now
        self._details = {}
        results: dict[int, Any] = {}
        functions = self._functions()
        first_of_task = {str(batch.tasks[r]) for r in held} - self.tasks_probed
        due = self.rounds == 0 or batch.step - self.last_step >= self.config.every_steps or bool(first_of_task)
        if held and batch.mode == "train" and functions and due:
            results = self._probe(batch, held, functions)
        out: dict[str, list[float]] = {"probed": [float(r in results) for r in held]}
        for name in self.FEATURES[1:]:
            fn = int(name[2:])
            out[name] = [float(encode(results.get(r), fn, earnable=True)) for r in held]
        return out

    def _probe(self, batch: RolloutBatch, held: list[int], functions: list[tuple[int, str]]) -> dict[int, Any]:
        calls = self.ctx.checked_calls
        start = time.perf_counter()
        probe_budget.calibrate(calls, batch, held, functions, lambda: self._allowance() - (time.perf_counter() - start))
        reference = probe_views.reference_column(
            list(batch.columns), [self.ctx.reward_funcs[i] for i, _ in functions],
            self.guards_config.reward_sanity.reference_column,
        )  # fmt: skip
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        plans = [
            FunctionPlan(
                i, name, float(batch.reward_weights[i]) if i < len(batch.reward_weights) else 1.0,
                check_prefix=name not in self.config.prefix_ok, check_thinking=name not in self.config.process_rewards,
                forms=tuple(self.forms[name]) if self.rounds and self.forms.get(name) else None,
            )
            for i, name in functions
        ]  # fmt: skip

        def prepare(rows: list[int]) -> tuple[dict[int, Any], list[RowView]]:
            found = probe_views.call_rows(batch, rows, reference)
            return found, probe_views.views(batch, rows, found, markup, [i for i, _ in functions])

        if not self._prep:  # what building a row's variants costs here, timed on one row before any is promised
            self._prep = probe_budget.timed_seconds(
                lambda: run_rows(prepare(held[:1])[1], plans, _no_scores, may_continue=lambda pending: False)
            )
        fixed, per_row = probe_budget.round_cost(calls, functions, self._row_cost, self._prep)
        tasks = len({str(batch.tasks[r]) for r in held})
        room = max(self._allowance() - (time.perf_counter() - start) - fixed, 0.0)
        fits = int(room / per_row) // tasks if per_row > 0 else self.config.rows
        limit = min(self.config.rows, LATER_ROWS if self.rounds else self.config.rows, fits)
        rows = probe_budget.rows_to_probe(batch, held, limit)
        if len(rows) < min(3, len(held)):
            self.spent += time.perf_counter() - start
            return {}  # not within the budget yet
        call_rows, views = prepare(rows)

        def score(fn: int, items: Any, alone: bool) -> list[float | None]:
            try:
                return calls(fn, [call_rows[int(v.key)] for v, _ in items], [t for _, t in items])
            except Stalled as exc:  # any other exception: run_rows scores it RAISED, with its type and text
                raise ScoreFailed(STALLED, str(exc)) from None

        passes = [0]

        def may_continue(pending: Any) -> bool:  # a pass that would go past the budget is not started
            spent = time.perf_counter() - start
            expected = probe_budget.pass_cost(calls, pending)
            go = spent + SPARE * expected <= max(self._allowance(), 0.0)  # room for a slower pass than timed
            passes[0] += go
            return go

        done = run_rows(views, plans, score, fallback=probe_views.fallback(batch, rows),
                        weights_of=len(batch.reward_names), may_continue=may_continue)  # fmt: skip
        drain_watched()  # texts a watch_inputs judge saw during the probe are not the run's
        self.spent += time.perf_counter() - start
        self.last_step = batch.step
        if not passes[0] or all(r is None for r in done):
            self.aborted += 1  # the budget stopped it before any row finished: the next due batch tries again
            return {}
        self.rounds += 1
        self.texts.append(sum(r.texts for r in done if r is not None))
        if all(r is not None for r in done):  # a whole round: what a row cost, all in (the next round's estimate)
            self._row_cost = (time.perf_counter() - start) / len(rows)
        results = {int(r.view.key): noting_latent_cuts(r) for r in done if r is not None}
        self.tasks_probed |= {str(batch.tasks[r]) for r in results}
        for r in results.values():
            self._learn(r, plans)
        return results

    def _learn(self, result: Any, plans: list[FunctionPlan]) -> None:
        details = []
        for plan in plans:
            fr = result.functions.get(plan.index)
            if fr is None:
                continue
            learned = self.forms.setdefault(plan.name, [])
            learned += [f for f in fr.assessment.told if f not in learned]
            _, found = findings_of(result, plan.index, earnable=True)
            details += [{"function": plan.name, "key": k, "detail": f.detail} for k, f in found.items()]
            if fr.state in (STALLED, RAISED):
                details.append({"function": plan.name, "key": fr.state, "detail": fr.detail})
        if details:
            self._details[int(result.view.key)] = details

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        return json.dumps(self._details[row]) if row in self._details else None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        feats = self.features(batch)
        probed = [r for r, v in enumerate(feats["probed"]) if v]
        if not probed:
            return
        report.metric("probed_rows", float(len(probed)))
        report.metric("time_share", self.spent / max(self.elapsed, 1e-9))
        tally = Tally()
        functions = range(len(batch.reward_names))
        for fn in functions:
            masks = [int(v) for v in feats.get(f"fn{fn}", [0.0] * len(batch))]  # a column it has no caller for
            for r in probed:
                tally.add_mask(r, batch.group_of(r), fn, masks[r])
                if decode(masks[r], STALLED)[0]:
                    probe_report.stalled(self, batch, report, fn, r)
        total = 0
        for verdict in tally.verdicts(list(functions)):
            fname, probe = batch.reward_names[verdict.fn], verdict.probe
            if probe == FALLBACK:  # the thinking graded only where the answer has none it reads: not an alarm
                continue
            total += 1
            message = probe_report.message(self, batch, list(verdict.found), list(verdict.tried), fname, verdict.key)
            report.violation(f"{KINDS[probe]}:{fname}", message, RewardProbeError, rows=[verdict.found[0]])
        report.metric("findings", float(total))
        calls = getattr(self.ctx, "checked_calls", None)
        usable = {fn for fn in functions if calls is not None and (calls.usable(fn) or fn in calls.stalled)}
        self.coverage = probe_report.cover(self.coverage, batch, probed, feats, usable)

    def summary_text(self) -> str:
        """What the probes covered (functions x tasks x rows), what they could not and why, and their cost."""
        return probe_report.summary(self)

    # ----- resume ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "aborted": self.aborted,
            "last_step": self.last_step,
            "spent": self.spent,
            "elapsed": self.elapsed,
            "tasks_probed": sorted(self.tasks_probed),
            "forms": {k: list(v) for k, v in self.forms.items()},
            "texts": list(self.texts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, type(getattr(self, key))(value))


__all__ = ["RewardProbeGuard", "RowView"]
