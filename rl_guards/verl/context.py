"""The one :class:`~rl_guards.guards.base.RunContext` builder for a verl run (trainer process), and which guards run
on verl.

Everything comes from the verl config the trainer runs with: the tokenizer verl loads (``hf_tokenizer`` of
``actor_rollout_ref.model.tokenizer_path`` or ``.path``), the EOS ids generation stops at (the tokenizer's and the
model's ``generation_config.json``), the chat-template kwargs verl renders prompts with
(``data.apply_chat_template_kwargs``), the scorer as verl builds it (``reward.custom_reward_function``, else
``default_compute_score``), and the run's folder (``trainer.default_local_dir``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from rl_guards.guards.base import Guard, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.masks import GRPOMaskGuard
from rl_guards.guards.recorder import RolloutRecorder
from rl_guards.guards.registry import BATCH_GUARDS
from rl_guards.guards.reward_errors import RewardErrorGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.verl.settings import VerlSettings, plain, run_folder, select

logger = logging.getLogger("rl_guards")

# The guards that run on verl, in the registry's order (the recorder last, so its dump carries what the others saw).
VERL_GUARDS: list[type[Guard]] = [
    GRPOMaskGuard,
    RewardErrorGuard,
    TaskRewardMonitor,
    RoutingGuard,
    DeadGroupGuard,
    TruncationGuard,
    SlicingGuard,
    ThinkTagsGuard,
    RolloutRecorder,
]
# The others, and why: said once at start, listed in the run summary.
UNAVAILABLE: dict[str, str] = {
    "preflight": "reads TRL's GRPOConfig; verl checks its own config at start",
    "template": "renders prompts through TRL's trainer",
    "reward_sanity": "calls reward functions with TRL's signature (verl's compute_score call: pending)",
    "probes": "calls reward functions with TRL's signature (verl's compute_score call: pending)",
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
        reward_func_names=[scorer_name(scorer)] if scorer is not None else [],
        reward_funcs=[scorer] if scorer is not None else [],
        decode=decode,
        decode_text=decode_text,
    )


__all__ = [
    "UNAVAILABLE",
    "VERL_GUARDS",
    "build_context",
    "eos_token_ids",
    "load_tokenizer",
    "text_decoder",
    "verl_scorer",
]
