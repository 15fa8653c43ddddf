"""TRL's call of a reward function, argument for argument (``GRPOTrainer._calculate_rewards``, TRL 1.13-1.16).

TRL calls every reward function with the same keywords, whatever its signature::

    fn(prompts=[...], completions=[...], completion_ids=[...], **{column: [...] for every dataset column but
       "prompt", "completion", "completion_ids"}, trainer_state=..., log_extra=..., log_metric=...)

and reads back one float or None per completion (async functions are awaited). A function that does not take
``**kwargs`` and misses one of those keywords raises in TRL: it raises here too. Completions are shaped as TRL shapes
them: with a tokenizer, the text is tokenized (EOS appended, as TRL's rows end) and turned back into TRL's completion
by TRL's own path (``parse_response`` when the tokenizer has a response template, else a decode skipping special
tokens, as chat messages for conversational prompts); without one, a string or a one-message list. ``log_extra`` and
``log_metric`` are no-ops: a check of a function never shows in the run's metrics or completions table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, RewardTypeError, Tracked, resolve

SKIPPED_COLUMNS = ("prompt", "completion", "completion_ids")


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def approx_ids(text: str) -> list[int]:
    """Stand-in token ids (one per 4 characters, an English tokenizer's rate) when there is no tokenizer: functions
    that count tokens get a length in the right range."""
    return list(range((len(text) + 3) // 4))


class TrlCaller:
    """One reward function, called as ``GRPOTrainer`` calls it (see the module doc).

    ``tokenizer``/``eos_ids``: the run's tokenizer (completions and ids as TRL makes them); ``trainer_state``: what
    TRL passes as ``trainer_state``; ``tools``: the trainer's tools (the response parser types tool-call arguments
    with them).
    """

    framework = "trl"

    def __init__(
        self,
        fn: Any,
        *,
        tokenizer: Any = None,
        eos_ids: Sequence[int] = (),
        trainer_state: Any = None,
        tools: Any = None,
    ) -> None:
        self.fn = fn
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)[:1]
        self.trainer_state = trainer_state
        self.tools = tools
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's completion ids: tokenized (one batch encode, else text by text), EOS appended."""
        if self.tokenizer is None:
            return [approx_ids(t) for t in texts]
        try:
            encoded = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
            return [list(ids) + self.eos_ids for ids in encoded]
        except Exception:
            out = []
            for text in texts:
                try:
                    out.append(list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + self.eos_ids)
                except Exception:
                    out.append([])
            return out

    def completion(self, row: CallRow, text: str, ids: Sequence[int]) -> Any:
        """The completion TRL would hand the function for this text (see the module doc)."""
        conversational = isinstance(row.prompt, list)
        tokenizer = self.tokenizer
        if tokenizer is not None and ids:
            if conversational and (
                getattr(tokenizer, "response_template", None) is not None
                or getattr(tokenizer, "response_schema", None) is not None
            ):
                from trl.chat_template_utils import parse_response

                prefix = list(row.prompt_ids) if row.prompt_ids is not None else None
                return [parse_response(tokenizer, list(ids), prefix=prefix, tools=self.tools)]
            text = tokenizer.decode(list(ids), skip_special_tokens=True)
        if conversational:
            return [{"role": "assistant", "content": text}]
        return text

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        """The function's scores of ``texts`` (``rows[i]`` holds text ``i``'s row), as TRL reads them (None: "not my
        row", NaN kept). ValueError when it returns the wrong count, as TRL raises."""
        ids = self.ids(texts)
        completions = tracked if tracked is not None else Tracked()
        completions.extend(self.completion(row, text, i) for row, text, i in zip(rows, texts, ids, strict=True))
        keys = [k for k in (rows[0].columns if rows else {}) if k not in SKIPPED_COLUMNS]
        kwargs = {key: [row.columns.get(key) for row in rows] for key in keys}
        kwargs.update(trainer_state=self.trainer_state, log_extra=_noop, log_metric=_noop)
        result = resolve(
            self.fn(prompts=[row.prompt for row in rows], completions=completions, completion_ids=ids, **kwargs)
        )
        if not isinstance(result, list | tuple) and not hasattr(result, "tolist"):
            raise RewardTypeError(f"returned {type(result).__name__}, not a list with one reward per completion")
        values = [None if v is None else float(v) for v in (result.tolist() if hasattr(result, "tolist") else result)]
        if len(values) != len(texts):  # TRL raises a ValueError here
            raise RewardTypeError(f"returned {len(values)} rewards for {len(texts)} completions")
        return values


def trl_callers(
    funcs: Sequence[Any],
    *,
    tokenizer: Any = None,
    eos_ids: Sequence[int] = (),
    trainer_state: Any = None,
    tools: Any = None,
) -> list[TrlCaller | None]:
    """Each reward function called as ``GRPOTrainer`` calls it; None for a reward model (checks never call one)."""
    return [
        None
        if hasattr(fn, "forward") or not callable(fn)
        else TrlCaller(fn, tokenizer=tokenizer, eos_ids=eos_ids, trainer_state=trainer_state, tools=tools)
        for fn in funcs
    ]


__all__ = ["SKIPPED_COLUMNS", "TrlCaller", "approx_ids", "trl_callers"]
