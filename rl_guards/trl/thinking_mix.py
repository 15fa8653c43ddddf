"""Mixed thinking / non-thinking GRPO: a per-row ``enable_thinking`` flag the prompt renderer really honours.

GRPOTrainer renders every prompt with ONE global ``args.chat_template_kwargs`` (``_tokenize_prompts``), so a
dataset column ``enable_thinking`` reaches reward functions but never the template: every row renders in the
same mode. Options considered, checked by rendering byte for byte:

- a per-row assistant prefill message (``<think>\\n\\n</think>\\n\\n``): TRL renders with
  ``add_generation_prompt=True`` and never ``continue_final_message``, so the prefill is closed as its own turn
  and a new assistant header follows: never equal to the ``enable_thinking=False`` render (tested).
- pre-rendered string prompts: byte-exact, but reward functions and completion parsing then get strings
  instead of messages, and the template path (tools, multimodal) is bypassed.
- wrapping ``_tokenize_prompts`` on the trainer instance (chosen): each generation batch's rows are split by
  their flag and rendered with ``{**chat_template_kwargs, "enable_thinking": flag}``; the ids equal
  ``apply_chat_template(prompt, add_generation_prompt=True, enable_thinking=flag)`` exactly (tested).

::

    train = mix_thinking(dataset, ratio=0.5)            # adds the enable_thinking column
    trainer = GRPOTrainer(..., train_dataset=train)
    honour_thinking_column(trainer)                      # before trainer.train()

Limits: rows without the flag (None) use the global kwargs; ``environment_factory`` and ``rollout_func`` runs are
refused (they render prompts elsewhere); a reward *model* (nn.Module reward) still renders its input with the
global kwargs; multimodal batches that mix both modes are refused. The wrapper relies on the private
``_tokenize_prompts`` / ``_generate_and_score_completions`` (TRL 0.19 to 1.16) and is checked at install.
"""

from __future__ import annotations

import random
from typing import Any

from rl_guards.errors import ConfigError, IncompatibleTrainerError

REQUIRED = ("_tokenize_prompts", "_generate_and_score_completions", "chat_template_kwargs")


def mix_thinking(
    dataset: Any, ratio: float = 0.5, column: str = "enable_thinking", seed: int = 0, *, stratify_by: str | None = None
) -> Any:
    """Set a per-row thinking flag: ``round(ratio * n)`` rows True (of each ``stratify_by`` group), chosen by ``seed``.

    Replaces ``column`` if present. Returns a new ``datasets.Dataset``.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"ratio must be within [0, 1], got {ratio!r}")
    n = len(dataset)
    groups: dict[Any, list[int]] = {}
    keys = dataset[stratify_by] if stratify_by is not None else [None] * n
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    rng = random.Random(seed)
    flags = [False] * n
    for key in sorted(groups, key=repr):
        rows = groups[key]
        for i in rng.sample(rows, round(ratio * len(rows))):
            flags[i] = True
    if column in dataset.column_names:
        dataset = dataset.remove_columns(column)
    return dataset.add_column(column, flags)


class ThinkingColumn:
    """The installed wrapper: renders each row with its own ``enable_thinking``. ``calls`` counts mixed renders."""

    def __init__(self, trainer: Any, column: str) -> None:
        self.trainer = trainer
        self.column = column
        self.flags: list[Any] | None = None  # flags of the generation batch being rendered
        self.calls = 0
        self.active = True
        self._tokenize = trainer._tokenize_prompts
        self._generate = trainer._generate_and_score_completions
        trainer._generate_and_score_completions = self._generate_and_score
        trainer._tokenize_prompts = self._tokenize_prompts

    def uninstall(self) -> None:
        """Stop rendering per row; put the trainer's methods back unless something wrapped them since."""
        self.active = False
        if self.trainer._generate_and_score_completions == self._generate_and_score:
            self.trainer._generate_and_score_completions = self._generate
        if self.trainer._tokenize_prompts == self._tokenize_prompts:
            self.trainer._tokenize_prompts = self._tokenize

    def _generate_and_score(self, inputs: list[dict[str, Any]]) -> Any:
        if not self.active:
            return self._generate(inputs)
        self.flags = [row.get(self.column) if isinstance(row, dict) else None for row in inputs]
        try:
            return self._generate(inputs)
        finally:
            self.flags = None

    def _tokenize_prompts(self, prompts: list[Any]) -> Any:
        flags = self.flags
        if flags is None:  # rendered outside a generation batch (guards, probes): global kwargs
            return self._tokenize(prompts)
        if len(flags) != len(prompts):
            raise IncompatibleTrainerError(
                f"rl_guards thinking column: {len(prompts)} prompts rendered for a batch of {len(flags)} rows; "
                "this TRL version renders prompts differently. Remove honour_thinking_column()."
            )
        base = dict(self.trainer.chat_template_kwargs or {})
        groups: dict[Any, list[int]] = {}
        for i, flag in enumerate(flags):
            groups.setdefault(None if flag is None else bool(flag), []).append(i)
        self.calls += 1
        if len(groups) == 1:
            (flag,) = groups
            return self._render(prompts, base, flag)
        prompt_ids: list[Any] = [None] * len(prompts)
        images: list[Any] = [None] * len(prompts)
        any_images = False
        for flag, rows in groups.items():
            ids, imgs, fields = self._render([prompts[i] for i in rows], base, flag)
            if fields:
                raise NotImplementedError(
                    "rl_guards thinking column: multimodal batches that mix thinking and non-thinking rows are not "
                    "supported; give each batch one mode."
                )
            for j, i in enumerate(rows):
                prompt_ids[i] = ids[j]
                if imgs is not None:
                    images[i] = imgs[j]
                    any_images = True
        return prompt_ids, images if any_images else None, {}

    def _render(self, prompts: list[Any], base: dict[str, Any], flag: bool | None) -> Any:
        if flag is None:
            return self._tokenize(prompts)
        trainer = self.trainer
        saved = trainer.chat_template_kwargs
        trainer.chat_template_kwargs = {**base, "enable_thinking": flag}
        try:
            return self._tokenize(prompts)
        finally:
            trainer.chat_template_kwargs = saved


def thinking_column_of(trainer: Any) -> str | None:
    """The column an active :class:`ThinkingColumn` renders this trainer's prompts by, or None."""
    installed = getattr(getattr(trainer, "_tokenize_prompts", None), "__self__", None)
    return installed.column if isinstance(installed, ThinkingColumn) and installed.active else None


def honour_thinking_column(trainer: Any, column: str = "enable_thinking") -> ThinkingColumn:
    """Make a built GRPOTrainer render each prompt with its row's ``column`` as ``enable_thinking``."""
    missing = [name for name in REQUIRED if not hasattr(trainer, name)]
    if missing:
        raise IncompatibleTrainerError(f"trainer lacks {missing}: cannot render prompts per row (TRL drift?)")
    if getattr(trainer, "environment_factories", None) is not None:
        raise ConfigError("honour_thinking_column does not support environment_factory (prompts render per env)")
    if getattr(trainer, "rollout_func", None) is not None:
        raise ConfigError("honour_thinking_column does not support rollout_func (it renders prompts itself)")
    existing = getattr(trainer._tokenize_prompts, "__self__", None)
    if isinstance(existing, ThinkingColumn):
        raise ConfigError("honour_thinking_column is already installed on this trainer")
    return ThinkingColumn(trainer, column)
