"""OpenRLHF's call of a custom ``reward_func`` (``--remote_rm_url path.py``), argument for argument (OpenRLHF 0.11:
``SingleTurnAgentExecutor``).

Per sample, in a thread (``asyncio.to_thread``, batches of one)::

    query = tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)   # the rendered prompt + response
    info = reward_func([query], [prompt], [label])
    reward = info.get("rewards")   # what trains; info.get("scores", reward) feeds logs and dynamic filtering

The return must be a dict: OpenRLHF reads it with ``.get``, and any exception there (a tensor or a list returned)
is logged at info level and the sample trains with reward None. That is reported here as a wrong return type.
``query`` is the prompt as the model saw it (``rendered_prompt``; the dataset's prompt when there is none) followed
by the response with its special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, RewardTypeError, Tracked, resolve, score_value


def prompt_text(prompt: Any) -> str:
    """A prompt as text: the string, or the messages' contents one per line."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list | tuple):
        return "\n".join(str(m.get("content") or "") for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def reward_of(info: Any) -> float | None:
    """What OpenRLHF trains on from one ``reward_func`` return value (RewardTypeError where it would get None)."""
    if not isinstance(info, dict):
        raise RewardTypeError(
            f"returned {type(info).__name__}, not a dict: OpenRLHF reads the result with .get('rewards'), logs the "
            "AttributeError at info level and trains the sample with reward None"
        )
    value = info.get("rewards")  # what trains ("scores" only feeds logging and dynamic filtering)
    if value is None:
        raise RewardTypeError(f"returned a dict without 'rewards' (what OpenRLHF trains on): keys {sorted(info)}")
    if hasattr(value, "tolist") and not isinstance(value, int | float):
        value = value.tolist()
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise RewardTypeError(f"returned {len(value)} rewards for one query")
        value = value[0]
    return score_value(value)


class OpenRLHFCaller:
    """One ``reward_func(queries, prompts, labels)``, called as OpenRLHF calls it (see the module doc).
    ``eos_text``: the end-of-turn token's text, which OpenRLHF's decode keeps at the end of each query (without a
    tokenizer the audit does not know it, and leaves it out)."""

    framework = "openrlhf"

    def __init__(self, fn: Any, *, eos_text: str = "") -> None:
        self.fn = fn
        self.eos_text = eos_text
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        queries = tracked if tracked is not None else Tracked()
        for row, text in zip(rows, texts, strict=True):
            rendered = row.rendered_prompt if row.rendered_prompt is not None else prompt_text(row.prompt)
            queries.append(rendered + text + self.eos_text)
        out = []
        for i, row in enumerate(rows):
            prompt = row.rendered_prompt if row.rendered_prompt is not None else prompt_text(row.prompt)
            out.append(reward_of(resolve(self.fn([queries[i]], [prompt], [row.reference]))))
        return out


__all__ = ["OpenRLHFCaller", "prompt_text", "reward_of"]
