"""One stop decision for all ranks: every rank calls these at the same points, stopping or not, so that no rank is
left waiting in a collective and all of them stop together with the stopping rank's message."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rl_guards.engine.ranks import Ranks
from rl_guards.errors import GuardError
from rl_guards.guards.session import GuardSession


class Agreement:
    """Stop or not, fetch text or not: decided from one ``all_reduce`` of three integers (max)."""

    def __init__(self, ranks: Ranks, session: GuardSession, guard_names: Sequence[str]) -> None:
        self.ranks = ranks
        self.session = session
        self.guard_names = list(guard_names)
        self.on_stop: list[Callable[[GuardError, int | None], None]] = []  # called with every shared stop
        self.agreed: GuardError | None = None  # the last decision's stop (None: go on), the same on every rank

    def decide(self, raised: GuardError | None, step: int, *, need_text: bool) -> tuple[GuardError | None, bool]:
        """The stop every rank agrees on (None: go on), and whether any rank needs rows' text."""
        stop = raised
        stopping = self.session.stopping
        if stop is None and stopping is not None:  # its message is rendered at settle(); this only carries the guard
            stop = GuardError(f"[rl_guards/{stopping.guard}] {stopping.kind}", guard=stopping.guard, step=step)
        if not self.ranks.several:
            self.agreed = stop
            return stop, need_text
        names = self.guard_names
        mine = names.index(stop.guard) + 1 if stop is not None and stop.guard in names else 0
        stopping_any, index, text = self.ranks.all_reduce_ints([int(stop is not None), mine, int(need_text)])
        if stop is None and stopping_any:
            name = names[index - 1] if index else "hook"
            stop = GuardError(
                f"[rl_guards/{name}] a guard stopped the run on another rank at step {step}; this rank stops with "
                "it (the finding and its message are in that rank's log).",
                guard=name,
                step=step,
            )
        self.agreed = stop
        return stop, bool(text)

    def settled(self, raised: GuardError | None, step: int) -> GuardError | None:
        """Agree across ranks, then render this rank's messages: the error to raise on this rank, or None."""
        stop, _ = self.decide(raised, step, need_text=False)
        error = self.session.settle()
        return self.share(raised or error, stop) if stop is not None else None

    def share(self, own: GuardError | None, agreed: GuardError) -> GuardError:
        """The error this rank raises: its own, else the stopping rank's, message and all (ranks that stop only
        because another did would otherwise fail with a message that says nothing). Collective: every rank that
        stops calls it, and when one stops all do."""
        error = self._stop_error(own, agreed)
        for listener in self.on_stop:
            listener(error, agreed.step)
        return error

    def _stop_error(self, own: GuardError | None, agreed: GuardError) -> GuardError:
        if not self.ranks.several:
            return own or agreed
        texts = self.ranks.all_gather_objects(None if own is None else (own.guard, str(own)))
        if own is not None:
            return own
        first = next((t for t in texts if t is not None), None)
        if first is None:
            return agreed
        guard, text = first
        return GuardError(f"{text}\n(stopped on another rank; this rank stops with it)", guard=guard, step=agreed.step)


__all__ = ["Agreement"]
