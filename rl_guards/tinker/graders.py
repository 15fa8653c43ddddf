"""What calling an env's grader on one rollout needs: the seam for reward probes on cookbook envs.

A ``ProblemEnv`` (the cookbook's single-turn Q&A env, and every recipe built on it) grades a rollout with pure
functions of the answer text: ``step`` parses the sampled tokens with the env's renderer (``parse_response``), takes
the text without the thinking (``get_text_content``) and calls ``check_format(text)`` and ``check_answer(text)``;
``get_reference_answer()`` is the answer it is compared with. :class:`GraderCall` holds one row's env and sampled
tokens and gives each of those, computed when asked (nothing is parsed on the hot path), so a probe can call the
grader exactly as the env calls it (:meth:`GraderCall.grade`). An env whose reward comes from anything else
(``step`` of a non-``ProblemEnv``, a multi-turn env, a group-level reward) may depend on state: ``stateful`` says
why, and such a row is not to be probed.

:meth:`GraderCall.call_row` is the row as the reward probes take it (``batch.reward_inputs`` items are these calls);
:class:`rl_guards.reward_calls.tinker.TinkerCaller` scores a probe's text through the row's env.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rl_guards.reward_calls.base import CallRow


@dataclass
class GraderCall:
    """One rollout's grader call (see the module docstring). ``row``: the batch row; ``action``: the sampled tokens
    the env's ``step`` was given (the first turn's); ``text``: the row's completion as the batch holds it (decoded,
    thinking included); ``prompt_ids``: the initial observation's tokens."""

    row: int
    env: Any
    action: list[int] = field(default_factory=list)
    turns: int = 1
    group_reward: bool = False  # the group builder adds a reward of its own (compute_group_rewards)
    text: str | None = None
    prompt_ids: list[int] | None = None

    @cached_property
    def stateful(self) -> str | None:
        """Why the env's reward may depend on state (None: a ProblemEnv's pure answer check)."""
        try:
            from tinker_cookbook.rl.problem_env import ProblemEnv
        except Exception:  # the cookbook is not importable here
            return "tinker_cookbook is not importable"
        if not isinstance(self.env, ProblemEnv):
            return f"{type(self.env).__name__} is not a ProblemEnv: its reward comes from step(), which may use state"
        if self.turns != 1:
            return f"the rollout has {self.turns} turns: a ProblemEnv grades one"
        if self.group_reward:
            return "the group builder adds a group reward (compute_group_rewards) of its own"
        return None

    @cached_property
    def parsed(self) -> tuple[Any, Any]:
        """``renderer.parse_response(action)``: the env's own renderer, as its ``step`` calls it."""
        return self.env.renderer.parse_response(self.action)

    @property
    def message(self) -> Any:
        return self.parsed[0]

    @property
    def termination(self) -> Any:
        return self.parsed[1]

    @cached_property
    def response(self) -> str:
        """The text the env grades: the parsed message's text without its thinking parts."""
        from tinker_cookbook.renderers import get_text_content

        return get_text_content(self.message)

    @property
    def question(self) -> str | None:
        get = getattr(self.env, "get_question", None)
        return get() if callable(get) else None

    @property
    def reference(self) -> str | None:
        get = getattr(self.env, "get_reference_answer", None)
        return get() if callable(get) else None

    @property
    def check_answer(self) -> Any:
        """The env's answer check, bound (``check_answer(text) -> bool``), or None."""
        return getattr(self.env, "check_answer", None) if self.stateful is None else None

    @property
    def check_format(self) -> Any:
        return getattr(self.env, "check_format", None) if self.stateful is None else None

    def call_row(self) -> CallRow:
        """The row as the reward probes take it: the question as the prompt, the reference as the ``answer`` column,
        the completion's text as ``original``, this call as ``handle`` (what the caller steps the env through)."""
        reference = _safe(lambda: self.reference)
        return CallRow(
            prompt=_safe(lambda: self.question) or "",
            columns={"answer": reference},
            reference=reference,
            prompt_ids=self.prompt_ids,
            original=self.text if self.text is not None else "",
            handle=self,
        )

    def grade(self, text: str) -> float:
        """``check_answer(text)`` as the env's ``step`` turns it into its ``correct`` metric (a float)."""
        if self.check_answer is None:
            raise TypeError(f"row {self.row}: no pure grader to call ({self.stateful})")
        return float(self.check_answer(text))


def _safe(get: Any) -> Any:
    """An env's getter's value, None when it raises (a row record must never fail to build)."""
    try:
        return get()
    except Exception:
        return None


__all__ = ["GraderCall"]
