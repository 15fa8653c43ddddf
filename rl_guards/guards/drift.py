"""Behaviour drift: "reward went up, behaviour got worse" as an alarm, with the same prompts' completions side by
side (the statistics and the rule: :mod:`rl_guards.core.behaviour`).

A fixed set of probe prompts per task (from ``eval_dataset`` when the trainer has one, else a seeded sample of the
train set; saved with every checkpoint, so a resumed run keeps the set and the baseline) is generated and scored
with the trainer's own path at train start (the baseline, step 0) and before every checkpoint. Each time, per task:
the behaviour statistics, compared to the baseline; when the task's training reward rose by
``drift.reward_margin`` since the start (mean of the first vs the last ``drift.reward_window`` train batches; of
the first vs the second half of the batches so far while there are fewer than twice as many) while
a statistic moved beyond its threshold, a violation shows the statistic, both values and one probe prompt's
completions at the baseline and now.

Every rank generates the same probe rows (TRL's generation path is collective); the per-completion numbers are
gathered, so every rank reaches the same verdict; the main process writes ``<rollouts folder>/drift/step_N.json``
(statistics and completions, read by ``rl-guards drift RUN`` and the HTML report) and logs a W&B table.

======================================  ==============================================================================
key (at checkpoints)                    value
======================================  ==============================================================================
``rl_guards/drift/alarms``              tasks whose reward rose while their behaviour drifted (when non-zero)
``rl_guards_task/<t>/drift/<stat>``     the task's statistic on the probe prompts: length, repetition, distinct_2,
                                        thinking_share, thinking_chars, empty_answer_rate, terminated,
                                        reward_total (full only)
``rl_guards_task/<t>/drift/moved``      statistics beyond their thresholds (when non-zero)
======================================  ==============================================================================
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rl_guards.chat.markup import markup_from_config
from rl_guards.config import DriftConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.behaviour import (
    ROW_FIELDS,
    BehaviourStats,
    Drift,
    RowStats,
    Thresholds,
    compare,
    distinct_n,
    row_stats,
    summarise,
)
from rl_guards.core.think_markup import prompt_opens_block
from rl_guards.errors import DriftError
from rl_guards.guards.base import Guard, Reporter
from rl_guards.rollouts.drift_records import record_text
from rl_guards.rollouts.render import printable

logger = logging.getLogger("rl_guards")

LOGGED_STATS = (
    "length", "repetition", "distinct_2", "thinking_share", "thinking_chars", "empty_answer_rate", "terminated",
)  # fmt: skip
DRIFT_FOLDER = "drift"


def drift_folder(rollouts_folder: Path) -> Path:
    """Where the probe records of a run go: next to its rollout dumps."""
    return Path(rollouts_folder) / DRIFT_FOLDER


class DriftGuard(Guard):
    """Probe prompts at step 0 and at every checkpoint; an alarm when reward rose while behaviour drifted."""

    name: ClassVar[str] = "drift"
    config_field: ClassVar[str] = "drift"
    COLLECTIVE_HOOKS: ClassVar[frozenset[str]] = frozenset({"on_train_begin", "before_save"})  # the probe

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: DriftConfig
        self.source = ""  # "eval" or "train": the dataset the probe prompts come from
        self.indices: list[int] = []  # the probe prompts' rows in that dataset
        self.tasks: list[str] = []  # each probe prompt's task
        self.baseline: dict[str, dict[str, Any]] = {}  # task -> BehaviourStats as a dict
        self.baseline_examples: dict[str, str] = {}  # probe index (str) -> its first completion at the baseline
        self.reward_start: dict[str, list[float]] = {}  # task -> the first reward_window train-batch means
        self.reward_recent: dict[str, list[float]] = {}  # task -> the last reward_window train-batch means
        self.reward_batches: dict[str, int] = {}  # task -> train batches seen (the windows overlap below 2 x window)
        self.checkpoints: list[int] = []  # steps probed after the baseline
        self.alarmed: dict[str, list[str]] = {}  # task -> statistics already alarmed on (warned once each)

    # ----- probe set ---------------------------------------------------------------------------------------
    def _dataset(self) -> Any:
        return self.ctx.eval_dataset if self.source == "eval" else self.ctx.train_dataset

    def _choose_prompts(self) -> None:
        """The probe set: ``prompts_per_task`` rows of each of the ``max_tasks`` most frequent tasks (seeded)."""
        eval_ds = self.ctx.eval_dataset
        if isinstance(eval_ds, dict):  # several eval sets: the first
            eval_ds = next(iter(eval_ds.values()), None)
        self.source = "eval" if eval_ds is not None and _sized(eval_ds) else "train"
        dataset = eval_ds if self.source == "eval" else self.ctx.train_dataset
        if dataset is None or not _sized(dataset):
            return
        column = self.guards_config.tasks.task_column
        default = self.guards_config.tasks.default_task
        names = getattr(dataset, "column_names", None) or []
        n = len(dataset)
        if column in names:
            labels = [default if t is None else str(t) for t in dataset[column]]
        else:
            labels = [default] * n
        by_task: dict[str, list[int]] = {}
        for i, t in enumerate(labels):
            by_task.setdefault(t, []).append(i)
        rng = random.Random(self.config.seed)
        ranked = sorted(by_task, key=lambda t: (-len(by_task[t]), t))[: self.config.max_tasks]
        chosen: list[tuple[int, str]] = []
        for task in sorted(ranked):
            rows = by_task[task]
            chosen += [(i, task) for i in sorted(rng.sample(rows, min(self.config.prompts_per_task, len(rows))))]
        self.indices = [i for i, _ in chosen]
        self.tasks = [t for _, t in chosen]

    # ----- hooks -------------------------------------------------------------------------------------------
    def on_train_begin(self, report: Reporter) -> None:
        if self.baseline or self.ctx.probe_generate is None:
            return  # resumed: the probe set and the baseline come from the checkpoint
        self._choose_prompts()
        if not self.indices:
            report.note("no_probe_prompts", "no dataset rows to probe: drift is not measured")
            return
        record = self._probe(int(report.step or 0), report)
        if record is None:
            return
        stats, examples = record
        self.baseline = {t: s.to_dict() for t, s in stats.items()}
        self.baseline_examples = examples
        self._write(int(report.step or 0), stats, examples, [], report)

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        if batch.mode != "train" or not len(batch):
            return
        totals = batch.weighted_totals
        names, index = batch.task_index
        window = self.config.reward_window
        for t, task in enumerate(names):
            rows = totals[index == t]
            rows = rows[np.isfinite(rows)]  # an inf reward would make the task's mean, and every later window, inf
            if not len(rows):
                continue
            mean = float(rows.mean())
            start = self.reward_start.setdefault(task, [])
            if len(start) < window:
                start.append(mean)
            recent = self.reward_recent.setdefault(task, [])
            recent.append(mean)
            del recent[:-window]
            self.reward_batches[task] = self.reward_batches.get(task, 0) + 1

    def before_save(self, checkpoint_dir: str, report: Reporter) -> None:
        if not self.baseline or not self.indices:
            return
        step = int(report.step or 0)
        record = self._probe(step, report)
        if record is None:
            return
        stats, examples = record
        self.checkpoints.append(step)
        alarms: list[dict[str, Any]] = []
        thresholds = Thresholds(**{f: getattr(self.config, f) for f in Thresholds.__dataclass_fields__})
        for task, now in sorted(stats.items()):
            base = self.baseline.get(task)
            if base is None:
                continue
            before = BehaviourStats.from_dict(base)
            drifts = compare(before, now, thresholds)
            for stat in LOGGED_STATS:
                report.task_metric(task, f"drift/{stat}", float(getattr(now, stat)))
            if now.reward_total is not None:
                report.task_metric(task, "drift/reward_total", float(now.reward_total))
            report.task_metric(task, "drift/moved", float(len(drifts)))
            rose = self._reward_rise(task, before, now)
            if drifts and rose is not None and rose[1] - rose[0] >= self.config.reward_margin:
                alarms.append({"task": task, "drifts": [d.describe() for d in drifts]})
                new = [d for d in drifts if d.stat not in self.alarmed.get(task, [])]
                self.alarmed.setdefault(task, []).extend(d.stat for d in new)
                report.violation(
                    "drift",
                    self._message(task, step, drifts, rose, examples),
                    DriftError,
                )
        report.metric("alarms", float(len(alarms)))
        self._write(step, stats, examples, alarms, report)

    # ----- probing -----------------------------------------------------------------------------------------
    def _probe(self, step: int, report: Reporter) -> tuple[dict[str, BehaviourStats], dict[str, str]] | None:
        """Generate and score the probe set; per-task statistics (the same on every rank) and this rank's first
        completion of each probe prompt (decoded, special tokens kept). None on every rank alike when some rank
        failed (said once, as ``probe_failed``): ranks never part at a collective, and training goes on."""
        dataset = self._dataset()
        rows = [dict(dataset[i]) for i in self.indices]  # the same rows on every rank
        out = self.ctx.probe_generate(rows)
        if out is None:
            return None
        if out.get("error"):
            why = str(out["error"])
            self._say_failed(step, why, report, cause=str(out.get("cause") or generation_cause(why)))
            return None
        for name, why in dict(out.get("stalled") or {}).items():
            report.notice(
                f"stalled:{name}",
                f"step {step}: reward function {name} ran past its deadline on drift's probe completions ({why}). "
                "Its probe scores are None (drift's reward statistics leave it out) and the reward probes skip it "
                "from now on; training calls it as before. Fix: give the function a timeout of its own (a judge "
                "API's), or raise probes.call_timeout if it is only slow.",
            )
        group = int(out["group_size"])
        names = list(out["reward_names"])
        width = 2 + len(ROW_FIELDS) + 2 + len(names)  # ok, probe index, row stats, distinct, total, rewards
        numbers: list[list[float]] = []
        examples: dict[str, str] = {}
        error: str | None = None
        try:
            numbers, examples = self._numbers(rows, out, group)
            if len(numbers) != len(rows) * group or any(len(r) != width for r in numbers):
                raise ValueError(f"{len(numbers)} probe rows for {len(rows)} x {group} completions")
        except Exception as exc:  # this rank's own bug: placeholder rows keep the gather the same on every rank
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("rl_guards/drift: probe statistics failed on this rank at step %s: %s", step, error)
            numbers = [[0.0] * width for _ in range(len(rows) * group)]
        gather = self.ctx.all_gather_rows or (lambda r: r)
        gathered = gather(numbers)
        if any(r[0] != 1.0 for r in gathered):
            self._say_failed(step, f"probe statistics failed on a rank{': ' + error if error else ''}", report,
                             cause="statistics")  # fmt: skip
            return None
        gathered = [r[1:] for r in gathered]
        stats_by_task: dict[str, BehaviourStats] = {}
        for task in sorted(set(self.tasks)):
            mine = [r for r in gathered if self.tasks[int(r[0])] == task]
            row_objs = [RowStats(*r[1 : 1 + len(ROW_FIELDS)]) for r in mine]
            rest = [r[1 + len(ROW_FIELDS) :] for r in mine]
            stats_by_task[task] = summarise(
                row_objs,
                [r[0] for r in rest],
                [dict(zip(names, r[2:], strict=False)) for r in rest],
                [r[1] for r in rest],
            )
        return stats_by_task, examples

    def _numbers(
        self, rows: list[dict[str, Any]], out: dict[str, Any], group: int
    ) -> tuple[list[list[float]], dict[str, str]]:
        """This rank's numeric rows of the probe (an ``ok`` flag first) and its first completion of each prompt."""
        decode = self.ctx.decode or (lambda ids: "")
        markup = markup_from_config(self.guards_config.think_tags, self.ctx.template_text)
        special = self._special_tokens(decode)
        opened = self._prompts_opened(rows, markup)
        weights = out.get("reward_weights") or [1.0] * len(out["reward_names"])
        numbers: list[list[float]] = []
        examples: dict[str, str] = {}
        for p in range(len(rows)):
            ids_group = out["completion_ids"][p * group : (p + 1) * group]
            distinct = distinct_n(ids_group)
            for j, ids in enumerate(ids_group):
                k = p * group + j
                text = str(decode(ids))
                if j == 0:
                    examples[str(p)] = text
                stats = row_stats(
                    text, ids, terminated=out["terminated"][k], markup=markup, prompt_opened=opened[p],
                    special_tokens=special,
                )  # fmt: skip
                rewards = out["rewards"][k] if k < len(out["rewards"]) else []
                total = sum(w * (v or 0.0) for w, v in zip(weights, rewards, strict=False)) if rewards else float("nan")
                reward_cells = [float("nan") if v is None else float(v) for v in rewards][: len(out["reward_names"])]
                reward_cells += [float("nan")] * (len(out["reward_names"]) - len(reward_cells))
                numbers.append([1.0, float(p), *stats.as_list(), distinct, total, *reward_cells])
        return numbers, examples

    def _special_tokens(self, decode: Any) -> list[str]:
        """The tokenizer's special tokens and the EOS ids decoded: not answer text (an answer of only these is
        empty)."""
        tokenizer = self.ctx.tokenizer
        found = [str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or [])]
        for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
            if getattr(token, "special", False):
                found.append(str(getattr(token, "content", "")))
        for eos in self.ctx.eos_token_ids or []:
            try:
                found.append(str(decode([eos])))
            except Exception:  # an id the tokenizer cannot decode is no text either
                continue
        return sorted({t for t in found if t.strip()})

    def _say_failed(self, step: int, why: str, report: Reporter, *, cause: str) -> None:
        """Say once that the probe failed, with the fix for its ``cause``: ``statistics`` (rl_guards' own code on the
        completions), ``memory`` (generation out of memory), ``trainer`` (another error in the trainer's generation
        and scoring path), or ``""`` (on another rank, unknown here)."""
        after = (
            "drift is not measured at this checkpoint (the checkpoint is written as usual)"
            if self.baseline
            else "no baseline, so drift is not measured in this run"
        )
        if cause == "trainer":  # the trainer's own generation raised: training meets the same error on such rows
            rows = f"rows {self.indices[:8]}{' ...' if len(self.indices) > 8 else ''} of the {self.source} set"
            fix = (
                f"This is the trainer's own error on the probe rows ({rows}), raised by the generation path "
                "training uses: fix its cause, or turn drift off (drift.enabled: false)."
            )
        elif cause == "memory":
            fix = (
                "Fix: free memory at checkpoints (the probe generates in batches of the training's own size), or "
                "turn drift off (drift.enabled: false)."
            )
        elif cause == "statistics":
            fix = (
                "This is rl_guards' own code measuring the completions (generation went fine; memory is not the "
                "cause): please report it with this message; drift.enabled: false turns the probe off meanwhile."
            )
        else:
            fix = (
                "Read that rank's log: out of memory means freeing memory at checkpoints; any other error is the "
                "trainer's generation or a reward function on the probe rows."
            )
        report.notice("probe_failed", f"step {step}: {why}. Every rank skipped the probe together; {after}. {fix}")

    def _prompts_opened(self, rows: list[dict[str, Any]], markup: Any) -> list[bool]:
        render = self.ctx.render_prompts
        decode = self.ctx.decode
        if render is None or decode is None:
            return [False] * len(rows)
        try:
            return [prompt_opens_block(str(decode(ids)), markup) for ids in render([r["prompt"] for r in rows])]
        except Exception:  # unknown is not an error: scanned as a plain completion
            return [False] * len(rows)

    def _train_reward(self, task: str) -> tuple[float, float] | None:
        """The task's mean training reward over its first and its last ``reward_window`` train batches; before
        there are twice as many, over the first and the last half of those seen (two windows that overlapped
        would compare a batch with itself: a checkpoint early in the run would never see the reward rise). None
        before two batches a half (then the probe completions' rewards at baseline and now decide)."""
        start, recent = self.reward_start.get(task), self.reward_recent.get(task)
        if not start or not recent:
            return None
        window = self.config.reward_window
        # a state saved before the count was kept: exact while the first window fills, else taken as full
        seen = self.reward_batches.get(task, len(start) if len(start) < window else 2 * window)
        k = min(window, seen // 2, len(start), len(recent))
        if k < min(2, window):  # one batch against one other is noise at a few rows a batch: the probe rewards
            return None
        return sum(start[:k]) / k, sum(recent[-k:]) / k

    def _reward_rise(self, task: str, before: BehaviourStats, now: BehaviourStats) -> tuple[float, float] | None:
        """The task's training reward at the start and recently; else its probe reward at baseline and now."""
        train = self._train_reward(task)
        if train is not None:
            return train
        if before.reward_total is not None and now.reward_total is not None:
            return before.reward_total, now.reward_total
        return None

    def _message(
        self, task: str, step: int, drifts: list[Drift], rose: tuple[float, float], examples: dict[str, str]
    ) -> str:
        p = next(i for i, t in enumerate(self.tasks) if t == task)
        prompt = self._prompt_text(p)
        lines = [
            f"task {task!r}: training reward rose {rose[0]:.3g} -> {rose[1]:.3g} while its behaviour on the same "
            f"probe prompts drifted (baseline -> step {step}):",
            *(f"  {d.describe()}" for d in drifts),
            f"  probe prompt: ...{printable(prompt[-200:])}",
            f"  baseline:  {printable(self.baseline_examples.get(str(p), '')[:400])}",
            f"  step {step}: {printable(examples.get(str(p), '')[:400])}",
            "Reward going up is compatible with behaviour getting worse. Fix: read the probe completions "
            f"(rl-guards drift {self._run_folder()}), check what the reward pays for (length, a keyword, a format), "
            "then lower the learning rate, add a penalty, or stop at an earlier checkpoint.",
        ]
        return "\n".join(lines)

    def _prompt_text(self, p: int) -> str:
        try:
            prompt = self._dataset()[self.indices[p]].get("prompt")
        except Exception:
            return ""
        if isinstance(prompt, list):
            return " | ".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
        return str(prompt or "")

    # ----- records -----------------------------------------------------------------------------------------
    def _folder(self) -> Path:
        rollouts = self.guards_config.rollouts.output_dir
        if rollouts:
            base = Path(os.path.expandvars(os.path.expanduser(rollouts)))
        else:
            base = Path(self.ctx.output_dir) / "rl_guards" / "rollouts"
        return drift_folder(base)

    def _write(
        self,
        step: int,
        stats: dict[str, BehaviourStats],
        examples: dict[str, str],
        alarms: list[dict[str, Any]],
        report: Reporter,
    ) -> None:
        if not self.ctx.is_main_process:
            return
        record = {
            "step": step,
            "baseline": step == 0 or not self.checkpoints,
            "source": self.source,
            "stats": {t: s.to_dict() for t, s in stats.items()},
            "probes": [
                {"index": i, "task": t, "prompt": self._prompt_text(p), "completion": examples.get(str(p), "")}
                for p, (i, t) in enumerate(zip(self.indices, self.tasks, strict=True))
            ],
            "alarms": alarms,
            "train_reward": {t: self._train_reward(t) for t in stats},
        }
        try:
            folder = self._folder()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"step_{step:06d}.json"
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(record_text(record), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the record, never the run
            logger.warning("rl_guards/drift: could not write the probe record of step %s: %s", step, exc)
        self._log_table(step, record, report)

    def _log_table(self, step: int, record: dict[str, Any], report: Reporter) -> None:
        rows = [[step, p["task"], p["prompt"][-300:], p["completion"]] for p in record["probes"]]
        report.table("rl_guards/drift/probes", ["step", "task", "prompt", "completion"], rows)

    # ----- resume ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "indices": list(self.indices),
            "tasks": list(self.tasks),
            "baseline": self.baseline,
            "baseline_examples": self.baseline_examples,
            "reward_start": self.reward_start,
            "reward_recent": self.reward_recent,
            "reward_batches": self.reward_batches,
            "checkpoints": list(self.checkpoints),
            "alarmed": self.alarmed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source = str(state.get("source", ""))
        self.indices = [int(i) for i in state.get("indices", [])]
        self.tasks = [str(t) for t in state.get("tasks", [])]
        self.baseline = dict(state.get("baseline", {}))
        self.baseline_examples = {str(k): str(v) for k, v in (state.get("baseline_examples") or {}).items()}
        self.reward_start = {str(k): [float(x) for x in v] for k, v in (state.get("reward_start") or {}).items()}
        self.reward_recent = {str(k): [float(x) for x in v] for k, v in (state.get("reward_recent") or {}).items()}
        self.reward_batches = {str(k): int(v) for k, v in (state.get("reward_batches") or {}).items()}
        self.checkpoints = [int(s) for s in state.get("checkpoints", [])]
        self.alarmed = {str(k): list(v) for k, v in (state.get("alarmed") or {}).items()}


def generation_cause(why: str) -> str:
    """``memory`` or ``trainer`` from a failed probe generation's message (``<stage>: <ExceptionType>: ...``), ``""``
    when the error stayed on another rank; for a ``probe_generate`` that does not hand its ``cause`` over."""
    if "OutOfMemoryError" in why or "out of memory" in why.lower():
        return "memory"
    return "" if "the error is in that rank's log" in why else "trainer"


def _sized(dataset: Any) -> bool:
    try:
        return len(dataset) > 0
    except TypeError:  # a streaming dataset: no fixed rows to come back to
        return False
