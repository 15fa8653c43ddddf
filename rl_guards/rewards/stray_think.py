"""A TRL reward function that penalises stray or malformed think tags.

Add it to ``reward_funcs`` next to the task rewards::

    penalty = StrayThinkPenalty.from_guards_config(guards_config, tokenizer=tokenizer)
    trainer = GRPOTrainer(..., reward_funcs=[accuracy, penalty])

Each row is scored in its own mode: the dataset column ``thinking_column`` (``enable_thinking``) when present,
else the default mode. A row is penalised (``-weight``) when its markup is wrong for its mode (any tag in a
non-thinking row; malformed markup in a thinking row, see
:func:`~rl_guards.core.think_markup.anomalies_for_mode`), or, with ``anomalies`` given, when it has one of those
codes. Other rows get ``0.0``. ``enabled=False`` gives ``0.0`` everywhere and scans nothing, so the function can
stay in ``reward_funcs`` (and its W&B key stays) while switched off in the config.

Metrics through TRL's ``log_metric`` (W&B shows them under ``train/``), on every call, for a fixed key set:

=======================================================  ===================================================
key                                                      value
=======================================================  ===================================================
``rl_guards/stray_think_penalty/penalised_rate``         share of this call's rows that got the penalty
``rl_guards/stray_think_penalty/<code>_rate``            share of rows with that code (counted codes only)
=======================================================  ===================================================

The reward itself appears in TRL's own ``rewards/stray_think_penalty/mean``.

Limit: TRL decodes completions with ``skip_special_tokens=True``. Where the tags are special tokens (gemma4's
channel tokens, every gpt-oss harmony token) the text has no markup left; pass ``open_id``/``close_id`` (or a
tokenizer to :meth:`StrayThinkPenalty.configure`) so single-token tags are counted on ids. gpt-oss's multi-token
``<|channel|>analysis<|message|>`` cannot be counted on ids: use the monitor, which decodes with specials kept.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rl_guards.chat.markup import markup_from_config, tag_token_ids
from rl_guards.console import say
from rl_guards.core.completions import completion_text
from rl_guards.core.severity import WARNING
from rl_guards.core.think_markup import (
    ALL_CODES,
    MARKUPS,
    THINK,
    ThinkMarkup,
    anomalies_for_mode,
    scan,
)
from rl_guards.errors import ConfigError

logger = logging.getLogger("rl_guards")

METRIC_PREFIX = "rl_guards/stray_think_penalty"


def resolve_markup(markup: ThinkMarkup | str) -> ThinkMarkup:
    """A :class:`ThinkMarkup`, or one of :data:`~rl_guards.core.think_markup.MARKUPS` by name."""
    if isinstance(markup, ThinkMarkup):
        return markup
    if markup in MARKUPS:
        return MARKUPS[markup]
    raise ConfigError(f"unknown markup {markup!r}; available: {sorted(MARKUPS)} or a ThinkMarkup")


class StrayThinkPenalty:
    """``-weight`` for a completion whose think markup is wrong for its mode, ``0.0`` otherwise.

    Args:
        weight: penalty size (the reward is ``-weight``).
        anomalies: codes that count; empty = every code wrong for the row's mode.
        thinking: default mode for rows without the column; None = ``enable_thinking`` from :meth:`configure`
            (thinking when never configured).
        thinking_column: dataset column with each row's mode (TRL passes dataset columns as kwargs).
        markup: a :class:`ThinkMarkup` or a name in ``MARKUPS``.
        open_id / close_id: the tags' token ids, to count tags on ``completion_ids`` too (optional).
        enabled: False returns ``0.0`` for every row.
        mode: ``warn`` warns once when a row is first penalised; ``log``/``raise`` only log metrics (a reward
            function never stops the run; the :class:`~rl_guards.guards.think_tags.ThinkTagsGuard` does).
        prompt_opened_thinking / prompt_opened_nonthinking: the rendered generation prompt already opens the block
            in that mode (see :meth:`set_prompt_opened`).
    """

    __name__ = "stray_think_penalty"

    def __init__(
        self,
        weight: float = 1.0,
        anomalies: Sequence[str] = (),
        thinking: bool | None = None,
        *,
        thinking_column: str = "enable_thinking",
        markup: ThinkMarkup | str = THINK,
        open_id: int | None = None,
        close_id: int | None = None,
        enabled: bool = True,
        mode: str = "log",
        prompt_opened_thinking: bool = False,
        prompt_opened_nonthinking: bool = False,
        log_rates: bool = False,
    ) -> None:
        if weight < 0:
            raise ConfigError(f"stray_think_penalty.weight must be >= 0, got {weight!r}")
        unknown = sorted(set(anomalies) - set(ALL_CODES))
        if unknown:
            raise ConfigError(f"stray_think_penalty.anomalies has unknown code(s) {unknown}; available: {ALL_CODES}")
        self.weight = float(weight)
        self.anomalies = tuple(sorted(set(anomalies)))
        self.thinking = thinking
        self.default_thinking = True  # used when thinking is None; set by configure()
        self.thinking_column = thinking_column
        self.markup = resolve_markup(markup)
        self.open_id = open_id
        self.close_id = close_id
        self.enabled = bool(enabled)
        self.mode = mode
        self.prompt_opened_thinking = bool(prompt_opened_thinking)
        self.prompt_opened_nonthinking = bool(prompt_opened_nonthinking)
        # its own rates repeat TRL's rewards/stray_think_penalty/mean and the think_tags guard's rates: logged only
        # with metrics.level "full" (configure() sets it from the guards' config)
        self.log_rates = bool(log_rates)
        self._warned = False

    # ----- construction ---------------------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls,
        config: Any,
        *,
        markup: ThinkMarkup | str = THINK,
        thinking_column: str = "enable_thinking",
        open_id: int | None = None,
        close_id: int | None = None,
    ) -> StrayThinkPenalty:
        """From a :class:`~rl_guards.config.StrayThinkPenaltyConfig`."""
        return cls(
            weight=config.weight,
            anomalies=tuple(config.anomalies),
            thinking=config.thinking,
            thinking_column=thinking_column,
            markup=markup,
            open_id=open_id,
            close_id=close_id,
            enabled=config.enabled,
            mode=config.mode,
        )

    @classmethod
    def from_guards_config(
        cls, config: Any, *, tokenizer: Any = None, chat_template_kwargs: dict[str, Any] | None = None
    ) -> StrayThinkPenalty:
        """From a whole :class:`~rl_guards.config.GuardsConfig`: the penalty section, plus the think_tags section's
        tags and thinking column; with a tokenizer, also the tag ids and the markup family of its template."""
        markup = markup_from_config(config.think_tags, getattr(tokenizer, "chat_template", None))
        penalty = cls.from_config(
            config.stray_think_penalty, markup=markup, thinking_column=config.think_tags.thinking_column
        )
        penalty.configure(tokenizer=tokenizer, chat_template_kwargs=chat_template_kwargs)
        return penalty

    def configure(
        self,
        tokenizer: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        metrics_level: str | None = None,
    ) -> None:
        """Take the tag ids from a tokenizer, the default mode from the trainer's ``chat_template_kwargs``, and
        whether to log its rates from the guards' ``metrics.level`` (``full``: yes)."""
        if metrics_level is not None:
            self.log_rates = metrics_level == "full"
        if tokenizer is not None and (self.open_id is None or self.close_id is None):
            self.open_id, self.close_id = tag_token_ids(tokenizer, self.markup)
        if chat_template_kwargs is not None:
            value = chat_template_kwargs.get("enable_thinking", True)
            self.default_thinking = True if value is None else bool(value)

    def set_prompt_opened(self, thinking_on: bool, thinking_off: bool) -> None:
        """Whether the rendered generation prompt already opens the block, with thinking on / off."""
        self.prompt_opened_thinking = bool(thinking_on)
        self.prompt_opened_nonthinking = bool(thinking_off)

    # ----- scoring ----------------------------------------------------------------------------------------------
    def row_thinking(self, value: Any) -> bool:
        """A row's mode from its column value (None: the default mode)."""
        if value is None:
            return self.default_thinking if self.thinking is None else bool(self.thinking)
        return bool(value)

    def row_codes(self, completion: Any, ids: Sequence[int] | None, thinking: bool) -> tuple[set[str], bool]:
        """The row's codes (found and wrong-for-mode) and whether it is penalised."""
        prompt_opened = self.prompt_opened_thinking if thinking else self.prompt_opened_nonthinking
        text = completion_text(completion, self.markup, prompt_opened=prompt_opened)
        verdict = scan(
            text,
            self.markup,
            prompt_opened=prompt_opened,
            token_ids=ids,
            open_id=self.open_id,
            close_id=self.close_id,
        )
        wrong = set(anomalies_for_mode(verdict, thinking))
        codes = set(verdict.anomalies) | wrong
        penalised = bool(codes & set(self.anomalies)) if self.anomalies else bool(wrong)
        return codes, penalised

    def __call__(self, completions: list[Any], completion_ids: list[Sequence[int]] | None = None, **kwargs: Any):
        n = len(completions)
        if not self.enabled or n == 0:
            return [0.0] * n
        column = kwargs.get(self.thinking_column)
        if not isinstance(column, list | tuple) or len(column) != n:
            column = [None] * n
        rewards: list[float] = []
        counts = dict.fromkeys(self.anomalies or ALL_CODES, 0)
        penalised_rows = 0
        first: tuple[str, ...] | None = None
        for i, completion in enumerate(completions):
            ids = completion_ids[i] if completion_ids is not None and i < len(completion_ids) else None
            codes, penalised = self.row_codes(completion, ids, self.row_thinking(column[i]))
            for code in codes:
                if code in counts:
                    counts[code] += 1
            if penalised:
                penalised_rows += 1
                first = first or tuple(sorted(codes))
            rewards.append(-self.weight if penalised else 0.0)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and self.log_rates:
            log_metric(f"{METRIC_PREFIX}/penalised_rate", penalised_rows / n)
            for code, count in counts.items():
                log_metric(f"{METRIC_PREFIX}/{code}_rate", count / n)
        if first is not None and self.mode == "warn" and not self._warned:
            self._warned = True
            message = (
                f"[rl_guards/stray_think_penalty] warning: penalising malformed or stray think markup "
                f"({penalised_rows}/{n} rows of this batch; first row's codes: {', '.join(first)})."
            )
            say(message, severity=WARNING)
        return rewards

    def __repr__(self) -> str:
        return (
            f"StrayThinkPenalty(weight={self.weight}, anomalies={list(self.anomalies)}, thinking={self.thinking}, "
            f"markup={self.markup.name!r}, enabled={self.enabled})"
        )
