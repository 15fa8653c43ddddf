"""A tinker-cookbook env's reward, called as the cookbook's rollout calls it: ``await env.step(action)``.

The cookbook has no reward function apart from its envs: a rollout samples action tokens, and the env's ``step``
turns them into a reward (``rl/rollout_runner.py``)::

    step_result = await env.step(ac.tokens, extra=ActionExtra(stop_reason=ac.stop_reason))
    transition.reward = step_result.reward          # rl_guards' ``env`` reward column

:class:`TinkerCaller` scores a text the same way. The text becomes the tokens the policy would have sampled to write
it: the env renderer's tokenizer (``encode``, no special tokens added), then the renderer's first stop sequence (its
end-of-turn token, or a stop string's tokens) so the response terminates cleanly, as a sampled one that stopped does.
Those tokens go to the env's own ``step``, and its ``reward`` is the score.

Why ``step`` and not ``check_answer``: ``step`` is the whole reward path, exactly as the loop runs it. On a
``ProblemEnv`` it parses the tokens with the env's renderer (``parse_response``), strips the thinking
(``get_text_content``), and combines ``check_format`` and ``check_answer`` into ``format_coef * (format - 1) +
correct``; a recipe that overrides ``step`` (grading the decoded tokens, say, thinking included) is called as
overridden. Calling ``check_answer`` directly would probe a function the loop never calls on that text.

A ``ProblemEnv``'s ``step`` is a pure function of the action, but it logs the prompt, the response and the reward
into the cookbook's logtree (the ``iteration_<i>/train.html`` traces) when a trace is active, and a probe runs inside
the loop's last ``compute_group_rewards``, where it is. So each step runs in an empty ``contextvars.Context``: no
logtree trace, no ``trace_iteration`` window (its ``time/...`` metrics), nothing of the loop's context; the
``StepResult``'s metrics are dropped. The step's coroutine is driven on the calling thread (a ``ProblemEnv``'s
never awaits; the probes' deadline, a signal, interrupts a grader that hangs there); a step that awaits something
(an async judge) is closed and run again, with the rest of the call's texts, on an event loop of its own in a worker
thread (the loop's own event loop is busy running the probe).

A row whose env is not a pure answer check (:attr:`rl_guards.tinker.graders.GraderCall.stateful`: not a
``ProblemEnv``, several turns, a group reward of the builder's own) raises :class:`StatefulEnv` before anything is
scored: stepping such an env again could change its state, and its reward is not the step's alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from typing import Any

from rl_guards.reward_calls.base import CallRow, Tracked, score_value


class StatefulEnv(TypeError):
    """The row's env cannot be stepped again for a probe (see the module doc)."""


class TinkerCaller:
    """The env reward of a tinker-cookbook row, called through the row's env (``row.handle``: its
    :class:`~rl_guards.tinker.graders.GraderCall`); see the module doc."""

    framework = "tinker"

    def __init__(self, name: str = "env") -> None:
        self.__name__ = name
        self._stops: dict[int, list[int]] = {}  # renderer id -> the tokens that end a response cleanly

    def __call__(self, rows: Sequence[CallRow], texts: Sequence[str], *, tracked: Tracked | None = None) -> list[Any]:
        items = tracked if tracked is not None else Tracked()
        items.extend(texts)
        calls = [_grader_call(row) for row in rows]  # every row checked before any is scored
        scores: list[Any] = []
        for i, call in enumerate(calls):
            done = _drive(lambda call=call, text=items[i]: self._step(call, text))
            if done is _AWAITS:  # an async step: this text and the rest on an event loop of their own
                return scores + self._on_own_loop(calls, items, len(scores))
            scores.append(_reward(done))
        return scores

    def action(self, env: Any, text: str) -> list[int]:
        """The tokens the policy would have sampled to write ``text`` and end its turn."""
        renderer = env.renderer
        tokenizer = renderer.tokenizer
        return [*tokenizer.encode(text, add_special_tokens=False), *self._stop(renderer)]

    def _stop(self, renderer: Any) -> list[int]:
        key = id(renderer)
        if key not in self._stops:
            stops = list(renderer.get_stop_sequences() or [])
            first = stops[0] if stops else None
            if isinstance(first, str):
                self._stops[key] = list(renderer.tokenizer.encode(first, add_special_tokens=False))
            else:
                self._stops[key] = [int(first)] if first is not None else []
        return self._stops[key]

    def _step(self, call: Any, text: str) -> Any:
        """``env.step(tokens)``'s coroutine, as the rollout runner awaits it."""
        from tinker_cookbook.rl.types import ActionExtra

        return call.env.step(self.action(call.env, text), extra=ActionExtra(stop_reason="stop"))

    def _on_own_loop(self, calls: list[Any], items: Tracked, start: int) -> list[Any]:
        """The steps of texts ``start..`` awaited together on a new event loop in a worker thread (the calling
        thread's loop is the training loop's, busy running the probe); the calling thread waits, interruptibly."""
        pending = set(range(start, len(calls)))
        texts = [items[i] for i in range(start, len(calls))]

        async def one(i: int, text: str) -> Any:
            result = await self._step(calls[i], text)
            pending.discard(i)
            return result

        async def every() -> list[Any]:
            return list(await asyncio.gather(*(one(start + k, t) for k, t in enumerate(texts))))

        box: dict[str, Any] = {}
        finished = threading.Event()

        def work() -> None:
            try:
                box["value"] = contextvars.Context().run(asyncio.run, every())
            except BaseException as exc:  # handed to the calling thread
                box["error"] = exc
            finally:
                finished.set()

        threading.Thread(target=work, name="rl_guards-tinker-step", daemon=True).start()
        while not finished.wait(0.05):  # a deadline's signal lands between waits
            if pending:
                items.last = min(pending)  # the text a stalled call is shown on
        if "error" in box:
            raise box["error"]
        return [_reward(r) for r in box["value"]]


_AWAITS = object()


def _drive(make: Any) -> Any:
    """Run the coroutine ``make()`` returns in an empty context on this thread; its value, or ``_AWAITS`` when it
    suspended (it awaited a future: it is closed, to be run again elsewhere)."""
    context = contextvars.Context()
    coroutine = context.run(make)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop on this thread (outside the training loop): run it on one of its own
        return context.run(asyncio.run, coroutine)
    try:
        context.run(coroutine.send, None)
    except StopIteration as done:
        return done.value
    context.run(coroutine.close)
    return _AWAITS


def _grader_call(row: CallRow) -> Any:
    call = row.handle
    if call is None or not hasattr(call, "env"):
        raise StatefulEnv("the row has no env to step (not a tinker-cookbook row)")
    if call.stateful is not None:
        raise StatefulEnv(f"row {call.row}: not probed ({call.stateful})")
    return call


def _reward(result: Any) -> float | None:
    if not getattr(result, "episode_done", True):
        raise StatefulEnv("the env's step did not end the episode: a multi-turn env is not probed")
    return score_value(result.reward)


__all__ = ["StatefulEnv", "TinkerCaller"]
