"""The one :class:`~rl_guards.guards.base.RunContext` builder for a verl run (trainer process), and which guards run
on verl.

Everything comes from the verl config the trainer runs with: the tokenizer verl loads (``hf_tokenizer`` of
``actor_rollout_ref.model.tokenizer_path`` or ``.path``), the EOS ids generation stops at (the tokenizer's and the
model's ``generation_config.json``), the chat-template kwargs verl renders prompts with
(``data.apply_chat_template_kwargs``), the scorer as verl builds it (``reward.custom_reward_function``, else
``default_compute_score``), and the run's folder (``trainer.default_local_dir``).

The reward probes call that scorer in the trainer process (where the step hook runs: verl's replay buffer's
``sample`` on the V1 trainer, its agent loop manager's ``generate_sequences`` on the legacy one), through
``ctx.checked_calls``: :class:`~rl_guards.reward_calls.verl.VerlCaller` makes verl's reward-loop call, keyword for
keyword, each call bounded in time (:func:`rl_guards.reward_calls.base.bounded`: a stalled call is interrupted on the
main thread, where Ray runs a (non-async) actor's methods, and left behind on a worker thread elsewhere).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from rl_guards.guards.base import Guard, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.guards.probes import RewardProbeGuard
from rl_guards.guards.recorder import RolloutRecorder
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.guards.reward_errors import RewardErrorGuard
from rl_guards.guards.reward_sanity import RewardSanityGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.guards.unpaid_rewards import UnpaidRewardGuard
from rl_guards.reward_calls.verl import VerlCaller
from rl_guards.rewards.checked_calls import CheckedCalls
from rl_guards.verl.records import PENALTY_TERM
from rl_guards.verl.rows import MANAGER_COLUMN
from rl_guards.verl.settings import VerlSettings, plain, run_folder, select

logger = logging.getLogger("rl_guards")

# The guards that run on verl, in the registry's order (the recorder last, so its dump carries what the others saw).
VERL_GUARDS: list[type[Guard]] = [
    RewardSanityGuard,  # on the first step's compute_score calls (the hook reads no dataset rows at start)
    GRPOMaskGuard,
    RewardErrorGuard,
    TaskRewardMonitor,
    RoutingGuard,
    DeadGroupGuard,
    UnpaidRewardGuard,
    TruncationGuard,
    SlicingGuard,
    ThinkTagsGuard,
    RewardProbeGuard,
    RolloutRecorder,
]
# The others, and why: said once at start, listed in the run summary.
UNAVAILABLE: dict[str, str] = {
    "preflight": "reads TRL's GRPOConfig; verl checks its own config at start",
    "template": "renders prompts through TRL's trainer",
    "drift": "generates probe completions through TRL's trainer",
}
assert {g.name for g in BATCH_GUARDS} == {g.name for g in VERL_GUARDS} | set(UNAVAILABLE), "a guard is unaccounted"


def load_tokenizer(config: Any) -> Any:
    """The tokenizer verl's workers load (same path, same loader)."""
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    path = select(config, "actor_rollout_ref.model.tokenizer_path") or select(config, "actor_rollout_ref.model.path")
    trust = bool(select(config, "actor_rollout_ref.model.trust_remote_code", False))
    return hf_tokenizer(copy_to_local(str(path)), trust_remote_code=trust)


def eos_token_ids(config: Any, tokenizer: Any) -> list[int]:
    """The ids generation stops at: the tokenizer's EOS and the model's ``generation_config.json`` ones."""
    ids: list[int] = []
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(int(tokenizer.eos_token_id))
    path = select(config, "actor_rollout_ref.model.path")
    try:
        with open(os.path.join(str(path), "generation_config.json"), encoding="utf-8") as f:
            value = json.load(f).get("eos_token_id")
    except (OSError, ValueError, TypeError):
        value = None
    for e in value if isinstance(value, list) else [value]:
        if isinstance(e, int) and e not in ids:
            ids.append(e)
    return ids


def verl_scorer(config: Any) -> Any:
    """The ``compute_score`` verl's reward manager is given: the user's function (with ``reward_kwargs``) or
    ``default_compute_score``, built by verl's own code."""
    try:
        from verl.trainer.ppo.reward import get_custom_reward_fn
        from verl.utils.reward_score import default_compute_score

        return get_custom_reward_fn(config) or default_compute_score
    except Exception as exc:  # the scorer is the workers' business; the context only names it
        logger.warning("rl_guards: could not load verl's compute_score in the trainer process: %s", exc)
        return None


class ScoreTerm:
    """A column of a verl step's reward beside the scorer's, which the trainer process does not call: the stray-think
    penalty rl_guards adds (``score_terms``), the inner manager's own terms (dapo's overlong penalty). Listed with the
    run's reward functions, so that the guards know from the start every column a step can hold (a step holds a
    column only when some row has it: :func:`rl_guards.verl.rows.step_rows`); the probes count it in the run's
    total as the step paid it."""

    def __init__(self, name: str, **attributes: Any) -> None:
        self.__name__ = name
        self.__dict__.update(attributes)

    def __repr__(self) -> str:
        return f"ScoreTerm({self.__name__!r})"


def reward_terms(settings: VerlSettings, scorer: Any) -> list[Any]:
    """The run's reward columns, in the order a step holds them: the scorer, the stray-think penalty when
    ``score_terms`` adds it, the inner manager's own terms (none without a scorer)."""
    if scorer is None:
        return []
    penalty = settings.guards.stray_think_penalty
    terms: list[Any] = [scorer]
    if PENALTY_TERM in settings.score_terms and penalty.enabled:
        terms.append(ScoreTerm(PENALTY_TERM, weight=penalty.weight))
    return [*terms, ScoreTerm(MANAGER_COLUMN)]


# verl 0.9's reward-loop managers (naive, dapo, gdpo, rate_limited) pass the row's ``data_source`` column as
# ``data_source``, whatever ``data.reward_fn_key`` says (only the pre-0.9 managers of verl.workers read that key).
SOURCE_COLUMN = "data_source"


def probe_calls(config: Any, terms: list[Any], cap: float) -> CheckedCalls:
    """The run's reward columns (:func:`reward_terms`) as the reward probes call them: the scorer through verl's call,
    bounded in time (``cap``: ``probes.call_timeout``), the other terms not at all. The scorer is not callable either
    with a reward model on (``reward.reward_model.enable``): verl then hands it a reward router's address that only
    its reward workers hold, or scores with a discriminative model and no compute_score at all."""
    callers: list[Any] = [None] * len(terms)
    if terms and bool(select(config, "reward.reward_model.enable", False)):
        logger.info("rl_guards on verl: the reward probes leave the scorer out (reward.reward_model.enable: true)")
    elif terms:
        callers[0] = VerlCaller(terms[0], reward_fn_key=SOURCE_COLUMN)
    return CheckedCalls(callers, cap=cap)


def text_decoder(tokenizer: Any) -> Any:
    """``rows -> texts`` as verl's managers decode a response (``tokenizer.decode(ids, skip_special_tokens=True)``),
    for a whole step in one call: the fast tokenizer's own batch decode when the Python layer would add nothing
    (no clean-up of spaces), which skips transformers' per-id type checks (5x faster on 256 x 512 tokens);
    ``batch_decode`` otherwise. The reward manager's record tells whether the text equals what the scorer got."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "decode_batch") and not getattr(
        tokenizer, "clean_up_tokenization_spaces", False
    ):
        return lambda rows: list(backend.decode_batch(rows, skip_special_tokens=True))  # lists of ints (tolist())
    return lambda rows: list(tokenizer.batch_decode(rows, skip_special_tokens=True))


def build_context(config: Any, settings: VerlSettings, tokenizer: Any = None) -> RunContext:
    """Everything a guard may know about a verl run, from its config."""
    from rl_guards.verl.manager import scorer_name

    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config)
    kwargs = plain(select(config, "data.apply_chat_template_kwargs", {})) or {}
    scorer = verl_scorer(config)
    terms = reward_terms(settings, scorer)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    def decode_text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    return RunContext(
        output_dir=run_folder(config, settings),
        tokenizer=tokenizer,
        args=None,
        chat_template=None,
        chat_template_kwargs=dict(kwargs),
        eos_token_ids=eos_token_ids(config, tokenizer),
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
        reward_func_names=[scorer_name(t) for t in terms],
        reward_funcs=terms,
        decode=decode,
        decode_text=decode_text,
        checked_calls=probe_calls(config, terms, settings.guards.probes.call_timeout),
    )


__all__ = [
    "UNAVAILABLE",
    "VERL_GUARDS",
    "ScoreTerm",
    "build_context",
    "eos_token_ids",
    "load_tokenizer",
    "probe_calls",
    "reward_terms",
    "text_decoder",
    "verl_scorer",
]
