"""One verl training step's rows -> the engine's :class:`~rl_guards.engine.assembly.LocalRows` and the loss
tensors the mask check reads.

Both trainers' rows are first put in one shape, :class:`StepBatch`, padded as verl's rollout pads them (prompts
left-padded, responses right-padded to the same width) with the per-row columns next to them:

- legacy trainer: the agent loop's output batch as it is (``prompts``, ``responses``, ``attention_mask``,
  ``response_mask``, ``rm_scores``; the reward extra columns) and the generation batch it came from (``uid``,
  ``data_source``, ``reward_model``, ``extra_info``, ``raw_prompt``: rows in the same order) (:func:`from_dataproto`);
- default (V1) trainer: the fields of the sampled rows read from TransferQueue, unpadded, padded here with verl's
  pad id (:func:`from_fields`).

Then (:func:`step_rows`): rows in GRPO group order (by ``uid``, then ``session_id``), complete groups only;
response ids up to verl's valid length (EOS kept), the text the scorer got (verl's decode, checked against the
record the reward manager left), truncation from the ids (no EOS at the end of the response: cut at
``response_length``, or by the context limit, which verl counts as not clipped), rewards per reward column from the
records, and GRPO advantages as verl's ``compute_grpo_outcome_advantage`` will compute them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rl_guards.core.task_labels import task_name
from rl_guards.core.think_markup import ThinkMarkup, prompts_open_block
from rl_guards.engine.assembly import LocalRows
from rl_guards.guards.base import RunContext
from rl_guards.rewards.row_errors import RowError, RowErrorLog
from rl_guards.verl.records import PENALTY_TERM, RECORD_KEY, ScoreRecord, VerlScoreCall, text_digest

MANAGER_COLUMN = "manager_terms"  # what the inner manager adds to the score (dapo's overlong penalty)
_SCALARS = (str, int, float, bool, type(None))


@dataclass
class StepBatch:
    """One step's rows as verl's trainer holds them: padded tensors and per-row columns (row order of verl)."""

    step: int
    prompts: Any  # [B, P] left-padded prompt ids
    prompt_mask: Any  # [B, P] attention over the prompt
    responses: Any  # [B, R] right-padded response ids
    response_attention: Any  # [B, R] 1 on the response's tokens (verl's valid length)
    response_mask: Any  # [B, R] the loss mask verl trains with
    rm_scores: Any | None  # [B, R] each row's reward where verl placed it (None: not scored yet)
    columns: dict[str, list[Any]] = field(default_factory=dict)  # uid, data_source, reward_model, the records, ...
    mode: str = "train"
    expected_groups: int | None = None  # prompt groups the trainer sampled (V1: its batch size), when it says

    def __len__(self) -> int:
        return int(self.responses.shape[0])


def _column(values: Any, n: int) -> list[Any]:
    """A non-tensor column (numpy object array, list, TransferQueue's LinkedList) as a list of n values."""
    if values is None:
        return [None] * n
    if hasattr(values, "tolist") and not isinstance(values, list):
        values = values.tolist()
    values = list(values)
    return values if len(values) == n else [None] * n


def from_dataproto(output: Any, inputs: Any = None, *, step: int) -> StepBatch:
    """The legacy trainer's rows: ``output`` of ``AgentLoopManager.generate_sequences`` (verl's padded batch),
    ``inputs`` the generation batch it was given (the dataset's columns, same row order)."""
    batch = output.batch
    width = int(batch["prompts"].shape[1])
    attention = batch["attention_mask"]
    n = int(batch["responses"].shape[0])
    columns: dict[str, list[Any]] = {}
    for source in (inputs, output):
        if source is None:
            continue
        for key, values in source.non_tensor_batch.items():
            if len(values) == n:
                columns[key] = _column(values, n)
    response_attention = attention[:, width:]
    return StepBatch(
        step=step,
        prompts=batch["prompts"],
        prompt_mask=attention[:, :width],
        responses=batch["responses"],
        response_attention=response_attention,
        response_mask=batch["response_mask"] if "response_mask" in batch.keys() else response_attention,
        rm_scores=batch["rm_scores"] if "rm_scores" in batch.keys() else None,
        columns=columns,
    )


def _rows_of(values: Any) -> list[list[Any]]:
    """Per-row lists of a jagged field (TransferQueue's nested tensors; a list of tensors)."""
    if hasattr(values, "unbind"):
        return [row.tolist() for row in values.unbind()]
    return [row.tolist() if hasattr(row, "tolist") else list(row) for row in values]


def _pad(rows: list[list[Any]], value: Any, *, left: bool, dtype: Any) -> Any:
    import torch

    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, row in enumerate(rows):
        if row:
            if left:
                out[i, width - len(row) :] = torch.tensor(row, dtype=dtype)
            else:
                out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def from_fields(fields: dict[str, Any], *, step: int, pad_token_id: int) -> StepBatch:
    """The default (V1) trainer's rows: fields read from TransferQueue (unpadded tensors per row, non-tensor
    columns), padded the way verl's own rollout pads them."""
    import torch

    prompts = _rows_of(fields["prompts"])
    responses = _rows_of(fields["responses"])
    n = len(responses)
    masks = _rows_of(fields["response_mask"]) if "response_mask" in fields else [[1] * len(r) for r in responses]
    scores = _rows_of(fields["rm_scores"]) if "rm_scores" in fields else None
    columns: dict[str, list[Any]] = {}
    for key, values in fields.items():
        if key in ("prompts", "responses", "response_mask", "rm_scores"):
            continue
        if isinstance(values, torch.Tensor) or hasattr(values, "unbind"):
            continue
        columns[key] = _column(values, n)
    extra = columns.pop("extra_fields", None)
    if extra is not None:  # the reward manager's extra keys sit in extra_fields["reward_extra_info"]
        infos = [(e or {}).get("reward_extra_info") or {} if isinstance(e, dict) else {} for e in extra]
        for key in sorted({k for info in infos for k in info}):
            columns.setdefault(key, [info.get(key) for info in infos])
    return StepBatch(
        step=step,
        prompts=_pad(prompts, pad_token_id, left=True, dtype=torch.long),
        prompt_mask=_pad([[1] * len(p) for p in prompts], 0, left=True, dtype=torch.long),
        responses=_pad(responses, pad_token_id, left=False, dtype=torch.long),
        response_attention=_pad([[1] * len(r) for r in responses], 0, left=False, dtype=torch.long),
        response_mask=_pad(masks, 0, left=False, dtype=torch.long),
        rm_scores=None if scores is None else _pad(scores, 0.0, left=False, dtype=torch.float32),
        columns=columns,
    )


@dataclass
class StepRows:
    """What :func:`step_rows` makes of a step: the engine's rows, the loss tensors (same row order), and what was
    left out."""

    rows: LocalRows
    tensors: dict[str, Any]
    errors: RowErrorLog
    left_out: int = 0  # rows of incomplete groups (a failed session, a group size other than rollout.n)


def _group_order(uids: list[Any], sessions: list[Any], group_size: int) -> tuple[list[int], int, int]:
    """Row indices in group order (uid by first appearance, then session), keeping complete groups only; the group
    size used (``group_size``, else the most common); the rows left out."""
    first: dict[Any, int] = {}
    for i, uid in enumerate(uids):
        first.setdefault(uid, i)
    counts = Counter(uids)
    size = group_size if group_size > 0 else (counts.most_common(1)[0][0] if counts else 1)
    keyed = sorted(
        range(len(uids)),
        key=lambda i: (first[uids[i]], sessions[i] if isinstance(sessions[i], int | float) else 0, i),
    )
    kept = [i for i in keyed if counts[uids[i]] == size]
    return kept, size, len(uids) - len(kept)


def grpo_advantages(totals: np.ndarray, group_size: int, norm_by_std: bool) -> list[float]:
    """Per row, the advantage verl's GRPO estimator gives it (``compute_grpo_outcome_advantage``, rows in groups of
    ``group_size``); zeros when verl is not installed."""
    if not len(totals):
        return []
    try:
        import torch
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    except ImportError:
        return [0.0] * len(totals)
    index = np.repeat(np.arange(len(totals) // group_size), group_size).astype(object)
    rewards = torch.tensor(totals, dtype=torch.float32).unsqueeze(1)
    advantages, _ = compute_grpo_outcome_advantage(
        rewards, torch.ones_like(rewards), index, norm_adv_by_std_in_grpo=norm_by_std
    )
    return advantages[:, 0].tolist()


def step_rows(
    batch: StepBatch,
    *,
    ctx: RunContext,
    markup: ThinkMarkup,
    group_size: int,
    response_length: int,
    task_column: str = "data_source",
    default_task: str = "all",
    norm_adv_by_std: bool = True,
    decode_text: Any = None,
) -> StepRows:
    """The engine's rows of one step, in group order, and the loss tensors of the same rows."""
    n = len(batch)
    cols = batch.columns
    uids = _column(cols.get("uid"), n)
    uids = [u if u is not None else f"row{i}" for i, u in enumerate(uids)]
    order, size, left_out = _group_order(uids, _column(cols.get("session_id"), n), group_size)
    if not order:
        raise ValueError(f"no complete group of {size} rows among the step's {n} rows")
    pick = np.asarray(order, dtype=np.int64)
    valid = batch.response_attention.sum(dim=1).tolist()
    responses = batch.responses.tolist()
    prompts = batch.prompts.tolist()
    prompt_counts = batch.prompt_mask.sum(dim=1).tolist()
    ids = [responses[i][: int(valid[i])] for i in order]
    prompt_ids = [prompts[i][len(prompts[i]) - int(prompt_counts[i]) :] if prompt_counts[i] else [] for i in order]
    decode = decode_text or ctx.decode_text
    texts = list(decode(ids)) if decode is not None else ["" for _ in order]
    raw_records = _column(cols.get(RECORD_KEY), n)  # one copy of the column, not one per row
    records = [ScoreRecord.from_json(raw_records[i]) for i in order]
    totals = (
        batch.rm_scores.sum(dim=1).double().numpy()[pick]
        if batch.rm_scores is not None
        else np.array([r.total if r is not None and r.total is not None else np.nan for r in records])
    )
    names, matrix = _reward_columns(records, totals)
    errors = RowErrorLog()
    raised = [RowError(k, r.error) for k, r in enumerate(records) if r is not None and r.error and not r.unrouted]
    if raised:
        errors.errors[0] = raised
    eos = set(ctx.eos_token_ids)
    tasks_raw = _column(cols.get(task_column if task_column in cols else "data_source"), n)
    data_sources = _column(cols.get("data_source"), n)
    models = _column(cols.get("reward_model"), n)
    extra_infos = _column(cols.get("extra_info"), n)
    raw_prompts = _column(cols.get("raw_prompt"), n)
    truths = [m.get("ground_truth") if isinstance(m, dict) else None for m in models]
    calls = tuple(
        _score_call(
            records[k], texts[k], ids[k], prompt_ids[k], data_sources[i], truths[i], extra_infos[i], raw_prompts[i]
        )
        for k, i in enumerate(order)
    )
    thinking = _column(cols.get(ctx.per_row_thinking_column), n) if ctx.per_row_thinking_column else [None] * n
    advantages = grpo_advantages(np.nan_to_num(totals), size, norm_adv_by_std)
    rows = LocalRows(
        step=batch.step,
        mode=batch.mode,
        num_generations=size,
        reward_names=names,
        reward_weights=[1.0] * len(names),
        rewards=matrix,
        advantages=advantages,
        tasks=[task_name(tasks_raw[i], default_task) for i in order],
        completions=texts,
        completion_ids=ids,
        prompt_ids=prompt_ids,
        prompts=[raw_prompts[i] for i in order],
        truncated=[not row or row[-1] not in eos for row in ids],
        thinking=[None if thinking[i] is None else bool(thinking[i]) for i in order],
        prompt_opened=prompts_open_block(prompt_ids, ctx.decode, markup),
        columns={
            "data_source": [v if isinstance(v, _SCALARS) else str(v) for v in (data_sources[i] for i in order)],
            "ground_truth": [v if isinstance(v, _SCALARS) else str(v) for v in (truths[i] for i in order)],
            "uid": [str(uids[i]) for i in order],
        },
        max_completion_length=int(response_length),
        decode=ctx.decode,
        reward_inputs=calls,
    )
    tensors = _loss_tensors(batch, pick)
    return StepRows(rows, tensors, errors, left_out=left_out)


def _reward_columns(records: list[ScoreRecord | None], totals: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Reward columns from the records: the scorer's score (NaN where it gave none: raised, None, no route), the
    stray-think penalty when it was added, and the rest of verl's reward (the inner manager's own terms: dapo's
    overlong penalty) when any. A row whose scorer gave no score gets NaN in every column: the other terms
    adjust a score, they are no verdict of their own. Rows without a record: one column, verl's reward."""
    recorded = [r for r in records if r is not None]
    if not recorded:
        return ["reward"], totals.reshape(-1, 1).astype(np.float64)
    name = next((r.scorer for r in recorded if r.scorer), "compute_score")
    with_penalty = any(r.penalty is not None for r in recorded)
    matrix = np.full((len(records), 3), np.nan)
    for k, r in enumerate(records):
        if r is None:
            matrix[k, 0] = totals[k]
            continue
        if r.score is None or r.error:
            continue
        matrix[k, 0] = r.score
        penalty = r.penalty or 0.0
        matrix[k, 1] = penalty
        total = totals[k] if np.isfinite(totals[k]) else (r.total if r.total is not None else np.nan)
        matrix[k, 2] = total - (r.given if r.given is not None else r.score) - penalty
    rest = matrix[:, 2]
    # verl holds rewards in float32: a remainder within its rounding is none
    with_rest = bool(np.any(np.abs(rest[np.isfinite(rest)]) > 1e-5))
    keep = [0] + ([1] if with_penalty else []) + ([2] if with_rest else [])
    names = [name] + ([PENALTY_TERM] if with_penalty else []) + ([MANAGER_COLUMN] if with_rest else [])
    return names, matrix[:, keep]


def _score_call(
    record: ScoreRecord | None,
    text: str,
    ids: list[int],
    prompt_ids: list[int],
    data_source: Any,
    ground_truth: Any,
    extra_info: Any,
    raw_prompt: Any = None,
) -> VerlScoreCall:
    observed = record is not None and record.chars == len(text) and record.digest == text_digest(text)
    recorded = record is not None and record.extra_info is not None
    return VerlScoreCall(
        data_source=data_source,
        solution_str=text,
        ground_truth=ground_truth,
        extra_info=record.extra_info if recorded and record is not None else extra_info,
        response_ids=list(ids),
        prompt_ids=list(prompt_ids),
        score=None if record is None else record.score,
        error="" if record is None else record.error,
        observed=observed,
        extra_info_recorded=recorded,
        seconds=record.seconds if record is not None and record.chars >= 0 else None,
        prompt=raw_prompt,
    )


def _loss_tensors(batch: StepBatch, pick: np.ndarray) -> dict[str, Any]:
    """The loss tensors of the kept rows as the mask check reads them (TRL's names): the prompt and its attention,
    the response and verl's loss mask, and the per-token rewards. A response mask with holes inside the response
    (multi-turn: tool results carry no loss) is checked as a tool mask over a fully attended response."""
    import torch

    index = torch.as_tensor(pick, dtype=torch.long)
    attention = batch.response_attention.index_select(0, index)
    loss = batch.response_mask.index_select(0, index)
    out: dict[str, Any] = {
        "prompt_ids": batch.prompts.index_select(0, index),
        "prompt_mask": batch.prompt_mask.index_select(0, index),
        "completion_ids": batch.responses.index_select(0, index),
        "completion_mask": loss,
    }
    if bool(((loss == 0) & (attention != 0)).any()):
        out["completion_mask"] = attention
        out["tool_mask"] = loss
    if batch.rm_scores is not None:
        out["token_rewards"] = batch.rm_scores.index_select(0, index)
    return out


__all__ = ["StepBatch", "StepRows", "from_dataproto", "from_fields", "grpo_advantages", "step_rows"]
