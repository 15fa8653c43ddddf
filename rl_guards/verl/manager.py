"""``GuardedRewardManager``: verl's own reward-loop manager (naive, dapo, ...) with the user's ``compute_score``,
observed row by row in the reward workers.

verl 0.9 scores every training row through a reward-loop manager's ``run_single`` (one row, in a
``RewardLoopWorker`` Ray actor). Selected in the verl config::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=GuardedRewardManager
    reward.reward_manager.module.path=pkg://rl_guards.verl
    +reward.rl_guards.inner=naive          # the manager that scores (any name of verl's reward-loop registry)

Per row (``run_single``)::

    ids = the response's ids before decoding      # valid length from the attention mask, as verl's managers read it
    out = await inner.run_single(data)            # verl's manager decodes and calls compute_score, through a wrapper
                                                  # that sees the exact call (string, ground truth, extra_info), the
                                                  # score, the time and the exception
    out.reward_extra_info["rl_guards"] = record   # a small JSON string (rl_guards.verl.records.ScoreRecord)

The manager never raises for a guard: the decisions (routing, reward errors, masks, truncation, think markup, dead
groups, per-task curves) are taken over the whole batch in the trainer process by the step hook
(:mod:`rl_guards.verl.replay` on verl's default trainer, :mod:`rl_guards.verl.agent_loop` on the legacy one), which
stops the run there in raise mode. What changes verl's behaviour, and only as configured:

- ``reward_errors.enabled`` (default on): a scorer (or the inner manager) that raises on a row no longer crashes
  the step (legacy trainer) or silently drops the row's group (default trainer): the row gets a substitute score of
  0 with the same extra keys as the last scored row, the error goes in its record, and the hook reports it
  (``reward_errors.mode: raise`` stops the run with the rows shown). A scorer that returns None, or verl's
  ``default_compute_score`` raising ``NotImplementedError`` for a data_source it has no scorer for, gets the same
  substitute and is reported by the routing guard as an unscored row (``routing.mode: raise`` by default).
  ``reward_errors.enabled: false`` keeps verl's behaviour (the exception propagates).
- ``score_terms: [stray_think_penalty]``: the stray-think penalty (``stray_think_penalty`` section) is added to the
  row's reward, counted on the response ids before decoding can hide a tag. Off unless listed.
"""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from functools import partial
from typing import Any

from rl_guards.rewards.row_errors import describe_error
from rl_guards.verl.records import PENALTY_TERM, RECORD_KEY, ScoreRecord, text_digest
from rl_guards.verl.settings import VerlSettings, plain, select

logger = logging.getLogger("rl_guards")

SUBSTITUTE_SCORE = 0.0  # what verl's manager gets for a row whose scorer raised, returned None or had no route
_DEFAULT_SCORER_FILE = "utils/reward_score/__init__.py"  # verl's default_compute_score, which routes by data_source


def scorer_name(fn: Any) -> str:
    """The user's function behind verl's wrappers (``functools.partial(_call_with_kwargs, fn, reward_kwargs)``)."""
    while isinstance(fn, partial):
        inner = fn.func
        if getattr(inner, "__name__", "").startswith("_call_with_kwargs") and fn.args:
            fn = fn.args[0]
        else:
            fn = inner
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _score_of(result: Any) -> float | None:
    """The number a scorer's result stands for, as verl's managers read it (a dict's ``score``)."""
    value = result.get("score") if isinstance(result, dict) else result
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _default_like(value: Any) -> Any:
    """A neutral value of the same kind (the substitute's extra keys keep their types across rows)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return 0.0
    if isinstance(value, str):
        return ""
    return None


def _unrouted(exc: BaseException) -> bool:
    """verl's ``default_compute_score`` has no scorer for the row's data_source (its NotImplementedError)."""
    if not isinstance(exc, NotImplementedError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.replace("\\", "/").endswith(_DEFAULT_SCORER_FILE)


class _Slot:
    """What the scorer wrapper saw for one row (filled on a worker thread for a sync scorer)."""

    def __init__(self) -> None:
        self.observed = False
        self.chars = -1
        self.digest = ""
        self.score: float | None = None
        self.given: float | None = None
        self.error = ""
        self.unrouted = False
        self.returned_none = False
        self.seconds = 0.0
        self.extra_info: Any = None


class _Observer:
    """Holds the user's scorer and the rows being scored: the wrapper finds a row's slot by its ``extra_info``
    object, which verl's managers hand to the scorer as they found it on the row (no copy)."""

    def __init__(self, scorer: Any, catch: bool) -> None:
        self.scorer = scorer
        self.catch = catch
        self.name = scorer_name(scorer)
        self.slots: dict[int, _Slot] = {}
        self.layout: dict[str, Any] | None = None  # the last dict result's keys with neutral values

    def slot(self, extra_info: Any) -> _Slot | None:
        return self.slots.get(id(extra_info))

    def before(self, kwargs: dict[str, Any]) -> tuple[_Slot | None, float]:
        slot = self.slot(kwargs.get("extra_info"))
        if slot is not None:
            text = kwargs.get("solution_str")
            if isinstance(text, str):
                slot.observed, slot.chars, slot.digest = True, len(text), text_digest(text)
            slot.extra_info = kwargs.get("extra_info")  # serialised (and size-checked) with the record
        return slot, time.perf_counter()

    def after(self, slot: _Slot | None, started: float, result: Any) -> Any:
        score = _score_of(result)
        if slot is not None:
            slot.seconds = time.perf_counter() - started
            slot.score = score
        if score is None:  # verl would carry a None reward on: a substitute keeps the step alive, the record says
            if slot is not None:
                slot.returned_none = True
            if self.catch:
                return self._substitute(slot)
            return result
        if isinstance(result, dict):
            self.layout = {k: _default_like(v) for k, v in result.items()}
        if slot is not None:
            slot.given = score
        return result

    def failed(self, slot: _Slot | None, started: float, exc: Exception) -> Any:
        if slot is not None:
            slot.seconds = time.perf_counter() - started
            slot.error = describe_error(exc)
            slot.unrouted = _unrouted(exc)
        if not self.catch:
            raise exc
        return self._substitute(slot)

    def _substitute(self, slot: _Slot | None) -> Any:
        if slot is not None:
            slot.given = SUBSTITUTE_SCORE
        if self.layout is None:
            return SUBSTITUTE_SCORE
        return {**self.layout, "score": SUBSTITUTE_SCORE}


def _observe(observer: _Observer, *args: Any, **kwargs: Any) -> Any:
    slot, started = observer.before(kwargs)
    try:
        result = observer.scorer(*args, **kwargs)
    except Exception as exc:
        return observer.failed(slot, started, exc)
    return observer.after(slot, started, result)


async def _observe_async(observer: _Observer, *args: Any, **kwargs: Any) -> Any:
    slot, started = observer.before(kwargs)
    try:
        result = await observer.scorer(*args, **kwargs)
    except Exception as exc:
        return observer.failed(slot, started, exc)
    return observer.after(slot, started, result)


def observed_scorer(observer: _Observer) -> Any:
    """The wrapper verl's manager calls: a coroutine function exactly when the user's scorer is one (verl's managers
    check ``inspect.iscoroutinefunction`` to await it or run it in a thread); a partial, so it pickles (the
    ``remote`` manager ships it to another actor)."""
    if inspect.iscoroutinefunction(observer.scorer):
        return partial(_observe_async, observer)
    return partial(_observe, observer)


def _inner_class(settings: VerlSettings) -> type:
    """verl's reward-loop manager named by ``inner`` (its registry), or the user's own (``inner_module``)."""
    if settings.inner_module:
        from verl.utils.import_utils import load_extern_object

        return load_extern_object(module_path=settings.inner_module, object_name=settings.inner_name or settings.inner)
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    return get_reward_manager_cls(settings.inner)


def _manager_base() -> type:
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    return RewardManagerBase


class GuardedRewardManager(_manager_base()):  # type: ignore[misc]
    """verl's reward-loop manager ``reward.rl_guards.inner`` (default ``naive``), observed row by row.

    Takes the arguments verl's ``load_reward_manager`` passes every reward-loop manager and builds the inner one with
    the same ones (``compute_score`` wrapped). ``run_single`` returns the inner manager's result with one more
    ``reward_extra_info`` key, ``"rl_guards"`` (see :mod:`rl_guards.verl.records`).
    """

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        self.settings = VerlSettings.from_config(config)
        guards = self.settings.guards
        if compute_score is None:
            from verl.utils.reward_score import default_compute_score

            compute_score = default_compute_score
        self.catch = bool(guards.reward_errors.enabled)
        self.observer = _Observer(compute_score, self.catch)
        inner_cls = _inner_class(self.settings)
        if inner_cls is type(self):
            raise ValueError("reward.rl_guards.inner names GuardedRewardManager itself; name verl's manager (naive)")
        self.inner = inner_cls(config, tokenizer, observed_scorer(self.observer), **kwargs)
        self.reward_layout: dict[str, Any] | None = None  # the last row's extra keys (a failed row gets the same)
        self.penalty = self._penalty(config, tokenizer)

    def _penalty(self, config: Any, tokenizer: Any) -> Any:
        terms = self.settings.score_terms
        unknown = sorted(set(terms) - {PENALTY_TERM})
        if unknown:
            raise ValueError(f"reward.rl_guards.score_terms: unknown term(s) {unknown}; available: [{PENALTY_TERM}]")
        guards = self.settings.guards
        if PENALTY_TERM not in terms or not guards.stray_think_penalty.enabled:
            return None
        from rl_guards.rewards.stray_think import StrayThinkPenalty

        kwargs = plain(select(config, "data.apply_chat_template_kwargs", {})) or {}
        return StrayThinkPenalty.from_guards_config(guards, tokenizer=tokenizer, chat_template_kwargs=dict(kwargs))

    async def run_single(self, data: Any) -> dict[str, Any]:
        item = data[-1]  # as verl's managers: the last sequence of a multi-output trajectory is scored
        response_ids = item.batch["responses"]
        valid = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        extra_info = self._extra_info(data)
        slot = _Slot()
        key = id(extra_info)
        shared = key in self.observer.slots  # two rows in flight with one extra_info object: left unobserved
        if not shared:
            self.observer.slots[key] = slot
        try:
            out = await self.inner.run_single(data)
        except Exception as exc:  # the inner manager itself failed on this row (the scorer's own errors are caught)
            if not self.catch:
                raise
            if not slot.error:
                slot.error = f"{describe_error(exc)} (in the {self.settings.inner} reward manager)"
            out = self._failed_row(slot)
        finally:
            if not shared:
                self.observer.slots.pop(key, None)
        out = dict(out)
        extra = dict(out.get("reward_extra_info") or {})
        total = out.get("reward_score")
        penalty = None
        if self.penalty is not None:
            penalty = self._penalty_of(item, valid)
            total = (total or 0.0) + penalty
            extra[PENALTY_TERM] = penalty
        extra.pop(RECORD_KEY, None)
        self.reward_layout = {k: _default_like(v) for k, v in extra.items()}
        record = ScoreRecord(
            scorer=self.observer.name,
            valid_len=valid,
            chars=slot.chars,
            digest=slot.digest,
            score=slot.score,
            given=slot.given,
            error=slot.error,
            unrouted=slot.unrouted,
            returned_none=slot.returned_none,
            penalty=penalty,
            total=None if total is None else float(total),
            seconds=slot.seconds,
            extra_info=slot.extra_info,
        )
        extra[RECORD_KEY] = record.to_json()
        out["reward_score"] = total
        out["reward_extra_info"] = extra
        return out

    @staticmethod
    def _extra_info(data: Any) -> Any:
        """The row's ``extra_info`` object as the inner manager will find it; an absent column is given one (verl's
        managers then use ``{}`` anyway), so that the call can be matched to the row."""
        import numpy as np

        column = data.non_tensor_batch.get("extra_info")
        if column is None:
            column = np.empty(len(data), dtype=object)
            column[:] = [{} for _ in range(len(data))]
            data.non_tensor_batch["extra_info"] = column
        return column[-1]

    def _failed_row(self, slot: _Slot) -> dict[str, Any]:
        slot.given = SUBSTITUTE_SCORE
        extra = dict(self.reward_layout or {"acc": SUBSTITUTE_SCORE})
        extra.pop(PENALTY_TERM, None)
        if "score" in extra:
            extra["score"] = SUBSTITUTE_SCORE
        return {"reward_score": SUBSTITUTE_SCORE, "reward_extra_info": extra}

    def _penalty_of(self, item: Any, valid: int) -> float:
        """The stray-think penalty of the row, on its ids (tags counted before decoding hides special ones)."""
        from rl_guards.core.think_markup import prompts_open_block

        ids = item.batch["responses"][:valid].tolist()
        prompt = item.batch["prompts"]
        width = prompt.shape[-1]
        attention = item.batch["attention_mask"][:width]
        prompt_ids = prompt[attention.bool()].tolist()
        decode = partial(self.tokenizer.decode, skip_special_tokens=False)
        opened = prompts_open_block([prompt_ids], decode, self.penalty.markup)[0]
        self.penalty.set_prompt_opened(opened, opened)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        thinking = item.non_tensor_batch.get(self.settings.guards.think_tags.thinking_column)
        return float(self.penalty([text], completion_ids=[ids], enable_thinking=[thinking])[0])


__all__ = ["SUBSTITUTE_SCORE", "GuardedRewardManager", "observed_scorer", "scorer_name"]
