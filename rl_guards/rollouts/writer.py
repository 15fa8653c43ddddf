"""A bounded background writer: slow file work (Arrow building, Parquet, index) off the training thread.

One daemon thread runs the submitted jobs in order. At most ``max_pending`` jobs wait: when the queue is full, the
oldest waiting job that may be dropped is dropped (and counted); a job submitted with ``keep=True`` (a checkpoint's
dump, a stop's evidence) is never dropped: the training thread waits for room instead. Results and errors come
back through :meth:`results`, which the training thread drains at its next hook, so findings, metrics and W&B
calls all stay on the training thread. Pending jobs are flushed at exit.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Job:
    """One unit of work for the writer."""

    label: str  # e.g. "step 120"
    run: Callable[[], Any]
    keep: bool = False  # never dropped when the queue is full
    tag: Any = None  # returned with the result (e.g. the step a dump belongs to)


@dataclass
class Result:
    """What became of a job: ``ok`` (``value`` is what it returned), ``error`` or ``dropped``."""

    label: str
    status: str
    value: Any = None
    error: BaseException | None = None
    tag: Any = None


class BackgroundWriter:
    """Runs jobs on one daemon thread, in submission order, with at most ``max_pending`` waiting."""

    def __init__(self, max_pending: int = 2, name: str = "rl_guards-writer") -> None:
        self.max_pending = max(1, max_pending)
        self.name = name
        self._cond = threading.Condition()
        self._jobs: deque[Job] = deque()
        self._results: deque[Result] = deque()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.dropped = 0
        ref = weakref.ref(self)
        atexit.register(lambda: (w := ref()) is not None and w.close(timeout=60))

    def submit(self, job: Job) -> None:
        """Queue ``job``; when full, drop the oldest droppable waiting job, or wait for room (never for long)."""
        with self._cond:
            while len(self._jobs) >= self.max_pending:
                victim = next((j for j in self._jobs if not j.keep), None)
                if victim is not None:
                    self._jobs.remove(victim)
                    self.dropped += 1
                    self._results.append(Result(victim.label, "dropped", tag=victim.tag))
                else:
                    self._cond.wait(timeout=1.0)
            self._jobs.append(job)
            self._cond.notify_all()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job ran; False when ``timeout`` (seconds) passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout=timeout)

    def results(self) -> list[Result]:
        """Results since the last call (oldest first)."""
        with self._cond:
            out = list(self._results)
            self._results.clear()
            return out

    @property
    def pending(self) -> int:
        """Jobs waiting or running."""
        with self._cond:
            return len(self._jobs) + int(self._busy)

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the thread; True when everything was written in time."""
        done = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        return done

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._jobs or self._closed)
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._busy = True
                self._cond.notify_all()  # room in the queue
            try:
                result = Result(job.label, "ok", value=job.run(), tag=job.tag)
            except BaseException as exc:  # reported to the training thread, which decides what it means
                result = Result(job.label, "error", error=exc, tag=job.tag)
            with self._cond:
                self._results.append(result)
                self._busy = False
                self._cond.notify_all()
