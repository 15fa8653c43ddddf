"""The reward-function signatures users write, detected from the function, each adapted to TRL's calling convention.

Every adapter is a TRL-style function ``f(prompts, completions, completion_ids=None, **columns) -> list[float|None]``,
so the audit drives all of them through the same code as the in-run checks (:func:`rl_guards.rewards.calls.
call_reward`, the reference pairs, the probes). What each framework hands its functions:

==========  ===============================================================  =====================================
framework   the user's function                                              returns
==========  ===============================================================  =====================================
trl         ``f(prompts, completions, completion_ids, **columns)`` (batch)   a list of float / None
verl        ``compute_score(data_source, solution_str, ground_truth,         a float, or a dict with ``score``
            extra_info=None)`` (one sample)
openrlhf    ``reward_func(queries, prompts, labels)`` (batch; ``queries``    a tensor / list, or a dict with
            = prompt + response)                                             ``rewards``
verifiers   ``f(completion, answer, prompt=, state=, info=, task=,           a float
            parser=)`` (one sample; only the arguments it names); with       (v1: or a mapping of keyed scores,
            verifiers >= 0.4 (``verifiers.v1``), a ``@vf.reward``            summed)
            ``f(task, trace)``: ``trace.last_reply`` the completion,
            ``task`` the row's ``TaskData`` with every column
plain       ``f(completion, answer)`` (one sample)                           a float
==========  ===============================================================  =====================================

Async functions are awaited. A value that is not a number (nor None, nor the framework's dict) raises
:class:`RewardTypeError`, shown like an exception the function raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rl_guards.core.completions import completion_text
from rl_guards.errors import ConfigError

FRAMEWORKS: tuple[str, ...] = ("trl", "verl", "openrlhf", "verifiers", "plain")
VERIFIERS_ARGS = ("parser", "state", "info", "task", "prompt")


class RewardTypeError(TypeError):
    """A reward function returned something that is not a score."""


class CallTimeout(BaseException):
    """A reward call ran past the audit's timeout (a BaseException: the function's own ``except Exception`` cannot
    swallow it)."""


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def detect_framework(fn: Any) -> str:
    """The framework whose signature ``fn`` has (see the module doc); ConfigError when none fits."""
    params = _params(fn)
    names = set(params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if "queries" in names:
        return "openrlhf"
    if "solution_str" in names or {"data_source", "ground_truth"} <= names:
        return "verl"
    if names & {"completions", "prompts", "completion_ids"} or (var_kw and len(params) == 1):
        return "trl"
    if "completion" in names and (names & set(VERIFIERS_ARGS) or var_kw):
        return "verifiers"
    if "trace" in names and names <= {"self", "task", "trace", "runtime"}:
        return "verifiers"  # verifiers.v1: a @vf.reward (task, trace)
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return "plain"
    shown = f"({', '.join(params)})" if params else "(no readable signature)"
    raise ConfigError(
        f"cannot tell which framework's reward signature {getattr(fn, '__name__', fn)}{shown} is; pass --framework "
        f"(one of {', '.join(FRAMEWORKS)})"
    )


def score_value(value: Any, framework: str) -> float | None:
    """One returned value as a score (NaN kept: the audit reports it); RewardTypeError for anything else."""
    if isinstance(value, dict) and framework == "verifiers":  # v1 keyed scores, each recorded with the weight
        value = sum(score_value(v, framework) or 0.0 for v in value.values())
    if isinstance(value, dict):
        key = "score" if framework == "verl" else "reward"
        if key not in value:
            raise RewardTypeError(f"returned a dict without {key!r}: {_short(value)}")
        value = value[key]
    if hasattr(value, "item") and not isinstance(value, bool | int | float):
        try:
            value = value.item()  # a 0-d tensor or numpy scalar
        except Exception as exc:
            raise RewardTypeError(f"returned {type(value).__name__} {_short(value)}, not a number") from exc
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return float(value)
    raise RewardTypeError(f"returned {type(value).__name__} {_short(value)}, not a number")


def score_list(value: Any, n: int, framework: str) -> list[float | None]:
    """A batch function's return value as ``n`` scores (a list, a tensor, or OpenRLHF's dict with ``rewards``)."""
    if isinstance(value, dict):
        if "rewards" not in value:
            raise RewardTypeError(f"returned a dict without 'rewards': {_short(value)}")
        value = value["rewards"]
    if hasattr(value, "tolist") and not isinstance(value, list | tuple):
        value = value.tolist()
    if isinstance(value, bool | int | float) and n == 1:
        value = [value]
    if not isinstance(value, list | tuple):
        raise RewardTypeError(f"returned {type(value).__name__} {_short(value)}, not one score per completion")
    if len(value) != n:
        raise RewardTypeError(f"returned {len(value)} values for {n} completions")
    return [score_value(v, framework) for v in value]


def _short(value: Any, chars: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[:chars] + "…"


def _resolve(value: Any) -> Any:
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def _gather(values: list[Any]) -> list[Any]:
    """Await every awaitable in ``values`` together (an async judge's calls run concurrently, as the trainer does)."""
    if not any(inspect.isawaitable(v) for v in values):
        return values

    async def wait() -> list[Any]:
        return list(await asyncio.gather(*(v if inspect.isawaitable(v) else _done(v) for v in values)))

    return asyncio.run(wait())


async def _done(value: Any) -> Any:
    return value


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CallTimeout` in the block after ``seconds`` (main thread on Unix; elsewhere no limit)."""
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CallTimeout(f"ran past the {seconds:g} s timeout")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds or 0))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def prompt_text(prompt: Any) -> str:
    """A prompt as text: the string, or the messages' contents one per line."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list | tuple):
        return "\n".join(str(m.get("content") or "") for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


class Adapted:
    """A user's reward function in TRL's calling convention (see the module doc).

    ``reference``: the column holding each row's reference answer (passed as the framework's ``ground_truth`` /
    ``labels`` / ``answer``); ``timeout``: seconds per completion scored (a batch call gets ``timeout x n``).
    """

    def __init__(
        self, fn: Any, framework: str, *, reference: str | None, name: str, timeout: float | None = None
    ) -> None:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")
        self.fn = fn
        self.framework = framework
        self.reference = reference
        self.__name__ = name
        self.timeout = timeout
        self._params = _params(fn)
        self._var_kw = any(p.kind is p.VAR_KEYWORD for p in self._params.values())

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        n = len(completions)
        with deadline(None if self.timeout is None else self.timeout * max(n, 1)):
            return self._call(list(prompts), list(completions), completion_ids, columns, n)

    def _ref(self, columns: dict[str, Any], i: int) -> Any:
        if self.reference is None or self.reference not in columns:
            return None
        return columns[self.reference][i]

    def _call(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: Any,
        columns: dict[str, Any],
        n: int,
    ) -> list[float | None]:
        fw = self.framework
        columns = {k: v for k, v in columns.items() if k not in ("trainer_state", "log_extra", "log_metric")}
        if fw == "trl":
            kwargs = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **columns}
            if not self._var_kw:
                kwargs = {k: v for k, v in kwargs.items() if k in self._params}
            return score_list(_resolve(self.fn(**kwargs)), n, fw)
        texts = [completion_text(c) for c in completions]
        if fw == "openrlhf":
            prompt_strs = [prompt_text(p) for p in prompts]
            labels = [self._ref(columns, i) for i in range(n)]
            queries = [p + t for p, t in zip(prompt_strs, texts, strict=True)]
            return score_list(_resolve(self.fn(queries, prompt_strs, labels)), n, fw)
        if fw == "verl":
            calls: list[Callable[[], Any]] = []
            for i in range(n):
                extra = columns.get("extra_info", [None] * n)[i]
                source = columns.get("data_source", [""] * n)[i]
                kwargs = {
                    "data_source": source,
                    "solution_str": texts[i],
                    "ground_truth": self._ref(columns, i),
                    "extra_info": extra,
                }
                if not self._var_kw:
                    kwargs = {k: v for k, v in kwargs.items() if k in self._params}
                calls.append(lambda kwargs=kwargs: self.fn(**kwargs))
            return [score_value(v, fw) for v in _gather([c() for c in calls])]
        if fw == "verifiers" and "trace" in self._params:
            values = [self.fn(**self._v1_args(prompts[i], texts[i], {k: v[i] for k, v in columns.items()}))
                      for i in range(n)]
            return [score_value(v, fw) for v in _gather(values)]
        if fw == "verifiers":
            values = []
            for i in range(n):
                info = columns.get("info", [{}] * n)[i]
                kwargs = {
                    "completion": completions[i],
                    "answer": self._ref(columns, i),
                    "prompt": prompts[i],
                    "state": {},
                    "info": info if info is not None else {},
                    "task": columns.get("task", ["default"] * n)[i],
                    "parser": _LastMessageParser(),
                }
                if not self._var_kw:
                    kwargs = {k: v for k, v in kwargs.items() if k in self._params}
                values.append(self.fn(**kwargs))
            return [score_value(v, fw) for v in _gather(values)]
        # plain: fn(completion, answer)
        return [score_value(v, fw) for v in _gather([self.fn(texts[i], self._ref(columns, i)) for i in range(n)])]


    def _v1_args(self, prompt: Any, text: str, row: dict[str, Any]) -> dict[str, Any]:
        """``task`` and ``trace`` as ``verifiers.v1`` ``Task.score`` hands them to a ``@vf.reward``."""
        import verifiers.v1 as vf
        from pydantic import create_model
        from verifiers.v1.trace import Trace, TraceTask

        if getattr(self, "_data_cls", None) is None:
            reserved = set(vf.TaskData.model_fields)
            fields: Any = {k: (Any, None) for k in row if k not in reserved and k.isidentifier()}
            self._data_cls = create_model("AuditTaskData", __base__=vf.TaskData, **fields)
        data = self._data_cls(prompt=prompt_text(prompt), **{k: v for k, v in row.items()
                                                           if k in self._data_cls.model_fields and k != "prompt"})
        agent = vf.AgentInfo(config=vf.AgentConfig(), name="rl-guards audit", trainable=False)
        trace = Trace(task=TraceTask(type="AuditTask", data=data), agent=agent, root_reply=text)
        return {k: v for k, v in {"task": data, "trace": trace, "runtime": None}.items() if k in self._params}


class _LastMessageParser:
    """What a verifiers reward function asks of its ``parser`` when the audit has none: the answer text."""

    def parse_answer(self, completion: Any) -> str:
        return completion_text(completion[-1:] if isinstance(completion, list) else completion)

    def parse(self, text: str) -> str:
        return text


def is_number(value: float | None) -> bool:
    """Whether a score is a finite number."""
    return value is not None and not math.isnan(value)


__all__ = [
    "FRAMEWORKS",
    "Adapted",
    "CallTimeout",
    "RewardTypeError",
    "deadline",
    "detect_framework",
    "is_number",
    "prompt_text",
    "score_list",
    "score_value",
]
