"""A reward function the run never gets: one score on every row of a task, below what it pays a right answer, while
the task's total still moves (open-r1's accuracy at 0 on bare numbers it never parses, a format term stuck at 0)."""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Any, ClassVar

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import UnpaidRewardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.completions import completion_text
from rl_guards.core.groups import REWARD_ATOL
from rl_guards.core.metric_keys import decode_task, encode_task
from rl_guards.core.probing.forms import admits, contains_answer, final_answer
from rl_guards.core.probing.variants import NEUTRAL_LINE, split
from rl_guards.core.unpaid import FunctionEntry, Stuck, function_entries, judge, varied
from rl_guards.errors import UnpaidRewardError
from rl_guards.guards import probe_views
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rewards.reference_pairs import form_labels, texts
from rl_guards.rewards.slicing import drain_watched
from rl_guards.rollouts.render import printable

# Whole-completion formats of widely copied recipes, which a format reward pays and no single answer form does:
# DeepSeek-R1 / open-r1's think-then-answer tags (``format_reward``, ``tag_count_reward``) and the GRPO demos'
# <reasoning>/<answer> XML (``strict_format_reward``, ``xmlcount_reward``).
RECIPE_FORMS: dict[str, str] = {
    "r1 tags": "{open}\n{line}\n{close}\n<answer>\n{answer}\n</answer>",
    "reasoning tags": "<reasoning>\n{line}\n</reasoning>\n<answer>\n{answer}\n</answer>\n",
}
# Feature values that are not scores (finite sentinels or infinities, never NaN: a gathered number compares equal)
NO_SCORE = -math.inf  # a probed row on which the function gave no score (it raised, stalled, or returned None)
NOT_ASKED = math.inf  # a row the function was not asked on
UNKNOWN = -1.0  # "states": a row without a reference, or of a task not being asked about
SHOWN = 3  # rows a message shows
TAIL = 80  # characters of a completion's answer shown


def _short(value: Any, width: int = TAIL) -> str:
    text = printable(str(value).strip())
    return repr(text if len(text) <= width else "…" + text[-width:])


def _answer_part(batch: RolloutBatch, row: int, markup: Any) -> str:
    """The part of a row's completion after its think block ("" when the block is never closed)."""
    text = batch.completions[row]
    return split(completion_text(text), markup)[1] if text is not None else ""


def _states(batch: RolloutBatch, row: int, reference: str | None, markup: Any) -> float:
    """1.0 when the row's completion (after its think block) states its reference's final answer, 0.0 when not,
    ``UNKNOWN`` without a reference."""
    value = batch.columns.get(reference, [])[row] if reference and reference in batch.columns else None
    right = final_answer(value) if value is not None else None
    if not right:
        return UNKNOWN
    return float(contains_answer(_answer_part(batch, row, markup), right))


def _written(answer: str, markup: Any) -> tuple[list[str], list[str]]:
    """(form labels, texts): ``answer`` in every usual answer form, bare and after a think block, then in the
    recipes' whole-completion formats."""
    labels, written = form_labels(markup), texts(answer, markup)
    open_tag, close_tag = (markup.open_tag, markup.close_tag) if markup is not None else ("<think>", "</think>")
    for label, form in RECIPE_FORMS.items():
        labels.append(label)
        written.append(form.format(open=open_tag, close=close_tag, line=NEUTRAL_LINE, answer=answer))
    return labels, written


class UnpaidRewardGuard(Guard):
    """Per task and reward function (positive weight): a function that gave one score on every row of the task it
    scored over the task's last ``unpaid_rewards.window`` train batches (at least ``min_groups`` groups, in at least
    ``min_steps`` batches), while the task's total varied in some group (:mod:`rl_guards.core.unpaid`).

    That alone is also a penalty that never triggers (a stray-think penalty at 0, an overlong punishment at 0 when
    nothing is long). What tells a reward the run needs and never gets: the function itself pays more than that
    score on the task's own rows when it is handed a right answer. On the next batch with the task, each rank asks
    it (through the framework's caller, bounded in time, ``ctx.checked_calls``) to score up to
    ``unpaid_rewards.probe_rows`` of its rows of the task with the row's reference answer (its reference column;
    without one, the completion's own final answer) written in every usual answer form, bare and after a think
    block (:mod:`rl_guards.core.probing.forms`), and in the recipes' whole-completion formats (:data:`RECIPE_FORMS`);
    the best score crosses ranks as a per-row feature. A function that pays more in some form is reported; one that
    cannot (a penalty, a function not meant for this task that returns 0.0 on its rows, a reward model that cannot
    be called here, ``probes.skip``) is not, for as long as it stays constant. Functions returning None on a task's
    rows are not judged on them (per-task scope).

    Violation ``unpaid:<fn>`` (:class:`~rl_guards.errors.UnpaidRewardError`, default mode warn), once per episode
    (until the function pays again on the task): the constant, the rows and groups, a few rows it scored (the
    completion's answer, its score, the reference, whether the completion states it), the forms it pays and the fix.

    ======================================  ==================================================================
    key                                     value
    ======================================  ==================================================================
    ``rl_guards/unpaid_rewards/unpaid``     (task, function) pairs reported and still unpaid
    ======================================  ==================================================================
    """

    name: ClassVar[str] = "unpaid_rewards"
    config_field: ClassVar[str] = "unpaid_rewards"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: UnpaidRewardsConfig
        self.windows: dict[str, dict[int, deque[FunctionEntry]]] = {}  # task -> function -> recent entries
        self.pending: set[tuple[str, int]] = set()  # (task, function) to be asked at the next batch with the task
        self.verdicts: dict[tuple[str, int], float] = {}  # (task, function) -> the best score it paid a right answer
        self.reported: set[tuple[str, int]] = set()
        self._evidence: dict[int, dict[str, Any]] = {}  # held row -> what the probe scored (for messages)

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        # per row: whether its completion states the reference answer (rows of tasks being asked), then per
        # function the best score it paid a right answer on the row (rows it was asked on)
        self.FEATURES = ("states", *(f"pays{i}" for i in range(len(ctx.reward_funcs))))  # type: ignore[misc]

    # ----- the probe, on each rank's own rows ---------------------------------------------------------------
    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        held = list(batch.held_rows)
        out = {name: [UNKNOWN if name == "states" else NOT_ASKED] * len(held) for name in self.FEATURES}
        self._evidence = {}
        if batch.mode != "train" or not self.pending or not held:
            return out
        position = {row: k for k, row in enumerate(held)}
        funcs = list(self.ctx.reward_funcs)
        reference = probe_views.reference_column(
            list(batch.columns), funcs, self.guards_config.reward_sanity.reference_column
        )
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        names = batch.raw_tasks if len(batch.raw_tasks) == len(batch) else batch.tasks
        for row in held:
            if any(names[row] == task for task, _ in self.pending):
                out["states"][position[row]] = _states(batch, row, reference, markup)
        for task, fn in sorted(self.pending):
            if f"pays{fn}" not in out:
                continue
            rows = self._rows_to_ask(batch, held, task)
            if not rows:
                continue
            for row, best, scores, answer in self._ask(batch, fn, rows, reference, markup):
                out[f"pays{fn}"][position[row]] = best
                entry = self._evidence.setdefault(row, {"answer": answer, "scores": {}})
                entry["scores"][str(fn)] = scores
        drain_watched()  # what a watch_inputs judge saw of these made-up answers is not the run's
        return out

    def _rows_to_ask(self, batch: RolloutBatch, held: list[int], task: str) -> list[int]:
        """Up to ``probe_rows`` held rows of ``task`` (its raw name: labels are set after the gather), one per group
        first."""
        names = batch.raw_tasks if len(batch.raw_tasks) == len(batch) else batch.tasks
        mine = [r for r in held if names[r] == task]
        order = sorted(mine, key=lambda r: (r % batch.num_generations, r))
        return sorted(order[: self.config.probe_rows])

    def _ask(
        self, batch: RolloutBatch, fn: int, rows: list[int], reference: str | None, markup: Any
    ) -> list[tuple[int, float, list[list[Any]], str | None]]:
        """Per row: (row, the best score over the forms, [[form, score], ...], the answer written)."""
        calls = self.ctx.checked_calls
        name = batch.reward_names[fn] if fn < len(batch.reward_names) else str(fn)
        usable = self._may_call(fn, name)
        call_rows = probe_views.call_rows(batch, rows, reference) if usable else {}
        out = []
        for row in rows:
            answer = self._answer(batch, row, reference, markup)
            if not usable or answer is None:
                out.append((row, NO_SCORE, [], answer))
                continue
            labels, written = _written(answer, markup)
            keep = [i for i, label in enumerate(labels) if admits(answer, label.split()[0])]
            try:
                scores = calls(fn, [call_rows[row]] * len(keep), [written[i] for i in keep])
            except Exception:  # a function that cannot score these texts says nothing here (reward_errors, probes)
                out.append((row, NO_SCORE, [], answer))
                continue
            paid = [s for s in scores if s is not None and math.isfinite(s)]
            table = [[labels[i], s] for i, s in zip(keep, scores, strict=True)]
            out.append((row, max(paid) if paid else NO_SCORE, table, answer))
        return out

    @staticmethod
    def _answer(batch: RolloutBatch, row: int, reference: str | None, markup: Any) -> str | None:
        """The right answer to write for a row: its reference's final answer; else the completion's own."""
        if reference is not None and reference in batch.columns:
            value = batch.columns[reference][row]
            if value is not None and str(value).strip():
                return final_answer(value)
        text = batch.completions[row]
        if text is None:
            return None
        _, answer = split(completion_text(text), markup)
        return final_answer(answer)

    def row_evidence(self, batch: RolloutBatch, row: int) -> str | None:
        return json.dumps(self._evidence[row]) if row in self._evidence else None

    # ----- the decision, from numbers every rank holds ------------------------------------------------------
    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if batch.mode != "train":
            return
        feats = self.features(batch)
        asked: dict[tuple[str, int], list[int]] = {}
        for task, fn in sorted(self.pending):
            values = feats.get(f"pays{fn}")
            if values is None:
                continue
            rows = [r for r, v in enumerate(values) if v != NOT_ASKED and batch.tasks[r] == task]
            if rows:
                self.verdicts[(task, fn)] = max(float(values[r]) for r in rows)
                asked[(task, fn)] = rows
                self.pending.discard((task, fn))
        weights = list(batch.reward_weights)
        for task, entries in function_entries(batch).items():
            windows = self.windows.setdefault(task, {})
            for fn, entry in enumerate(entries):
                window = windows.setdefault(fn, deque(maxlen=max(1, int(self.config.window))))
                window.append(entry)
                key = (task, fn)
                if varied(window):  # it paid something else: a new episode starts when it is stuck again
                    self.verdicts.pop(key, None)
                    self.reported.discard(key)
                    self.pending.discard(key)
                    continue
                if fn >= len(weights) or not weights[fn] > 0:
                    continue
                stuck = judge(window, min_groups=self.config.min_groups, min_steps=self.config.min_steps)
                if stuck is None:
                    continue
                if key not in self.verdicts:
                    self.pending.add(key)
                    continue
                if key in self.reported or not self.verdicts[key] > stuck.value + REWARD_ATOL:
                    continue
                self.reported.add(key)
                probed = asked.get(key, [])
                states = feats.get("states") or [UNKNOWN] * len(batch)
                mine = [r for r in range(len(batch)) if batch.tasks[r] == task]
                # rows that state the reference answer first: a right answer paid nothing says the most
                shown = sorted(mine, key=lambda r: (not states[r] == 1.0, r not in probed, r))[:SHOWN]
                told = [states[r] for r in mine if states[r] != UNKNOWN]
                report.violation(
                    f"unpaid:{batch.reward_names[fn]}",
                    lambda task=task, fn=fn, stuck=stuck, shown=shown, probed=probed, told=told: self._message(
                        batch, task, fn, stuck, shown, probed, told
                    ),
                    UnpaidRewardError,
                    rows=sorted(set(shown) | set(probed)),
                )
        report.metric("unpaid", float(len(self.reported)))

    # ----- the message --------------------------------------------------------------------------------------
    def _message(
        self,
        batch: RolloutBatch,
        task: str,
        fn: int,
        stuck: Stuck,
        shown: list[int],
        probed: list[int],
        told: list[float],
    ) -> str:
        name = batch.reward_names[fn]
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        reference = probe_views.reference_column(
            list(batch.columns), list(self.ctx.reward_funcs), self.guards_config.reward_sanity.reference_column
        )
        value = f"{stuck.value:g}"
        lines = [
            f"reward function {name!r} paid {value} on all {stuck.rows} rows of task {task!r} it scored over its last "
            f"{stuck.steps} batches ({stuck.groups} groups; step {batch.step}), while the task's total reward varied "
            f"in {stuck.live} of those groups: other functions still move it, so its groups are not dead, but the run "
            f"never gets {name!r} and learns nothing from it."
        ]
        paid: dict[str, str] = {}  # form -> score, over the rows it was asked on
        unpaid: dict[str, str] = {}
        example = None
        for row in probed:
            evidence = self._row_evidence(batch, row) or {}
            for label, score in evidence.get("scores", {}).get(str(fn), []):
                better = score is not None and score > stuck.value + REWARD_ATOL
                (paid if better else unpaid).setdefault(label, "None" if score is None else f"{score:g}")
                if better and example is None and evidence.get("answer"):
                    labels, written = _written(str(evidence["answer"]), markup)
                    example = written[labels.index(label)] if label in labels else None
        source = f"the reference answer (column {reference!r})" if reference else "the completion's own answer"
        if paid:
            forms = ", ".join(f"{label} ({score})" for label, score in list(paid.items())[:6])
            lost = ", ".join(f"{label} ({score})" for label, score in list(unpaid.items())[:4])
            lines.append(
                f"It pays more than {value} on these rows when {source} is written in a form it reads: {forms}"
                + (f"; not written {lost}." if lost else ".")
            )
        if told:
            right = int(sum(told))
            verb = "states" if right == 1 else "state"
            lines.append(
                f"In this batch {right} of the task's {len(told)} completions {verb} the reference answer"
                + (f", and it paid {value} on each." if right else ".")
            )
        lines.append(f"Rows it scored at step {batch.step}:")
        for row in shown:
            answer = _answer_part(batch, row, markup)
            score = batch.rewards[row][fn]
            if answer.strip():
                line = f"  row {row}: the completion ends {_short(answer)}"
            else:
                whole = completion_text(batch.completions[row]) if batch.completions[row] is not None else ""
                line = f"  row {row}: no answer after the think block; the completion ends {_short(whole)}"
            line += f" -> {'None' if score is None else f'{score:g}'}"
            ref = batch.columns[reference][row] if reference and reference in batch.columns else None
            if ref is not None:
                right = final_answer(ref)
                states = bool(right) and contains_answer(answer, str(right))
                line += f"; {reference!r} reads {_short(ref, 60)}" + (" (the completion states it)" if states else "")
            lines.append(line)
        if told and sum(told):
            lines.append("Right answers are paid nothing: the policy answers in a form the function does not read.")
        elif told:
            lines.append(
                "No completion states the reference answer: if the policy answers in a form the function reads, the "
                "task may be too hard for it now."
            )
        shape = f" (the answer written like {example!r})" if example else ""
        lines.append(
            f"Fix: make the policy write what {name!r} reads{shape}: a format instruction in the prompt or system "
            f"prompt, or an SFT warm-up on that format; or make {name!r} read the form the policy writes. If it is not "
            f"meant for task {task!r}, return None on its rows (or route() it to its own task)."
        )
        return "\n".join(lines)

    def _row_evidence(self, batch: RolloutBatch, row: int) -> dict[str, Any] | None:
        text = batch.evidence.get((self.name, row))
        if text is None and batch.holds(row):
            text = self.row_evidence(batch, row)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    # ----- resume -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "windows": {
                encode_task(t): {str(fn): [e.to_list() for e in w] for fn, w in per.items()}
                for t, per in self.windows.items()
            },
            "pending": sorted([encode_task(t), fn] for t, fn in self.pending),
            "verdicts": [[encode_task(t), fn, None if math.isinf(v) else v] for (t, fn), v in self.verdicts.items()],
            "reported": sorted([encode_task(t), fn] for t, fn in self.reported),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = max(1, int(self.config.window))
        self.windows = {
            decode_task(t): {
                int(fn): deque((FunctionEntry.from_list(e) for e in w), maxlen=size) for fn, w in per.items()
            }
            for t, per in dict(state.get("windows") or {}).items()
        }
        self.pending = {(decode_task(t), int(fn)) for t, fn in state.get("pending") or []}
        self.verdicts = {
            (decode_task(t), int(fn)): NO_SCORE if v is None else float(v) for t, fn, v in state.get("verdicts") or []
        }
        self.reported = {(decode_task(t), int(fn)) for t, fn in state.get("reported") or []}


__all__ = ["UnpaidRewardGuard"]
