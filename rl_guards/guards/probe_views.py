"""A live batch's rows as the probe procedure and the reward callers take them (framework-free).

A row's view holds its group's real completions and what each function paid them; its call row holds what the
framework handed the reward functions for it (the prompt, the dataset columns, the prompt's token ids), from
``batch.reward_inputs`` when the driver recorded the call, else from the batch's own columns.

``batch.reward_inputs`` is either TRL's ``(inputs, prompts, completions, ...)`` or, from a driver whose framework
scores row by row (verl, tinker-cookbook), one record per held row with a ``call_row() -> CallRow`` method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.completions import completion_text
from rl_guards.core.probing.procedure import RowView
from rl_guards.core.probing.variants import Shape, split
from rl_guards.core.think_markup import ThinkMarkup
from rl_guards.reward_calls import CallRow
from rl_guards.rewards import reference_pairs

REFERENCE_COLUMNS: tuple[str, ...] = ("answer", "solution", "ground_truth", "reference", "target", "gold", "label")
SKIPPED = ("prompt", "completion", "completion_ids")


def prompt_text(prompt: Any) -> str:
    """The last user message of a prompt (or the string prompt): what an echo would repeat."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content") or "")
    return ""


def recorded_rows(batch: RolloutBatch) -> list[CallRow] | None:
    """The held rows' call rows from a driver's per-row records (see the module doc), or None."""
    records = batch.reward_inputs
    if not records or not all(callable(getattr(r, "call_row", None)) for r in records):
        return None
    return [r.call_row() for r in records]


def held_inputs(batch: RolloutBatch) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """(inputs, prompts, completions) of the held rows, in held order: what the framework passed the reward
    functions (rebuilt from the batch's columns when the batch was built by hand)."""
    recorded = recorded_rows(batch)
    if recorded is not None:
        inputs = [dict(r.columns) | {"prompt": r.prompt} for r in recorded]
        return inputs, [r.prompt for r in recorded], [r.original for r in recorded]
    if batch.reward_inputs is not None:
        inputs, prompts, completions, *_ = batch.reward_inputs
        return list(inputs), list(prompts), list(completions)
    held = list(batch.held_rows)
    inputs = [{k: v[r] for k, v in batch.columns.items()} | {"prompt": batch.prompts[r]} for r in held]
    return inputs, [batch.prompts[r] for r in held], [batch.completions[r] for r in held]


def reference_column(columns: Sequence[str], funcs: Sequence[Any], configured: str | None) -> str | None:
    """The column holding each row's reference answer (:func:`rl_guards.rewards.reference_pairs.reference_column`
    over this module's usual names, ``label`` included)."""
    return reference_pairs.reference_column(columns, funcs, configured, usual=REFERENCE_COLUMNS)


def call_rows(batch: RolloutBatch, rows: Sequence[int], reference: str | None) -> dict[int, CallRow]:
    """Each probed row's call row (global row index -> CallRow)."""
    held = list(batch.held_rows)
    recorded = recorded_rows(batch)
    if recorded is not None:  # the driver's own call rows; the reference from the configured column if it has one
        out = {}
        for row in rows:
            call = recorded[held.index(row)]
            if reference and reference in call.columns:
                call = replace(call, reference=call.columns[reference])
            out[row] = call
        return out
    inputs, prompts, completions = held_inputs(batch)
    out = {}
    for row in rows:
        local = held.index(row)
        columns = {k: v for k, v in inputs[local].items() if k not in SKIPPED}
        out[row] = CallRow(
            prompt=prompts[local],
            columns=columns,
            reference=columns.get(reference) if reference else None,
            prompt_ids=batch.prompt_ids[row] if row < len(batch.prompt_ids) else None,
            original=completions[local],
        )
    return out


def views(
    batch: RolloutBatch,
    rows: Sequence[int],
    calls: dict[int, CallRow],
    markup: ThinkMarkup | None,
    functions: Sequence[int],
) -> list[RowView]:
    """The probed rows as views: each row's group (held rows of its group), the group's scores by function, its
    shape (the row thinks: an explicit thinking mode, a prompt-opened block, or a block in its completion)."""
    held = list(batch.held_rows)
    _, _, completions = held_inputs(batch)
    matrix = batch.reward_matrix
    references = [str(c.reference) for c in calls.values() if c.reference is not None]
    longest = max((len(completion_text(c)) for c in completions), default=0)
    out = []
    for row in rows:
        opened = bool(batch.prompt_opened[row]) if batch.prompt_opened else False
        group = sorted((r for r in held if batch.group_of(r) == batch.group_of(row)), key=lambda r: (r != row, r))
        texts = tuple(completion_text(completions[held.index(r)], markup, prompt_opened=opened) for r in group)
        thinking, _ = split(texts[0], markup, opened) if markup is not None else (None, "")
        mode = batch.thinking[row]  # an explicitly non-thinking row gets no block, whatever the model wrote
        thinks = mode is True or opened or (mode is None and thinking is not None)
        reference = calls[row].reference
        out.append(
            RowView(
                key=row,
                group=batch.group_of(row),
                shape=Shape(thinks=thinks, markup=markup, prompt_opened=opened),
                reference=None if reference is None else str(reference),
                others=tuple(r for r in references if r != str(reference))[:16],
                texts=texts,
                scores={f: [_finite(matrix[r, f]) for r in group] for f in functions if f < matrix.shape[1]},
                prompt_text=prompt_text(calls[row].prompt),
                longest=longest,
                task=str(batch.tasks[row]),
            )
        )
    return out


def fallback(batch: RolloutBatch, rows: Sequence[int]) -> dict[int, dict[int, float]]:
    """Per row, what each function paid the worst completion of its group (what a function a probe cannot call
    counts in the weighted total)."""
    matrix = batch.reward_matrix
    out = {}
    for row in rows:
        group = [r for r in range(len(batch)) if batch.group_of(r) == batch.group_of(row)]
        out[row] = {
            f: float(np.nanmin(matrix[group, f])) if not np.isnan(matrix[group, f]).all() else 0.0
            for f in range(matrix.shape[1])
        }
    return out


def _finite(value: float) -> float | None:
    return None if value != value else float(value)


__all__ = ["REFERENCE_COLUMNS", "call_rows", "fallback", "held_inputs", "prompt_text", "reference_column", "views"]
