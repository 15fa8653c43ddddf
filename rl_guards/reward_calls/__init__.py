"""Calling a user's reward function exactly as its framework calls it (one module per framework).

==========  ===============================================================  ==========================================
framework   the user's function, as the framework calls it                   returns
==========  ===============================================================  ==========================================
trl         ``f(prompts, completions, completion_ids, **columns,             a list of float / None
            trainer_state, log_extra, log_metric)`` (a batch)
verl        ``compute_score(data_source, solution_str, ground_truth,         a float, or a dict with ``score``
            extra_info)`` per sample; batched: ``compute_score(
            data_sources, solution_strs, ground_truths, extra_infos)``
openrlhf    ``reward_func(queries, prompts, labels)``, one query a call      a dict with ``rewards`` (``scores``)
verifiers   a classic rubric's ``score_rollout`` (the function gets the      a float (v1: or keyed scores, summed)
            arguments it names); v1: ``f(task, trace)``
plain       ``f(completion, answer)`` per sample                             a float
==========  ===============================================================  ==========================================

:func:`detect` tells the framework from a function's signature; :func:`caller` builds its caller. Every caller takes
``(rows: [CallRow], texts: [str])`` and returns one score per text (None, NaN and the framework's own failures kept).
"""

from __future__ import annotations

from typing import Any

from rl_guards.errors import ConfigError
from rl_guards.reward_calls.base import CallRow, CallStalled, RewardTypeError, Timer, Tracked, bounded, params

FRAMEWORKS: tuple[str, ...] = ("trl", "verl", "openrlhf", "verifiers", "plain")


def detect(fn: Any) -> str:
    """The framework whose calling convention ``fn``'s signature fits (ConfigError when none does)."""
    from rl_guards.reward_calls.verifiers import CLASSIC_ARGS, is_rubric, is_v1

    if is_rubric(fn):
        return "verifiers"
    found = params(fn)
    names = set(found)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in found.values())
    if "queries" in names:
        return "openrlhf"
    if "solution_str" in names or "solution_strs" in names or {"data_source", "ground_truth"} <= names:
        return "verl"
    if names & {"completions", "prompts", "completion_ids"} or (var_kw and len(found) == 1):
        return "trl"
    if "completion" in names and (names & set(CLASSIC_ARGS) - {"completion", "answer"} or var_kw):
        return "verifiers"
    if is_v1(fn):
        return "verifiers"
    positional = [p for p in found.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return "plain"
    shown = f"({', '.join(found)})" if found else "(no readable signature)"
    raise ConfigError(
        f"cannot tell which framework's reward signature {getattr(fn, '__name__', fn)}{shown} is; pass --framework "
        f"(one of {', '.join(FRAMEWORKS)})"
    )


def caller(fn: Any, framework: str, **options: Any) -> Any:
    """The caller of ``fn`` in ``framework``'s convention; ``options`` go to that caller (TRL: ``tokenizer``,
    ``eos_ids``, ``trainer_state``, ``tools``; verl: ``reward_fn_key``; verifiers: ``rubric``)."""
    if framework == "trl":
        from rl_guards.reward_calls.trl import TrlCaller

        return TrlCaller(fn, **options)
    if framework == "verl":
        from rl_guards.reward_calls.verl import VerlCaller

        return VerlCaller(fn, **options)
    if framework == "openrlhf":
        from rl_guards.reward_calls.openrlhf import OpenRLHFCaller

        return OpenRLHFCaller(fn, **options)
    if framework == "verifiers":
        from rl_guards.reward_calls.verifiers import VerifiersCaller

        return VerifiersCaller(fn, **options)
    if framework == "plain":
        from rl_guards.reward_calls.plain import PlainCaller

        return PlainCaller(fn)
    raise ConfigError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")


__all__ = [
    "FRAMEWORKS",
    "CallRow",
    "CallStalled",
    "RewardTypeError",
    "Timer",
    "Tracked",
    "bounded",
    "caller",
    "detect",
]
