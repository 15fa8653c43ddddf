"""verifiers' call of a reward function, through verifiers' own code.

- **Classic rubrics** (``vf.Rubric``, ``vf.MathRubric``, ...; ``verifiers.legacy`` from 0.3): the rubric scores a
  rollout state with its own ``score_rollout`` (each function gets the arguments it names among ``prompt``,
  ``completion``, ``answer``, ``state``, ``info``, ``task``, the rubric's ``parser`` and class objects; an exception
  is logged and scored 0.0, as verifiers does). A bare function is scored by ``vf.Rubric(funcs=[fn])``, the default
  parser, as verifiers scores it when a user builds that rubric; pass the rubric itself to use its parser.
  Prompts are chat messages (a dataset's ``question`` column becomes ``[{"role": "user", "content": question}]``, as
  verifiers' environments format it), completions one assistant message.
- **v1** (``@vf.reward`` functions of ``(task, trace)``, verifiers >= 0.3): called with the row's ``TaskData`` (every
  column) and a ``Trace`` whose last reply is the completion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, RewardTypeError, Tracked, gather, params, score_value

CLASSIC_ARGS = ("parser", "state", "info", "task", "prompt", "completion", "answer")


def _legacy() -> Any:
    """The classic verifiers namespace (``verifiers.legacy`` from 0.3, the package itself before)."""
    try:
        import verifiers.legacy as vf

        return vf
    except ImportError:
        import verifiers as vf

        return vf


def is_v1(fn: Any) -> bool:
    """A ``@vf.reward`` of ``(task, trace)``."""
    names = set(params(fn))
    return "trace" in names and names <= {"self", "task", "trace", "runtime"}


def is_rubric(obj: Any) -> bool:
    """A classic verifiers rubric (has reward functions, weights and a ``score_rollout``)."""
    return hasattr(obj, "funcs") and hasattr(obj, "weights") and hasattr(obj, "score_rollout")


def chat_prompt(row: CallRow) -> Any:
    """The row's prompt as verifiers' environments make it: the dataset's ``prompt``, else its question as one
    user message."""
    if isinstance(row.prompt, list) or (row.prompt and "question" not in row.columns):
        return row.prompt
    question = row.columns.get("question", row.prompt)
    return [{"role": "user", "content": str(question)}]


class VerifiersCaller:
    """One reward function scored through verifiers (see the module doc). ``rubric``: the classic rubric that holds
    ``fn`` (its parser and class objects are used); None: ``Rubric(funcs=[fn])``."""

    framework = "verifiers"

    def __init__(self, fn: Any, *, rubric: Any = None) -> None:
        self.fn = fn
        self.v1 = is_v1(fn)
        self.rubric = rubric
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self._data_cls: Any = None

    def _scoring_rubric(self) -> Any:
        vf = _legacy()
        parser = getattr(self.rubric, "parser", None) if self.rubric is not None else None
        scoring = vf.Rubric(funcs=[self.fn], weights=[1.0], parser=parser)
        if self.rubric is not None:
            scoring.class_objects.update(getattr(self.rubric, "class_objects", {}))
        return scoring

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        items = tracked if tracked is not None else Tracked()
        items.extend(texts)
        if self.v1:
            values = [self.fn(**self._v1_args(row, items[i])) for i, row in enumerate(rows)]
            return [_v1_score(v) for v in gather(values)]
        vf = _legacy()
        rubric = self._scoring_rubric()
        errors = _Errors()
        rubric.logger.addHandler(errors)
        rubric.logger.propagate = False  # verifiers logs the exception and scores 0.0: read back below instead
        out = []
        for i, row in enumerate(rows):
            info = row.columns.get("info") or {}
            task_fields = {k: v for k, v in row.columns.items() if k not in ("prompt", "answer", "info", "question")}
            state = vf.State(
                input={
                    "prompt": chat_prompt(row),
                    "answer": row.reference,
                    "info": info,
                    "example_id": i,
                    **task_fields,
                }
            )
            state["completion"] = [{"role": "assistant", "content": items[i]}]
            errors.records.clear()
            asyncio.run(rubric.score_rollout(state))
            if errors.records:
                message = f"{errors.records[-1]} (verifiers logs it and scores the rollout 0.0)"
                if "float() argument" in message or "could not convert" in message:
                    raise RewardTypeError(message)  # verifiers' float() of what the function returned
                raise ScoredZero(message)
            out.append(score_value(state["metrics"][rubric.funcs[0].__name__]))
        return out

    def _v1_args(self, row: CallRow, text: str) -> dict[str, Any]:
        """``task`` and ``trace`` as ``verifiers.v1`` hands them to a ``@vf.reward``."""
        import verifiers.v1 as vf
        from pydantic import create_model
        from verifiers.v1.trace import Trace, TraceTask

        columns = dict(row.columns)
        if self._data_cls is None:
            reserved = set(vf.TaskData.model_fields)
            fields: Any = {k: (Any, None) for k in columns if k not in reserved and k.isidentifier()}
            self._data_cls = create_model("ProbeTaskData", __base__=vf.TaskData, **fields)
        from rl_guards.reward_calls.openrlhf import prompt_text

        data = self._data_cls(
            prompt=prompt_text(row.prompt),
            **{k: v for k, v in columns.items() if k in self._data_cls.model_fields and k != "prompt"},
        )
        agent = vf.AgentInfo(config=vf.AgentConfig(), name="rl-guards", trainable=False)
        task = TraceTask(type="ProbeTask", data=data)
        if "root_reply" in Trace.model_fields:  # verifiers 0.4
            trace = Trace(task=task, agent=agent, root_reply=text)
        else:  # 0.3: the reply is the graph's sampled assistant node after the prompt
            from verifiers.v1.graph import MessageNode
            from verifiers.v1.types import AssistantMessage, UserMessage

            nodes = [
                MessageNode(message=UserMessage(content=prompt_text(row.prompt))),
                MessageNode(parent=0, message=AssistantMessage(content=text), sampled=True),
            ]
            trace = Trace(task=task, agent=agent, nodes=nodes)
        return {k: v for k, v in {"task": data, "trace": trace, "runtime": None}.items() if k in params(self.fn)}


class ScoredZero(Exception):
    """The function raised inside verifiers' rubric, which logged it and scored the rollout 0.0."""


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def _v1_score(value: Any) -> float | None:
    """A v1 reward's value: a number, or a mapping of keyed scores (summed)."""
    if isinstance(value, dict):
        return sum(score_value(v) or 0.0 for v in value.values())
    return score_value(value)


__all__ = ["CLASSIC_ARGS", "ScoredZero", "VerifiersCaller", "chat_prompt", "is_rubric", "is_v1"]
