"""Probes of the run's own reward functions on live rows: does one read only a prefix, read the thinking, or pay
a degenerate completion as much as a real answer? (the variants and the rules: :mod:`rl_guards.core.probes`)."""

from __future__ import annotations

import inspect
import json
import math
from typing import Any, ClassVar

import numpy as np

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import ProbesConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.completions import completion_text
from rl_guards.core.probe_totals import best_total, format_matters, informative, weighted_totals
from rl_guards.core.probes import (
    HACKABLE,
    HACKS,
    PREFIX,
    RAISED,
    REFERENCE_FORMS,
    SCORED,
    SUFFIX,
    THINKING,
    Assessment,
    Pair,
    ProbeFinding,
    assess,
    cut_variants,
    decode,
    encode,
    first_pass,
    narrow_prefix,
    plan,
    quorum,
    recognised,
    reference_pairs,
    second_pass,
    split,
    wrong_answer,
)
from rl_guards.errors import RewardProbeError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rewards.slicing import drain_watched

LATER_ROWS = 4  # rows per task of a scheduled probe after the first (a verdict needs 3 of them, from 2 groups)
REFERENCE_COLUMNS: tuple[str, ...] = ("answer", "solution", "ground_truth", "reference", "target", "gold", "label")
_KINDS = {PREFIX: "reads_prefix", SUFFIX: "reads_suffix", THINKING: "reads_thinking", HACKABLE: "hackable"}
_FIXES = {
    PREFIX: "Fix: remove the slice (or the start anchor) before scoring, or list the function in probes.prefix_ok "
    "if it is meant to read only the start.",
    SUFFIX: "Fix: remove the slice of the end (text[-N:]) before scoring, or list the function in probes.prefix_ok "
    "if it is meant to read only the end.",
    THINKING: "Fix: score the answer after the think block only (rl_guards.rewards.blind_judge does it for any "
    "judge), or list the function in probes.process_rewards if it is meant to grade the reasoning.",
    HACKABLE: "Fix: make the function check what it pays for (the expected format, the reference answer), or add a "
    "reward that keeps such completions below real answers; a policy finds this within a few hundred steps.",
}


def reference_column(columns: list[str] | set[str], configured: str | None) -> str | None:
    """The dataset column with each row's reference answer: ``configured``, else the first usual name present."""
    if configured:
        return configured if configured in columns else None
    return next((c for c in REFERENCE_COLUMNS if c in columns), None)


def _is_model(fn: Any) -> bool:
    return hasattr(fn, "forward") and hasattr(fn, "parameters")  # a torch module: a reward model, not probed


def _prompt_text(prompt: Any) -> str:
    """The last user message of a prompt (or the string prompt): what an echo would repeat."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content") or "")
    return ""


class RewardProbeGuard(Guard):
    """Re-scores a real row of a train batch with each reward function on controlled variants of its completion.

    Due at the first train batch, then at a train batch ``probes.every_steps`` steps after the last probe as long as
    the extra reward calls stay within ``probes.budget`` of the run's reward calls (the first probe aside). Each
    rank probes up to ``probes.rows`` of its own rows of each task, spread over the groups (those whose totals vary
    first, the best rows of each first); each function's verdict on a row is a feature of bits gathered like every
    feature (one per function: no limit on their number), so all ranks agree. A violation needs a quorum of the
    rows (:func:`rl_guards.core.probes.quorum`: at least three, most of those the probe could judge, from more
    than one group where there are several) and says on how many rows of how many it was seen.

    Cost: each function scores a cheap first pass (every pair's answers alone, the degenerate completions), then only
    the variants of the pairs it tells apart (:func:`~rl_guards.core.probes.second_pass`). A scheduled probe after
    the first keeps to ``LATER_ROWS`` rows of each task and, per function, the bare reference answer and the first
    answer form it told apart before (no real pair where there is a reference; a function that told no form apart
    gets the first pass only). The budget check takes the last later probe's calls, or before one ran the calls it
    would have made on the first probes' rows (plus those of each new task's first probe since).

    Functions probed: every plain Python reward function except those in ``probes.skip`` (reward models never). The
    calls get no-op ``log_metric``/``log_extra``, so the run's metrics and completions table never see them; the
    rewards used for training are never touched; a function that raises on a variant is left out of that probe.

    Violations (default mode warn, :class:`~rl_guards.errors.RewardProbeError`), one kind per function:
    ``reads_prefix:<fn>``, ``reads_suffix:<fn>`` (neither for ``probes.prefix_ok``), ``reads_thinking:<fn>`` (not
    for ``probes.process_rewards``), ``hackable:<fn>``; each names the function, the variant and its score, on how
    many rows of how many, and a row's prompt. :meth:`summary_text` says what the probes covered: each function's
    rows per task, the tasks it returned None on (not its task) or raised on, the functions never probed and why.

    ======================================  ==================================================================
    key                                     value
    ======================================  ==================================================================
    ``rl_guards/probes/findings``           (function, probe) findings in this batch (when non-zero)
    ``rl_guards/probes/extra_call_share``   extra reward calls so far / the run's reward calls (full only)
    ``rl_guards/probes/probed_rows``        rows probed in this batch, all ranks (full only)
    ======================================  ==================================================================
    """

    name: ClassVar[str] = "probes"
    config_field: ClassVar[str] = "probes"
    # + one verdict mask per reward function (setup); "estimate": what a later probe of these rows would cost
    FEATURES: ClassVar[tuple[str, ...]] = ("probed", "calls", "estimate")

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: ProbesConfig
        self._details: dict[int, list[dict[str, str]]] = {}  # held row -> findings with their text
        self._cache: dict[tuple[int, int], dict[str, float | None]] = {}  # (function, group) -> text -> score
        self.probes_run = 0
        self.last_step = -1
        self.extra_calls = 0.0  # extra reward calls of every probe after the first, all ranks
        self.first_calls = 0.0
        self.run_calls = 0.0  # reward calls the trainer made for train batches, all ranks
        self.last_cost = 0.0
        self.coverage: dict[str, Any] = {}  # what the probes covered so far: see summary_text()
        self.tasks_probed: set[str] = set()  # tasks whose rows were probed at least once (on this rank)
        self._regular = False  # this batch's probe is a scheduled one (not the first probe of a new task)
        self._later = False  # a scheduled probe after the first: fewer rows, each function's own answer forms
        self.forms: dict[str, list[str]] = {}  # function -> the reference forms it told apart (core.recognised)
        self._planned: dict[int, list[Any]] = {}  # probed row -> its variants (for the later probes' estimate)

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        # one feature per reward function (its verdict bits on the row): any number of functions is probed
        self.FEATURES = (*type(self).FEATURES, *(f"fn{i}" for i in range(len(ctx.reward_funcs))))  # type: ignore[misc]

    # ----- which functions, when --------------------------------------------------------------------------
    def _not_probed(self) -> dict[str, str]:
        """Reward functions never probed, and why."""
        names = self.ctx.reward_func_names or [
            getattr(f, "__name__", str(i)) for i, f in enumerate(self.ctx.reward_funcs)
        ]
        out = {}
        for name, fn in zip(names, self.ctx.reward_funcs, strict=False):
            if name in self.config.skip:
                out[name] = "listed in probes.skip"
            elif _is_model(fn) or not callable(fn):
                out[name] = "a reward model"
        return out

    def _functions(self) -> list[tuple[int, str, Any]]:
        """(index, name, function) of the reward functions probed."""
        names = self.ctx.reward_func_names or [
            getattr(f, "__name__", str(i)) for i, f in enumerate(self.ctx.reward_funcs)
        ]
        skip = set(self.config.skip)
        return [
            (i, name, fn)
            for i, (name, fn) in enumerate(zip(names, self.ctx.reward_funcs, strict=False))
            if name not in skip and callable(fn) and not _is_model(fn)
        ]

    def _reference_columns(self, columns: set[str]) -> list[str]:
        """The reference columns the probed functions take by name (at most two), else the usual one present."""
        configured = self.guards_config.reward_sanity.reference_column
        wanted = [configured] if configured else list(REFERENCE_COLUMNS)
        used: list[str] = []
        for _, _, fn in self._functions():
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            used += [c for c in wanted if c in params and c in columns and c not in used]
        if not used:
            fallback = reference_column(columns, configured)
            used = [fallback] if fallback else []
        return used[:2]

    def _due(self, batch: RolloutBatch) -> bool:
        """Whether this batch is probed (from numbers every rank shares, so every rank decides alike)."""
        if batch.mode != "train" or not self._functions():
            return False
        if self.probes_run == 0:
            return True
        if batch.step - self.last_step < self.config.every_steps:
            return False
        return self.extra_calls + self.last_cost <= self.config.budget * (
            self.run_calls + len(batch) * len(self.ctx.reward_funcs)
        )

    # ----- per batch -------------------------------------------------------------------------------------
    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        held = list(batch.held_rows)
        masks: dict[int, dict[int, int]] = {}
        calls = 0
        self._details = {}
        self._cache = {}
        self._regular = bool(held) and self._due(batch)
        self._later = self._regular and self.probes_run > 0
        rows: list[int] = []
        if self._regular:
            rows = self._rows_to_probe(batch, held, min(self.config.rows, LATER_ROWS) if self._later else None)
        elif held and batch.mode == "train" and self._functions():
            # a task the probes have not seen yet gets its first probe (counted with the first, outside the budget)
            new = [r for r in held if str(batch.tasks[r]) not in self.tasks_probed]
            rows = self._rows_to_probe(batch, new) if new else []
        estimate = 0
        if rows:
            self._planned = {}
            for row in rows:
                masks[row], made = self._probe_row(batch, row, held)
                calls += made
                self.tasks_probed.add(str(batch.tasks[row]))
            drain_watched()  # texts a watch_inputs judge saw during the probe are not the run's
            if not self._later:
                estimate = self._later_cost(batch, rows)
            self._cache = {}
            self._planned = {}
        first = [1.0] + [0.0] * (len(held) - 1) if held else []
        out = {
            "probed": [float(r in masks) for r in held],
            "calls": [v * calls for v in first],
            "estimate": [v * estimate for v in first],
        }
        for name in self.FEATURES:
            if name.startswith("fn"):
                out[name] = [float(masks.get(r, {}).get(int(name[2:]), 0)) for r in held]
        return out

    def _later_cost(self, batch: RolloutBatch, rows: list[int]) -> int:
        """The reward calls a later probe would make on these rows (its rows, its forms; the texts it would score,
        counted from this probe's scores without calling anything): the budget's estimate of the next probe."""
        texts: set[tuple[int, int, str]] = set()
        for row in self._rows_to_probe(batch, rows, min(self.config.rows, LATER_ROWS)):
            variants = self._planned.get(row)
            if variants is None:
                continue
            group = batch.group_of(row)
            for index, name, _ in self._functions():
                cache = self._cache.get((index, group), {})
                mine = self._variants_of(name, variants, later=True)
                first = first_pass(mine)
                wanted = self._second(name, mine, {v.label: cache.get(v.text) for v in first}, later=True)
                texts |= {(index, group, v.text) for v in (*first, *wanted)}
        return len(texts)

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        return json.dumps(self._details[row]) if row in self._details else None

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        feats = self.features(batch)
        calls = float(np.sum(batch.column_array(feats["calls"]))) if len(feats["calls"]) else 0.0
        if batch.mode == "train":
            self.run_calls += len(batch) * len(batch.reward_names)
        if calls <= 0:
            return
        if self.probes_run == 0 or not self._regular:
            self.first_calls += calls
        else:
            self.extra_calls += calls
        # what the next (later) probe is expected to cost: the last later probe's calls, else the first probe's
        # estimate, plus that of each new task's first probe (a later probe covers every task of its batch)
        estimate = float(np.sum(feats["estimate"])) if len(feats["estimate"]) else 0.0
        if self._regular:
            self.last_step = batch.step
            self.last_cost = calls if self._later else estimate
        else:
            self.last_cost += estimate
        self.probes_run += 1
        report.metric("probed_rows", float(sum(1 for v in feats["probed"] if v)))
        report.metric("extra_call_share", (self.extra_calls + self.first_calls) / max(self.run_calls, 1.0))
        group_of = {r: batch.group_of(r) for r in range(len(batch))}
        self._cover(batch, feats)
        total = 0
        for index, fname in enumerate(batch.reward_names):
            masks = [int(v) for v in feats.get(f"fn{index}", [])]
            verdicts = [(probe, "", *self._rows(masks, probe)) for probe in (PREFIX, SUFFIX, THINKING)]
            hacks = [(HACKABLE, label, *self._rows(masks, label)) for label in HACKS]
            hacks = [h for h in hacks if quorum(h[2], h[3], group_of)]
            verdicts += sorted(hacks, key=lambda h: -len(h[2]) / len(h[3]))[:1]  # the variant paid most often
            for probe, variant, found, tried in verdicts:
                if not quorum(found, tried, group_of):
                    continue
                total += 1
                report.violation(
                    f"{_KINDS[probe]}:{fname}",
                    lambda found=found, tried=tried, fname=fname, probe=probe, variant=variant: self._message(
                        batch, found, tried, fname, probe, variant
                    ),
                    RewardProbeError,
                    rows=[found[0]],
                )
        report.metric("findings", float(total))

    def _cover(self, batch: RolloutBatch, feats: dict[str, list[float]]) -> None:
        """Add this probe to ``coverage``: per function, rows scored per task (the latest probe of the task), tasks
        where it raised on the variants, tasks it returned None on (not its task)."""
        probed = [r for r, v in enumerate(feats["probed"]) if v]
        here: dict[str, list[int]] = {}
        for r in probed:
            here.setdefault(str(batch.tasks[r]), []).append(r)
        cov = self.coverage or {"steps": [], "tasks": {}, "functions": {}}
        cov["steps"].append(batch.step)
        cov["tasks"].update({task: len(rows) for task, rows in here.items()})
        skipped = self._not_probed()
        for index, fname in enumerate(batch.reward_names):
            if fname in skipped:
                cov["functions"][fname] = {"not_probed": skipped[fname]}
                continue
            masks = [int(v) for v in feats.get(f"fn{index}", [0.0] * len(batch))]
            entry = cov["functions"].setdefault(fname, {"rows": {}, "raised": [], "not_its_task": []})
            for task, rows in sorted(here.items()):
                entry["rows"].pop(task, None)  # the latest probe of the task says it
                entry["raised"] = [t for t in entry["raised"] if t != task]
                entry["not_its_task"] = [t for t in entry["not_its_task"] if t != task]
                scored = sum(decode(masks[r], SCORED)[0] for r in rows)
                if scored:
                    entry["rows"][task] = scored
                elif any(decode(masks[r], RAISED)[0] for r in rows):
                    entry["raised"].append(task)
                else:
                    entry["not_its_task"].append(task)
        self.coverage = cov

    def summary_text(self) -> str:
        """What the probes covered (functions x tasks x rows), what they could not and why, and their cost."""
        cov = self.coverage
        if not cov:
            return "probes: nothing probed yet"
        tasks = ", ".join(f"{t or '(no task)'} {n}" for t, n in sorted(cov["tasks"].items()))
        steps = ", ".join(str(step) for step in cov["steps"])
        share = (self.first_calls + self.extra_calls) / max(self.run_calls, 1.0)
        lines = [
            f"probes at step(s) {steps}: rows per task {tasks}; {self.first_calls + self.extra_calls:.0f} extra reward "
            f"calls ({share:.1%} of the run's, {self.extra_calls:.0f} after the first probes)"
        ]
        for fname, entry in cov["functions"].items():
            if "not_probed" in entry:
                lines.append(f"  {fname}: not probed ({entry['not_probed']})")
                continue
            parts = [f"{t or '(no task)'} {n} rows" for t, n in sorted(entry["rows"].items())]
            if entry["raised"]:
                parts.append(f"raised on the variants of {', '.join(entry['raised'])} (not judged there)")
            if entry["not_its_task"]:
                parts.append(f"None on {', '.join(entry['not_its_task'])} (not its task)")
            lines.append(f"  {fname}: " + "; ".join(parts or ["no rows"]))
        return "\n".join(lines)

    @staticmethod
    def _rows(masks: list[int], key: str) -> tuple[list[int], list[int]]:
        """(rows where ``key`` was found, rows where it was tried) from one function's verdict masks."""
        tried = [r for r, m in enumerate(masks) if decode(m, key)[0]]
        return [r for r in tried if decode(masks[r], key)[1]], tried

    # ----- one row ---------------------------------------------------------------------------------------
    def _rows_to_probe(self, batch: RolloutBatch, held: list[int], limit: int | None = None) -> list[int]:
        """Up to ``probes.rows`` held rows of each task, taken in turn from its groups (those whose totals vary
        first; in each group the best rows first): several rows from several groups for the quorum."""
        totals = batch.weighted_totals
        groups: dict[int, list[int]] = {}
        for row in held:
            groups.setdefault(batch.group_of(row), []).append(row)
        by_task: dict[str, list[list[int]]] = {}
        for rows in groups.values():
            task = batch.tasks[rows[0]] if batch.tasks else ""
            by_task.setdefault(str(task), []).append(sorted(rows, key=lambda r: (-totals[r], r)))
        chosen: list[int] = []
        for _, task_groups in sorted(by_task.items()):
            task_groups.sort(key=lambda rows: (-float(np.ptp(totals[rows])), rows[0]))
            order = [g[d] for d in range(max(len(g) for g in task_groups)) for g in task_groups if d < len(g)]
            chosen += order[: limit or self.config.rows]
        return sorted(chosen)

    def _probe_row(self, batch: RolloutBatch, row: int, held: list[int]) -> tuple[dict[int, int], int]:
        """Each probed function's verdict mask on ``row`` (:func:`rl_guards.core.probes.encode`), and the calls."""
        inputs, prompts, completions, _, state = _reward_inputs(batch, held)
        local = held.index(row)
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        opened = bool(batch.prompt_opened[row]) if batch.prompt_opened else False
        text = completion_text(completions[local], markup, prompt_opened=opened)
        thinking, _ = split(text, markup, opened)
        mode = batch.thinking[row]  # an explicitly non-thinking row gets no block, whatever the model wrote
        thinks = mode is True or opened or (mode is None and thinking is not None)
        group = [r for r in held if batch.group_of(r) == batch.group_of(row)]
        totals = batch.weighted_totals
        pairs: list[Pair] = []
        worst_row = min(group, key=lambda r: (totals[r], r))
        if totals[row] > totals[worst_row]:
            worst_text = completion_text(completions[held.index(worst_row)], markup, prompt_opened=opened)
            pairs.append(Pair("real", split(text, markup, opened)[1], split(worst_text, markup, opened)[1]))
        columns = {k: v for k, v in inputs[local].items() if k not in ("prompt", "completion", "completion_ids")}
        reference = other = None
        for ref_col in self._reference_columns(set(columns)):
            if columns.get(ref_col) is None:
                continue
            ref = str(columns[ref_col])
            others = [str(x[ref_col]) for x in inputs if x.get(ref_col) is not None and str(x[ref_col]) != ref]
            if not others:
                continue
            reference, other = (ref, others[0]) if reference is None else (reference, other)
            name = "reference" if ref_col == self._reference_columns(set(columns))[0] else f"reference[{ref_col}]"
            pairs += reference_pairs(name, ref, wrong_answer(ref, others))
        longest = max((len(completion_text(c)) for c in completions), default=0)
        variants = plan(
            pairs,
            thinks=thinks,
            markup=markup,
            prompt_opened=opened,
            thinking_text=thinking,
            prompt_text=_prompt_text(prompts[local]),
            reference=reference,
            other_answer=other,
            longest=longest,
            real_has_block=thinking is not None,
        )
        self._planned[row] = variants
        probed = {i: name for i, name, _ in self._functions()}
        masks: dict[int, int] = {}
        scores: dict[int, list[float | None]] = {}
        made = 0
        for index, name, fn in self._functions():
            # rows of one group share the prompt and the columns: a text scored for one is not scored again
            cache = self._cache.setdefault((index, batch.group_of(row)), {})
            mine = self._variants_of(name, variants, later=self._later)
            first = first_pass(mine)
            try:
                # the cheap pass first; then only what it says this function can be judged on (second_pass)
                made += self._fill(cache, first, fn, prompts[local], completions[local], columns, state)
                wanted = self._second(name, mine, {v.label: cache[v.text] for v in first}, later=self._later)
                made += self._fill(cache, wanted, fn, prompts[local], completions[local], columns, state)
            except _ScoringFailed as failed:  # it cannot score a variant: not probed this time, never the run's problem
                masks[index] = encode(None, raised=True)
                made += failed.calls  # the calls were made all the same
                continue
            labels = {v.label for v in mine}  # None: not scored (not needed for this function)
            scores[index] = [cache.get(v.text) if v.label in labels else None for v in variants]
            learned = self.forms.setdefault(name, [])
            learned += [p for p in recognised(variants, scores[index]) if p not in learned]
        weights = batch.reward_weights
        matrix = batch.reward_matrix
        fallback = {}  # a function not probed counts what it paid the worst real completion
        for f in range(len(weights)):
            if f not in scores:
                column = matrix[group, f] if f < matrix.shape[1] else np.array([0.0])
                fallback[f] = float(np.nanmin(column)) if not np.isnan(column).all() else 0.0
        totals_of = weighted_totals(variants, scores, weights, fallback)
        best = best_total(float(np.max(totals[group])), pairs, totals_of)
        # where the run's total does not pay a right answer more than a wrong one on this row (nobody right yet, no
        # reference), "as much as the best" says nothing: a degenerate variant must earn strictly more
        strict = not informative(pairs, totals_of)
        matters = format_matters(variants, scores)
        details: list[dict[str, str]] = []
        for index, name in probed.items():
            if index not in scores or all(v is None for v in scores[index]):
                continue  # not its task (None for every variant), or it failed: not tried on this row
            column = matrix[group, index] if index < matrix.shape[1] else np.array([math.nan])
            real = column[~np.isnan(column)]
            assessment = assess(
                variants,
                scores[index],
                real_best=float(real.max()) if real.size else None,
                real_worst=float(real.min()) if real.size else None,
                totals=totals_of,
                best_total=best,
                check_prefix=name not in self.config.prefix_ok,
                check_thinking=name not in self.config.process_rewards,
                format_matters=matters,
                strict=strict,
            )
            findings = []
            for finding in assessment.findings:
                if finding.probe == PREFIX and finding.pair:
                    finding, extra = self._bisect(finding, index, pairs, thinks, markup, opened, batch, row, held)
                    made += extra
                findings.append(finding)
            assessment = Assessment(findings, assessment.tried)
            masks[index] = encode(assessment)
            for finding in assessment.findings:
                details.append(
                    {"function": name, "probe": finding.probe, "variant": finding.variant, "detail": finding.detail}
                )
        if details:
            self._details[row] = details
        return masks, made

    def _bisect(
        self,
        finding: ProbeFinding,
        index: int,
        pairs: list[Pair],
        thinks: bool,
        markup: Any,
        opened: bool,
        batch: RolloutBatch,
        row: int,
        held: list[int],
    ) -> tuple[ProbeFinding, int]:
        """The prefix finding with its cut narrowed by bisection between the lengths tried; the extra calls."""
        pair = next((p for p in pairs if p.name == finding.pair), None)
        if pair is None:
            return finding, 0
        inputs, prompts, completions, _, state = _reward_inputs(batch, held)
        local = held.index(row)
        columns = {k: v for k, v in inputs[local].items() if k not in ("prompt", "completion", "completion_ids")}
        fn = next(f for i, _, f in self._functions() if i == index)
        cache = self._cache.setdefault((index, batch.group_of(row)), {})  # shared with the probe's own scores
        calls = 0

        def scores_at(k: int) -> list[float | None]:
            nonlocal calls
            texts = list(cut_variants(pair, k, thinks=thinks, markup=markup, prompt_opened=opened))
            todo = [t for t in texts if t not in cache]
            if todo:
                fresh = self._score(fn, todo, prompts[local], completions[local], columns, state)
                cache.update(zip(todo, fresh, strict=True))
                calls += len(todo)
            return [cache[t] for t in texts]

        return narrow_prefix(finding, scores_at), calls

    def _variants_of(self, name: str, variants: list[Any], *, later: bool) -> list[Any]:
        """The variants probing function ``name``: all of them, except on a later probe, where the reference pairs
        keep to the bare answer and the first form the function told apart before (its code does not change; one
        form it reads shows a slice or a read of the thinking as well as all of them)."""
        if not later:
            return variants
        keep = set(self.forms.get(name, [])[:1])
        forms = tuple(f"-{form}" for form, _ in REFERENCE_FORMS)
        # with a reference answer the real pair adds nothing the reference pairs do not show (where a function
        # reads, whether it reads the thinking); its best and worst scores come from the batch, not from variants
        references = any(v.label.startswith("reference") for v in variants)
        return [
            v for v in variants
            if not (references and v.label.startswith("real:"))
            and (not v.label.startswith("reference") or not (pair := v.label.split(":")[0]).endswith(forms)
                 or pair in keep)
        ]  # fmt: skip

    def _second(self, name: str, mine: list[Any], first: dict[str, float | None], *, later: bool) -> list[Any]:
        """The second pass of function ``name``; on a later probe none for a function that told no reference form
        apart before (a format or length term: judged on degenerate completions only, which the first pass holds)."""
        if later and not self.forms.get(name) and any(v.label.startswith("reference") for v in mine):
            return []
        return second_pass(mine, first)

    def _fill(
        self, cache: dict[str, float | None], variants: list[Any], fn: Any, prompt: Any, original: Any,
        columns: dict[str, Any], state: Any,
    ) -> int:  # fmt: skip
        """Score the texts of ``variants`` not in ``cache`` yet, in one call; the calls made."""
        todo = [text for text in dict.fromkeys(v.text for v in variants) if text not in cache]
        if not todo:
            return 0
        try:
            fresh = self._score(fn, todo, prompt, original, columns, state)
        except Exception as exc:
            raise _ScoringFailed(len(todo)) from exc
        cache.update(zip(todo, fresh, strict=True))
        return len(todo)

    def _score(
        self, fn: Any, texts: list[str], prompt: Any, original: Any, columns: dict[str, Any], state: Any
    ) -> list[float | None]:
        from rl_guards.rewards.calls import call_reward  # the adapter-side caller (awaits async functions)

        n = len(texts)
        return call_reward(
            fn,
            prompts=[prompt] * n,
            completions=[_shaped_like(original, text) for text in texts],
            completion_ids=self._ids_of(texts),
            columns={k: [value] * n for k, value in columns.items()},
            trainer_state=state,
        )

    def _ids_of(self, texts: list[str]) -> list[list[int]]:
        """The variants' completion ids (EOS appended, as TRL's rows end): one batch encode (a fast tokenizer spreads
        it over its threads), else text by text; [] for a text the tokenizer cannot encode."""
        tokenizer = self.ctx.tokenizer
        if tokenizer is None:
            return [[] for _ in texts]
        eos = self.ctx.eos_token_ids[:1]
        try:
            return [list(ids) + eos for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        except Exception:
            pass
        out: list[list[int]] = []
        for text in texts:
            try:
                out.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]) + eos)
            except Exception:
                out.append([])
        return out

    def _message(
        self, batch: RolloutBatch, found: list[int], tried: list[int], fname: str, probe: str, variant: str
    ) -> str:
        row = found[0]
        text = batch.evidence.get((self.name, row))
        if text is None and batch.holds(row):
            text = self.row_evidence(batch, row)
        details = json.loads(text) if text else []
        detail = next(
            (
                d["detail"]
                for d in details
                if d["function"] == fname and d["probe"] == probe and d.get("variant", "") == variant
            ),
            "(on another rank)",
        )
        prompt = _prompt_text(batch.prompts[row]) if row < len(batch.prompts) and batch.prompts[row] is not None else ""
        groups = len({batch.group_of(r) for r in found})
        return (
            f"reward function {fname!r} {detail}.\n  seen on {len(found)} of the {len(tried)} rows probed for this "
            f"({groups} group(s)); e.g. row {row} (task {batch.tasks[row]!r}, step {batch.step}), prompt: "
            f"{prompt[-160:]!r}\n  {_FIXES[probe]}"
        )

    # ----- resume ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "probes_run": self.probes_run,
            "last_step": self.last_step,
            "extra_calls": self.extra_calls,
            "first_calls": self.first_calls,
            "run_calls": self.run_calls,
            "last_cost": self.last_cost,
            "tasks_probed": sorted(self.tasks_probed),
            "forms": {k: list(v) for k, v in self.forms.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, type(getattr(self, key))(value))


class _ScoringFailed(Exception):
    """A reward function raised on probe variants (``calls``: the calls made all the same)."""

    def __init__(self, calls: int) -> None:
        super().__init__(calls)
        self.calls = calls


def _reward_inputs(batch: RolloutBatch, held: list[int]) -> tuple[list[dict[str, Any]], list[Any], list[Any], Any, Any]:
    """What TRL handed the reward functions for the held rows; rebuilt from the batch when it was built by hand."""
    if batch.reward_inputs is not None:
        inputs, prompts, completions, ids, *rest = batch.reward_inputs
        return list(inputs), list(prompts), list(completions), ids, rest[0] if rest else None
    inputs = [{k: v[r] for k, v in batch.columns.items()} | {"prompt": batch.prompts[r]} for r in held]
    return inputs, [batch.prompts[r] for r in held], [batch.completions[r] for r in held], None, None


def _shaped_like(original: Any, text: str) -> Any:
    """``text`` in the shape TRL handed the original completion (a string, or assistant messages)."""
    if isinstance(original, list) and original and isinstance(original[0], dict):
        message = {k: v for k, v in original[0].items() if k not in ("reasoning_content", "reasoning")}
        return [{**message, "content": text}]
    return text
