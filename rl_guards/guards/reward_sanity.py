"""Reward sanity preflight: known-good completions must outscore known-bad ones, before step 0."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import RewardSanityConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.probing.forms import FORMS
from rl_guards.errors import ConfigError, RewardSanityError
from rl_guards.guards import probe_views
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rewards.callables import reward_name
from rl_guards.rewards.reference_pairs import (
    REFERENCE_COLUMNS,
    check_reference_pairs,
    pick_calls,
    pick_rows,
    reference_column,
)
from rl_guards.rewards.sanity import check_reward_sanity, load_reward_cases, sanity_message
from rl_guards.rewards.slicing import drain_watched


class RewardSanityGuard(Guard):
    """Scores the cases of ``reward_sanity.cases_file`` with the trainer's reward functions at train start.

    See :mod:`rl_guards.rewards.sanity` for the case format and the rule (``min(good) > max(bad)`` for every
    function that serves the case's task). Without a cases file, ``reward_sanity.auto_cases`` rows per task with a
    reference answer are checked right-against-wrong (:mod:`rl_guards.rewards.reference_pairs`); when neither is
    possible, a one-time ``skipped`` warning says how to enable the check.

    ======================================  ============================================================
    key                                     value
    ======================================  ============================================================
    ``rl_guards/reward_sanity/failures``    failing (function, case) pairs, plus tasks nothing scores
    ``rl_guards/reward_sanity/checked``     (function, case) pairs where the function serves the case
    ======================================  ============================================================

    Violation ``reward_sanity`` (:class:`~rl_guards.errors.RewardSanityError`, default mode raise) with the
    table of scores; when all pass, an ``info`` finding with the same table.
    """

    name: ClassVar[str] = "reward_sanity"
    config_field: ClassVar[str] = "reward_sanity"

    FEATURES: ClassVar[tuple[str, ...]] = ("pairs",)  # per row: 0 not checked, 1 checked, 2 its task failed

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: RewardSanityConfig
        self._deferred = False  # no dataset rows at start: checked on the first train batch's call records
        self._batch_result: tuple[Any, int, int] | None = None

    def on_train_begin(self, report: Reporter) -> None:
        if not self.config.cases_file:
            if self.ctx.train_dataset is None and self._callable():
                self._deferred = True  # the driver's first batch brings the rows (and how the framework calls them)
                return
            self._from_reference_column(report)
            return
        try:
            cases = load_reward_cases(self.config.cases_file)
        except (ConfigError, OSError, ValueError) as exc:  # a bad cases file is the user's to fix, not a guard bug
            report.violation(
                "cases_file",
                f"reward_sanity.cases_file {self.config.cases_file!r} could not be read: {exc}",
                RewardSanityError,
            )
            return
        weights = getattr(self.ctx.args, "reward_weights", None)
        if weights is not None and len(weights) != len(self.ctx.reward_funcs):
            weights = None
        result = check_reward_sanity(
            self.ctx.reward_funcs,
            cases,
            task_column=self.guards_config.tasks.task_column,
            weights=weights,
            shaping=self.config.shaping,
        )
        report.metric("failures", float(len(result.failures) + len(result.unserved_tasks)))
        report.metric("checked", float(sum(r.status != "not_served" for r in result.results)))
        if result.ok:
            report.note(
                "reward_sanity_ok", f"reward functions rank good above bad on {len(cases)} case(s):\n" + result.table()
            )
        else:
            report.violation("reward_sanity", sanity_message(result), RewardSanityError)

    def _from_reference_column(self, report: Reporter) -> None:
        """No cases file: right against wrong reference answers from the dataset, or say once that it was skipped."""
        cfg = self.config
        tasks = self.guards_config.tasks
        dataset = self.ctx.train_dataset
        calls = self.ctx.checked_calls
        indices = [i for i, f in enumerate(self.ctx.reward_funcs) if self._may_call(i, reward_name(f))]
        funcs = [self.ctx.reward_funcs[i] for i in indices]
        columns = list(getattr(dataset, "column_names", None) or [])
        column = reference_column(columns, funcs, cfg.reference_column) if cfg.auto_cases else None
        rows = []
        if column is not None and funcs:
            sample = [row for _, row in zip(range(_SCAN_ROWS), dataset, strict=False) if isinstance(row, dict)]
            rows = pick_rows(sample, column, tasks.task_column, cfg.auto_cases, tasks.default_task)
        if not rows:
            if not cfg.auto_cases:
                why = "reward_sanity.auto_cases is 0"
            elif not funcs:
                why = "no plain Python reward function to call"
            else:
                why = f"the dataset has no reference column ({', '.join(REFERENCE_COLUMNS)}) with two different answers"
            report.note(
                "skipped",
                f"reward sanity check skipped: no reward_sanity.cases_file and {why}. Set reward_sanity.cases_file "
                "(known-good and known-bad completions per task) or reward_sanity.reference_column to check that the "
                "reward functions pay right answers more than wrong ones before step 0.",
            )
            return
        weights = [float(w) for w in getattr(self.ctx.args, "reward_weights", None) or []]
        all_names = [reward_name(f) for f in self.ctx.reward_funcs]
        if len(weights) == len(all_names):
            weights = [weights[all_names.index(reward_name(f))] for f in funcs]
        else:
            weights = [1.0] * len(funcs)
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        names = [reward_name(f) for f in funcs]

        def score(f: int, call_rows: Any, texts: Any) -> Any:  # bounded in time, as the run's framework calls it
            return calls(indices[f], call_rows, texts)

        result = check_reference_pairs(names, score, rows, weights=weights, markup=markup)
        drain_watched()  # what a watch_inputs judge saw of these made-up answers is not the run's
        named = bool(cfg.reference_column) or any(column in _params(f) for f in funcs)
        self._judge(report, result, repr(column), f"column {column!r}", named, (len(rows), len(funcs)))

    def _judge(
        self, report: Reporter, result: Any, source: str, header: str, named: bool, size: tuple[int, int]
    ) -> None:
        """Metrics, notes and the violation of a right-vs-wrong check (``size``: rows, functions) of the ``source``
        answers (``header``: where they came from)."""
        rows, funcs = size
        cfg = self.config
        inverted = [k for k in result.inverted if k[0] not in cfg.shaping]
        # a function that raised or stalled left the weighted total unknown: no verdict on the total then
        blind = result.total_blind if named and not result.errors else []
        for fname, error in sorted(result.errors.items()):
            report.notice(
                f"unchecked:{fname}",
                f"{fname} could not be checked on the {source} answers: {error}. The weighted total is not judged "
                "either. If it stalled, give it a timeout of its own (a judge API's) or raise probes.call_timeout; if "
                "it raised, these are plain answers in the usual forms: check what it expects.",
            )
        report.metric("failures", float(len(inverted) + len(blind)))
        report.metric("checked", float(rows * funcs))
        if result.total_blind and not named:  # no function takes the column: it may not be what they score against
            report.notice(
                "total_blind",
                f"the weighted reward never paid the {source} answer more than another row's, in any usual form, on "
                f"task(s) {result.total_blind}; no reward function takes it by name, so it may not be what "
                "they compare against. If it is, the reward is constant or broken for these tasks (every group dead); "
                "set reward_sanity.reference_column to make this an error, or give a cases_file.",
            )
        if not inverted and not blind:
            if not result.total_blind:
                report.note(
                    "reward_sanity_ok",
                    f"reward functions pay {source} answers more than other rows' answers on {rows} row(s)",
                )
            return
        lines = [f"reward functions checked on {rows} row(s), right vs wrong answers from {header}:"]
        for fname, task in inverted:
            lines.append(
                f"  {fname} pays a wrong answer more than the right one on task {task!r} and never the reverse: "
                f"{result.examples[(fname, task)]}"
            )
        for task in blind:
            lines.append(
                f"  task {task!r}: the weighted total never pays the right answer more than a wrong one, in any form "
                f"tried ({', '.join(FORMS.values()).replace('{}', 'X')}, with and without a think block)"
            )
        lines.append(
            "Fix: check the reward's sign and the column it compares against; if the column is not the answer, set "
            "reward_sanity.reference_column (or a cases_file); name shaping terms in reward_sanity.shaping."
        )
        report.violation("reference_pairs", "\n".join(lines), RewardSanityError)

    # ----- drivers with no dataset rows at start (verl, tinker-cookbook): the first train batch's call records -----
    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        held = list(batch.held_rows)
        codes = [0.0] * len(held)
        if not self._deferred or batch.mode != "train":
            return {"pairs": codes}
        self._deferred = False
        recorded = probe_views.recorded_rows(batch)
        indices = self._callable()
        if recorded is None or not indices or not self.config.auto_cases:
            return {"pairs": codes}
        calls = [(str(batch.tasks[r]), recorded[i]) for i, r in enumerate(held)]
        rows = pick_calls(calls, self.config.auto_cases)
        if not rows:
            return {"pairs": codes}
        checks = self.ctx.checked_calls
        names = [self.ctx.reward_func_names[i] for i in indices]
        weights = [float(batch.reward_weights[i]) if i < len(batch.reward_weights) else 1.0 for i in indices]
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)

        def score(f: int, call_rows: Any, texts: Any) -> Any:  # bounded in time, as the run's framework calls it
            return checks(indices[f], call_rows, texts)

        result = check_reference_pairs(names, score, rows, weights=weights, markup=markup)
        drain_watched()
        self._batch_result = (result, len(rows), len(indices))
        bad = {t for _, t in result.inverted} | set(result.total_blind)
        position = {id(call): i for i, (_, call) in enumerate(calls)}
        for row in rows:
            i = position.get(id(row.call))
            if i is not None:
                codes[i] = 2.0 if row.task in bad else 1.0
        return {"pairs": codes}

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        codes = self.features(batch)["pairs"]
        if not any(codes):
            return
        found, self._batch_result = self._batch_result, None
        if found is not None:
            self._judge(report, found[0], "reference", "the first batch's references", True, (found[1], found[2]))
        elif any(c >= 2 for c in codes):
            report.violation(
                "reference_pairs",
                "reward functions pay a wrong reference answer more than the right one on another rank's rows of "
                "the first batch (that rank's log shows them). Fix: check the reward's sign and the reference it "
                "compares against.",
                RewardSanityError,
            )

    def _callable(self) -> list[int]:
        names = self.ctx.reward_func_names or [reward_name(f) for f in self.ctx.reward_funcs]
        return [i for i, name in enumerate(names) if self._may_call(i, name)]


_SCAN_ROWS = 2000  # dataset rows looked at for reference cases


def _params(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()
