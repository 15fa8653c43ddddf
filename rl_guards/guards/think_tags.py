"""Think-markup anomalies in every completion, per anomaly kind and per task."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rl_guards.chat.markup import markup_from_config, tag_token_ids, tags_are_special
from rl_guards.config import ThinkTagsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.think_codes import KINDS, code_bits, codes_of
from rl_guards.core.think_markup import (
    ALL_CODES,
    TAG_IN_NONTHINKING,
    MarkupVerdict,
    ThinkMarkup,
    anomalies_for_mode,
    prompts_open_block,
    scan,
)
from rl_guards.errors import ThinkMarkupError
from rl_guards.guards.base import Guard, Reporter, RunContext

EXAMPLE_CHARS = 240  # characters kept at each end of an example completion in a message (display only)

_HINTS = {
    "tag_in_nonthinking": (
        "non-thinking rows emit think tags: add rl_guards.rewards.stray_think.StrayThinkPenalty to reward_funcs"
    ),
    "double_open": "the template already prefills the open tag and the model writes another: drop one of them",
    "unclosed_open": "blocks never close: check truncation (max_completion_length) and the template's prefill",
    "stray_close": "close tags without an open: the prompt may prefill the open tag (prompt_opened) unnoticed",
    "partial_tag": "near-miss tags (<THINK>, < think>, <thinking>, cut tags): the format is drifting",
}


def display_text(text: str, chars: int = EXAMPLE_CHARS) -> str:
    """``repr`` of a text cut in the middle for a message (display only: scanning always sees the whole text)."""
    if len(text) <= 2 * chars:
        return repr(text)
    return f"{text[:chars]!r} … [{len(text) - 2 * chars} chars not shown] … {text[-chars:]!r}"


class ThinkTagsGuard(Guard):
    """Scans every completion's think markup with :func:`~rl_guards.core.think_markup.scan`.

    Each row is scanned in its own mode (``batch.thinking[i]``, else ``chat_template_kwargs["enable_thinking"]``,
    else thinking) and with its prompt-opened flag (``batch.prompt_opened[i]``, else read from the tail of the
    prompt ids). Non-thinking rows count any tag as wrong; thinking rows only malformed markup. Tags are also
    counted on token ids when each tag is one token (TRL's tool parsing can move thinking out of the text).

    ===============================================  ==============================================================
    key                                              value
    ===============================================  ==============================================================
    ``rl_guards/think_tags/anomalous_rate``          share of rows whose markup is wrong for their mode
    ``rl_guards/think_tags/rate/<code>``             share of rows with that code, for every code in ``ALL_CODES``
    ``rl_guards/think_tags/thinking_share``          share of rows in thinking mode (the thinking/non-thinking mix)
    ``rl_guards/think_tags/no_block_rate``           share of thinking rows with no think block at all
    ``rl_guards_task/<task>/think/anomalous_rate``   the same per task
    ``rl_guards_task/<task>/think/<code>_rate``      per task, only for codes present in the batch
    ``rl_guards_task/<task>/think/thinking_share``   per task thinking/non-thinking mix
    ===============================================  ==============================================================

    Violation ``anomaly_rate`` (:class:`~rl_guards.errors.ThinkMarkupError`) when ``anomalous_rate`` exceeds
    ``think_tags.max_anomaly_rate``; the message shows up to two offending completions, cut for display only.
    Violation ``thinking_mix`` (same error) when ``think_tags.target_thinking_share`` is set and the run's thinking
    share so far (overall, or a task's when there are several) is off it by more than the tolerance plus two
    binomial standard errors.
    """

    name: ClassVar[str] = "think_tags"
    config_field: ClassVar[str] = "think_tags"
    FEATURES: ClassVar[tuple[str, ...]] = ("codes", "wrong", "kind", "thinking", "no_block")

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: ThinkTagsConfig
        self.markup: ThinkMarkup = markup_from_config(self.config, None)
        self.open_id: int | None = None
        self.close_id: int | None = None
        self.decode_specials = False  # scan text decoded with special tokens kept (tags are special tokens)
        self.mix: dict[str, list[int]] = {}  # task ("" = all) -> [thinking rows, rows] of train batches so far
        self._padded_ids: Any = None  # the batch's padded completion ids, from check_tensors until scan

    def setup(self, ctx: RunContext) -> None:
        super().setup(ctx)
        self.markup = markup_from_config(self.config, ctx.template_text)
        self.open_id, self.close_id = tag_token_ids(ctx.tokenizer, self.markup)
        self.decode_specials = tags_are_special(ctx.tokenizer, self.markup)

    def _default_thinking(self) -> bool:
        value = self.ctx.chat_template_kwargs.get("enable_thinking", True)
        return True if value is None else bool(value)

    def _text(self, batch: RolloutBatch, row: int) -> str:
        decode = batch.decode or self.ctx.decode
        if self.decode_specials and decode is not None and batch.completion_ids[row]:
            return str(decode(list(batch.completion_ids[row])))
        text = batch.completions[row]
        return text if isinstance(text, str) else str(text)

    def _prompts_opened(self, batch: RolloutBatch, rows: range | None = None) -> list[bool]:
        """Per row: the prompt already opened the block (the hook's flags, else read from the prompt ids); with
        ``rows``, the hook's flags of those rows only (indexed as ``rows`` is) when it has them."""
        if len(batch.prompt_opened) == len(batch):
            if rows is not None:
                return [bool(v) for v in batch.prompt_opened[rows.start : rows.stop]]
            return [bool(v) for v in batch.prompt_opened]
        opened = prompts_open_block(batch.prompt_ids[: len(batch)], batch.decode or self.ctx.decode, self.markup)
        return opened + [False] * (len(batch) - len(opened))  # hand-built batches may lack prompt ids

    def _scan_row(
        self, batch: RolloutBatch, row: int, prompt_opened: bool, id_tags: list[tuple[int, int]] | None = None
    ) -> tuple[MarkupVerdict, bool]:
        """The row's verdict and its thinking mode (``id_tags``: where its tag ids are, when already found)."""
        thinking = batch.thinking[row]
        mode = self._default_thinking() if thinking is None else bool(thinking)
        verdict = scan(
            self._text(batch, row),
            self.markup,
            prompt_opened=prompt_opened,
            token_ids=batch.completion_ids[row],
            open_id=self.open_id,
            close_id=self.close_id,
            id_tags=id_tags,
        )
        return verdict, mode

    def check_tensors(self, output: Any, report: Reporter) -> None:
        """Keep the batch's padded completion ids until :meth:`scan`, which finds the tag ids in one pass over
        them rather than searching each row's list (the adapter calls this before it assembles the rows)."""
        self._padded_ids = output.get("completion_ids") if isinstance(output, Mapping) else None

    def _id_tags(self, batch: RolloutBatch, rows: range) -> list[list[tuple[int, int]]] | None:
        """Per held row, ``(position, id)`` of its tag ids from the tensors kept by :meth:`check_tensors`; None
        (search the lists) without them, or when they are not these rows."""
        padded, self._padded_ids = self._padded_ids, None
        if padded is None or rows.step != 1 or self.open_id is None or self.close_id is None:
            return None
        from rl_guards.tensors.token_positions import id_positions

        try:
            return id_positions(padded, batch.completion_ids[rows.start : rows.stop], (self.open_id, self.close_id))
        except Exception:  # an unusual tensor: the lists are searched instead
            return None

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        """Per held row: ``codes`` (bitmask over ``ALL_CODES``: the verdict's codes and those wrong for the row's
        mode), ``wrong`` (bitmask of the codes wrong for its mode), ``kind`` (0 answer, 1 thinking, 2 anomalous),
        ``thinking`` (the row's mode, 0/1) and ``no_block`` (a thinking row with no block at all)."""
        rows = batch.held_rows
        flags = len(batch.prompt_opened) == len(batch) and rows.step == 1
        opened = self._prompts_opened(batch, rows if flags else None)  # the held rows' flags only, when given
        first = rows.start if flags else 0
        id_tags = self._id_tags(batch, rows)
        out: dict[str, list[float]] = {name: [] for name in self.FEATURES}
        for row in rows:
            tags = None if id_tags is None else id_tags[row - rows.start]
            verdict, thinking = self._scan_row(batch, row, opened[row - first], tags)
            wrong = anomalies_for_mode(verdict, thinking)
            out["codes"].append(float(code_bits(set(verdict.anomalies) | set(wrong))))
            out["wrong"].append(float(code_bits(wrong)))
            out["kind"].append(float(KINDS.index(verdict.kind)))
            out["thinking"].append(float(thinking))
            out["no_block"].append(float(thinking and verdict.kind == "answer" and not verdict.has_tags))
        return out

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        n = len(batch)
        if n == 0:
            return
        feats = {k: batch.column_array(v).astype(np.int64) for k, v in self.features(batch).items()}
        codes, wrong, thinking = feats["codes"], feats["wrong"] != 0, feats["thinking"] != 0
        names, index = batch.task_index
        present = int(np.bitwise_or.reduce(codes))  # only the codes some row has need a pass
        code_rows = {code: (codes >> bit) & 1 for bit, code in enumerate(ALL_CODES) if (present >> bit) & 1}
        counts = {code: int(code_rows[code].sum()) if code in code_rows else 0 for code in ALL_CODES}
        rate = float(wrong.sum()) / n
        report.metric("anomalous_rate", rate)
        for code in ALL_CODES:
            report.metric(f"rate/{code}", counts[code] / n)
        thinking_rows = int(thinking.sum())
        report.metric("thinking_share", thinking_rows / n)
        if thinking_rows:
            report.metric("no_block_rate", float(feats["no_block"].sum()) / thinking_rows)
        rows = np.bincount(index, minlength=len(names))
        task_wrong = np.bincount(index, weights=wrong, minlength=len(names))
        task_thinking = np.bincount(index, weights=thinking, minlength=len(names))
        task_codes = {c: np.bincount(index, weights=r, minlength=len(names)) for c, r in code_rows.items()}
        for t, task in enumerate(names):
            report.task_metric(task, "think/anomalous_rate", task_wrong[t] / rows[t])
            report.task_metric(task, "think/thinking_share", task_thinking[t] / rows[t])
            for code in ALL_CODES:
                if code in task_codes and task_codes[code][t]:
                    report.task_metric(task, f"think/{code}_rate", task_codes[code][t] / rows[t])

        if batch.mode == "train" and self.config.target_thinking_share is not None:
            self._check_mix(report, names, task_thinking, rows, thinking_rows, n)

        if rate > self.config.max_anomaly_rate:
            wrong_rows = np.flatnonzero(wrong).tolist()
            shown = wrong_rows[:2]
            report.violation(
                "anomaly_rate",
                lambda: self._message(batch, rate, wrong_rows, counts, feats, shown),
                ThinkMarkupError,
                rows=shown,
            )

    def _check_mix(
        self, report: Reporter, names: list[str], task_thinking: Any, rows: Any, thinking_rows: int, n: int
    ) -> None:
        """The run's thinking share so far, overall and per task, against ``target_thinking_share``.

        Counted over every train batch so far (saved with checkpoints); a share counts as off the target when it
        is further than the tolerance plus two binomial standard errors, so a few small batches never trigger it.
        """
        target = float(self.config.target_thinking_share or 0.0)
        tolerance = self.config.thinking_share_tolerance
        counts = {"": (thinking_rows, n)} | {t: (int(task_thinking[i]), int(rows[i])) for i, t in enumerate(names)}
        for key, (k, m) in counts.items():
            entry = self.mix.setdefault(key, [0, 0])
            entry[0] += k
            entry[1] += m
        off = []
        for key, (k, m) in sorted(self.mix.items()):
            share = k / m if m else target
            margin = tolerance + 2.0 * math.sqrt(max(target * (1 - target), 0.01) / max(m, 1))
            if m and abs(share - target) > margin and (key == "" or len(self.mix) > 2):
                off.append(f"{'overall' if key == '' else f'task {key!r}'}: {share:.0%} thinking of {m} rows")
        if off:
            report.violation(
                "thinking_mix",
                f"the thinking / non-thinking mix is off its target {target:.0%} (+-{tolerance:.0%}): "
                + "; ".join(off)
                + ". Fix: rebalance the thinking flag column (per task too: a task that never thinks, or always does, "
                "trains only one mode), or change think_tags.target_thinking_share.",
                ThinkMarkupError,
            )

    def state_dict(self) -> dict[str, Any]:
        return {"mix": {k: list(v) for k, v in self.mix.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mix = {str(k): [int(v[0]), int(v[1])] for k, v in (state.get("mix") or {}).items()}

    def _hint(self, code: str) -> str:
        """The fix for a code; for stray tags, what the run's StrayThinkPenalty (if any) already does."""
        if code != TAG_IN_NONTHINKING:
            return _HINTS[code]
        penalty = next((f for f in self.ctx.reward_funcs if getattr(f, "__name__", "") == "stray_think_penalty"), None)
        if penalty is None:
            return _HINTS[code]
        if not getattr(penalty, "enabled", True):
            return (
                "non-thinking rows emit think tags and the StrayThinkPenalty in reward_funcs is disabled: enable it "
                "(stray_think_penalty.enabled: true)"
            )
        weight = getattr(penalty, "weight", None)
        weight_text = f" (weight {weight:g})" if isinstance(weight, int | float) else ""
        return (
            f"non-thinking rows emit think tags although StrayThinkPenalty{weight_text} is already in reward_funcs: "
            "raise its weight, check that each row's thinking flag reaches the trainer (honour_thinking_column), "
            "or read the rollouts to see whether the template invites the tags"
        )

    def _message(
        self,
        batch: RolloutBatch,
        rate: float,
        wrong_rows: list[int],
        code_rows: dict[str, int],
        feats: dict[str, np.ndarray],
        shown: list[int],
    ) -> str:
        n = len(batch)
        markup = self.markup
        lines = [
            f"{len(wrong_rows)}/{n} completions ({rate:.0%}) have think markup that is wrong for their mode, above "
            f"think_tags.max_anomaly_rate={self.config.max_anomaly_rate:g} at step {batch.step} ({batch.mode}; "
            f"tags {markup.open_tag!r}/{markup.close_tag!r}).",
            "  by code: " + ", ".join(f"{c}={code_rows[c]}" for c in ALL_CODES if code_rows[c]),
        ]
        opened = self._prompts_opened(batch)
        for row in shown:
            wrong = codes_of(int(feats["wrong"][row]))
            mode = "thinking" if feats["thinking"][row] else "non-thinking"
            prompt = ", prompt opened the block" if row < len(opened) and opened[row] else ""
            lines.append(f"  row {row} (task {batch.tasks[row]!r}, {mode}{prompt}): {', '.join(wrong)}")
            if batch.holds(row):
                lines.append(f"    completion (cut for display only): {display_text(self._text(batch, row))}")
        codes = sorted({c for r in wrong_rows for c in codes_of(int(feats["wrong"][r]))})
        hints = [self._hint(c) for c in codes if c in _HINTS]
        lines.append("Fix: " + ("; ".join(hints) if hints else "read these completions; the format is drifting") + ".")
        return "\n".join(lines)
