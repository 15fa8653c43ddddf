"""TRL's output of one generation batch, plus the captured reward call -> this rank's
:class:`~rl_guards.engine.assembly.LocalRows`.

What ``_calculate_rewards`` was called with (inputs, prompts, completions, completion ids) and returned (the
rewards of every rank's rows), and the tensors ``_generate_and_score_completions`` returned (prompt ids and mask,
advantages). The ids TRL hands over are kept as they are (lists of ints): nothing is copied per token.
"""

from __future__ import annotations

from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.core.completions import completion_text
from rl_guards.core.task_labels import task_name
from rl_guards.core.think_markup import ThinkMarkup, prompts_open_block
from rl_guards.engine.assembly import LocalRows
from rl_guards.guards.base import RunContext

# Dataset columns never copied into RolloutBatch.columns (TRL's own or too large to gather).
SKIP_COLUMNS = frozenset({"prompt", "completion", "completion_ids", "images", "image"})
_SCALARS = (str, int, float, bool, type(None))


def unpad_prompts(prompt_ids: Any, prompt_mask: Any) -> list[list[int]]:
    """Each row's prompt tokens (where the mask is 1), with one host transfer for the batch.

    TRL left-pads prompts: when every row's mask is one block ending at the last column, a row is the tail of its
    ids; any other mask is read position by position (the mask guard says what is wrong with it).
    """
    ids = prompt_ids.tolist()
    if prompt_mask.dim() == 2 and prompt_mask.size(1) > 0:
        block = bool((prompt_mask[:, 1:] >= prompt_mask[:, :-1]).all()) and bool(
            ((prompt_mask == 0) | (prompt_mask == 1)).all()
        )
        if block:
            counts = prompt_mask.sum(dim=1).tolist()
            return [row[len(row) - int(k) :] if k else [] for row, k in zip(ids, counts, strict=True)]
    mask = prompt_mask.tolist()
    return [[t for t, m in zip(row, keep, strict=True) if m] for row, keep in zip(ids, mask, strict=True)]


def local_rows(
    output: dict[str, Any],
    pending: tuple[Any, ...],
    *,
    step: int,
    mode: str,
    trainer: Any,
    ctx: RunContext,
    config: GuardsConfig,
    markup: ThinkMarkup,
) -> LocalRows:
    """This rank's rows of the batch, column by column, ready for the engine."""
    import torch

    inputs, prompts, completions, completion_ids_list, rewards = pending
    task_col = config.tasks.task_column
    think_col = config.think_tags.thinking_column
    default_task = config.tasks.default_task
    default_thinking = ctx.chat_template_kwargs.get("enable_thinking")
    eos_and_pad = set(ctx.eos_token_ids)
    if ctx.pad_token_id is not None:
        eos_and_pad.add(int(ctx.pad_token_id))
    prompt_rows = unpad_prompts(output["prompt_ids"], output["prompt_mask"])
    n = len(inputs)
    prompt_rows += [[] for _ in range(n - len(prompt_rows))]
    opened = prompts_open_block(prompt_rows, ctx.decode, markup)
    opened += [False] * (n - len(opened))
    ids = [row if isinstance(row, list) else list(map(int, row)) for row in completion_ids_list]
    names: dict[str, None] = {}
    for example in inputs:
        for key, value in example.items():
            if key not in SKIP_COLUMNS and key != task_col and isinstance(value, _SCALARS):
                names[key] = None
    columns = {
        key: [v if isinstance(v := example.get(key), _SCALARS) else None for example in inputs] for key in names
    }
    thinking = [example.get(think_col, default_thinking) for example in inputs]
    num_generations = trainer.num_generations if mode == "train" else getattr(trainer, "num_generations_eval", 1)
    weights = getattr(trainer, "reward_weights", None)
    reward_values = torch.as_tensor(rewards).detach().float().cpu().numpy()
    weight_list = [float(w) for w in weights.tolist()] if weights is not None else [1.0] * reward_values.shape[1]
    return LocalRows(
        step=step,
        mode=mode,
        num_generations=int(num_generations or 1),
        reward_names=list(ctx.reward_func_names),
        reward_weights=weight_list,
        rewards=reward_values,
        advantages=output["advantages"].detach().float().cpu().tolist(),
        tasks=[task_name(example.get(task_col), default_task) for example in inputs],
        completions=[completion_text(c, markup) for c in completions],
        completion_ids=ids,
        prompt_ids=prompt_rows[:n],
        prompts=list(prompts),
        truncated=[not row or row[-1] not in eos_and_pad for row in ids],
        thinking=[None if t is None else bool(t) for t in thinking],
        prompt_opened=opened[:n],
        columns=columns,
        max_completion_length=int(getattr(trainer.args, "max_completion_length", 0) or 0),
        epoch=float(trainer.state.epoch or 0.0),
        decode=ctx.decode,
        reward_inputs=(*pending[:4], trainer.state),
    )


__all__ = ["SKIP_COLUMNS", "local_rows", "unpad_prompts"]
