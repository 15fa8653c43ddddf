"""Keep outcome judges blind to the thinking trace.

Scoring the trace puts optimisation pressure on it (it becomes less monitorable); unless you mean to do process
supervision, a judge should see the final answer only::

    judge = blind_judge(my_llm_judge)            # the judge gets answers with the thinking removed
    audit = blind_judge(my_judge, check_only=True)  # passes text unchanged; counts and warns about leaks

The wrapper keeps the wrapped function's ``__name__`` (no prefix), so its W&B key ``rewards/<name>/mean`` does
not change when you add or remove it. It is picklable when the wrapped function is, and async when the wrapped
function is (TRL runs async reward functions concurrently).

What the judge receives: ``completions`` with the thinking removed by
:func:`~rl_guards.core.think_markup.strip_thinking` (strings stay strings; messages keep their other fields,
``content`` becomes the answer and ``reasoning_content``/``reasoning`` are dropped), and ``completion_ids=None``
(ids still hold the thinking tokens). Every other kwarg passes unchanged.

Metric through TRL's ``log_metric``: ``rl_guards/blind_judge/leak_rate``, the share of judge inputs that still
hold think markup (exact or near-miss tags) after stripping, or as given with ``check_only=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rl_guards.console import say
from rl_guards.core.completions import completion_text
from rl_guards.core.severity import WARNING
from rl_guards.core.think_markup import PARTIAL_TAG, THINK, ThinkMarkup, scan, strip_thinking
from rl_guards.rewards.callables import is_async_reward, require_async_support, reward_name
from rl_guards.rewards.stray_think import resolve_markup

logger = logging.getLogger("rl_guards")

LEAK_METRIC = "rl_guards/blind_judge/leak_rate"


@dataclass(frozen=True)
class JudgeInputReport:
    """How many judge inputs still hold think markup."""

    total: int
    with_markup: int
    rows: tuple[int, ...]  # indices of the inputs with markup

    @property
    def leak_rate(self) -> float:
        return self.with_markup / self.total if self.total else 0.0

    @property
    def ok(self) -> bool:
        return self.with_markup == 0


def has_markup(text: Any, markup: ThinkMarkup = THINK) -> bool:
    """True when a text (or TRL completion) holds an exact or near-miss think tag, or a reasoning field.

    In a message list only assistant messages count (a tool result may quote a tag literally).
    """
    if isinstance(text, list | tuple):
        text = [m for m in text if not isinstance(m, dict) or m.get("role", "assistant") == "assistant"]
        if any(isinstance(m, dict) and (m.get("reasoning_content") or m.get("reasoning")) for m in text):
            return True
    verdict = scan(completion_text(text, markup), markup)
    return verdict.has_tags or PARTIAL_TAG in verdict.anomalies


def check_judge_inputs(texts: Sequence[Any], markup: ThinkMarkup | str = THINK) -> JudgeInputReport:
    """Count the judge inputs (strings or TRL message lists) that still hold think markup."""
    resolved = resolve_markup(markup)
    rows = tuple(i for i, text in enumerate(texts) if has_markup(text, resolved))
    return JudgeInputReport(total=len(texts), with_markup=len(rows), rows=rows)


class BlindJudge:
    """A reward function wrapper that hands the judge final answers only (see :func:`blind_judge`)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        markup: ThinkMarkup | str = THINK,
        *,
        check_only: bool = False,
        thinking_column: str = "enable_thinking",
        prompt_opened_thinking: bool = False,
        prompt_opened_nonthinking: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"blind_judge needs a callable reward function, got {type(fn).__name__}")
        self.fn = fn
        self.markup = resolve_markup(markup)
        self.check_only = bool(check_only)
        self.thinking_column = thinking_column
        self.prompt_opened_thinking = bool(prompt_opened_thinking)
        self.prompt_opened_nonthinking = bool(prompt_opened_nonthinking)
        self.__name__ = reward_name(fn)
        self.leaks_seen = 0  # judge inputs with markup so far (this process)
        self._warned = False

    def set_prompt_opened(self, thinking_on: bool, thinking_off: bool) -> None:
        """Whether the rendered generation prompt already opens the block, with thinking on / off.

        With an opened block, a completion that never closes it is all thinking: the judge gets an empty answer.
        """
        self.prompt_opened_thinking = bool(thinking_on)
        self.prompt_opened_nonthinking = bool(thinking_off)

    def blind(self, completion: Any, thinking: Any = None) -> Any:
        """One completion as the judge should see it."""
        opened = self.prompt_opened_thinking if (thinking is None or bool(thinking)) else self.prompt_opened_nonthinking
        if isinstance(completion, str):
            return strip_thinking(completion, self.markup, prompt_opened=opened)
        if isinstance(completion, list | tuple):
            out = []
            for k, message in enumerate(completion):
                if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
                    out.append(message)
                    continue
                first = opened and k == 0
                text = completion_text([message], self.markup, prompt_opened=first)
                clean = {key: v for key, v in message.items() if key not in ("reasoning_content", "reasoning")}
                clean["content"] = strip_thinking(text, self.markup, prompt_opened=first)
                out.append(clean)
            return out
        return completion

    def _prepare(self, completions: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        column = kwargs.get(self.thinking_column)
        if not isinstance(column, list | tuple) or len(column) != len(completions):
            column = [None] * len(completions)
        if self.check_only:
            given = completions
        else:
            given = [self.blind(c, t) for c, t in zip(completions, column, strict=True)]
        report = check_judge_inputs(given, self.markup)
        self._record(report, kwargs.get("log_metric"))
        passed = dict(kwargs)
        if not self.check_only:
            passed["completion_ids"] = None
        return given, passed

    def _record(self, report: JudgeInputReport, log_metric: Any) -> None:
        if callable(log_metric) and report.total:
            log_metric(LEAK_METRIC, report.leak_rate)
        self.leaks_seen += report.with_markup
        if report.with_markup and not self._warned:
            self._warned = True
            what = "receives" if self.check_only else "still receives after stripping"
            message = (
                f"[rl_guards/blind_judge] warning: judge {self.__name__!r} {what} think markup in "
                f"{report.with_markup}/{report.total} inputs (rows {list(report.rows[:5])}). "
                "Fix: wrap it with blind_judge(...) without check_only, or fix the markup (near-miss tags such as "
                "<THINK> are not stripped)."
            )
            say(message, severity=WARNING)

    def __call__(self, completions: list[Any], **kwargs: Any) -> Any:
        given, passed = self._prepare(list(completions), kwargs)
        return self.fn(completions=given, **passed)

    def __repr__(self) -> str:
        return f"blind_judge({self.__name__}, markup={self.markup.name!r}, check_only={self.check_only})"


class AsyncBlindJudge(BlindJudge):
    """:class:`BlindJudge` for async judges (TRL awaits them concurrently)."""

    async def __call__(self, completions: list[Any], **kwargs: Any) -> Any:  # type: ignore[override]
        given, passed = self._prepare(list(completions), kwargs)
        return await self.fn(completions=given, **passed)


def blind_judge(
    reward_fn: Callable[..., Any],
    markup: ThinkMarkup | str = THINK,
    *,
    check_only: bool = False,
    thinking_column: str = "enable_thinking",
) -> BlindJudge:
    """Wrap a reward function / LLM judge so it sees final answers only (or, ``check_only``, audit its inputs)."""
    require_async_support(reward_fn, "blind_judge")
    cls = AsyncBlindJudge if is_async_reward(reward_fn) else BlindJudge
    return cls(reward_fn, markup, check_only=check_only, thinking_column=thinking_column)
