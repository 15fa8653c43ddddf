"""Futures and the work queue.

Every work endpoint answers at once with a request id; one worker thread executes the queued work in arrival order
(a training client sends request ``n + 1`` only once request ``n`` was accepted, so its requests run in ``seq_id``
order); ``retrieve_future`` waits for the result (long poll) and answers ``try_again`` when it is still not there.
Queued sampling requests of one sampler are taken together and run as batches.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON, PROTO, ERROR = "json", "proto", "error"


@dataclass
class Result:
    """A finished request: ``kind`` json (a dict), proto (bytes) or error (a dict with ``error`` and ``category``)."""

    kind: str
    payload: Any


class Futures:
    """Request ids -> results; a result is kept after its first retrieval (a client may ask again)."""

    KEEP_RETRIEVED = 4096

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._done: OrderedDict[str, Result] = OrderedDict()

    def new(self) -> str:
        request_id = uuid.uuid4().hex
        with self._cond:
            self._pending.add(request_id)
        return request_id

    def resolve(self, request_id: str, result: Result) -> None:
        with self._cond:
            self._pending.discard(request_id)
            self._done[request_id] = result
            while len(self._done) > self.KEEP_RETRIEVED + len(self._pending):
                self._done.popitem(last=False)
            self._cond.notify_all()

    def wait(self, request_id: str, timeout: float) -> Result | None:
        """The result, or None when it is still pending after ``timeout`` seconds; KeyError for an unknown id."""
        with self._cond:
            if request_id not in self._pending and request_id not in self._done:
                raise KeyError(request_id)
            self._cond.wait_for(lambda: request_id in self._done, timeout=timeout)
            return self._done.get(request_id)


@dataclass
class Job:
    """Queued work: ``run()`` returns the result; sampling jobs of one ``batch_key`` may run together
    (``run_batch`` then gets every such job)."""

    request_id: str
    run: Callable[[], Result] | None = None
    batch_key: str | None = None
    run_batch: Callable[[list[Job]], list[Result]] | None = None
    data: dict[str, Any] = field(default_factory=dict)


class Worker:
    """One thread executing jobs in order; a failing job resolves as a user error, never kills the thread."""

    def __init__(self, futures: Futures, name: str = "local-tinker-worker") -> None:
        self.futures = futures
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _take(self) -> list[Job] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._stopping)
            if self._stopping:
                return None
            first = self._queue.popleft()
            if first.batch_key is None:
                return [first]
            batch = [first] + [j for j in self._queue if j.batch_key == first.batch_key]
            if len(batch) > 1:
                self._queue = deque(j for j in self._queue if j.batch_key != first.batch_key)
            return batch

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            try:
                if jobs[0].run_batch is not None:
                    results = jobs[0].run_batch(jobs)
                else:
                    assert jobs[0].run is not None
                    results = [jobs[0].run()]
            except Exception as exc:  # the request fails, the backend goes on
                results = [failure(exc)] * len(jobs)
            for job, result in zip(jobs, results, strict=True):
                self.futures.resolve(job.request_id, result)


def failure(exc: BaseException, category: str = "user") -> Result:
    """A failed request as the client reads it (``RequestFailedError`` with this message)."""
    return Result(ERROR, {"error": str(exc) or type(exc).__name__, "category": category})


__all__ = ["ERROR", "JSON", "PROTO", "Futures", "Job", "Result", "Worker", "failure"]
