"""The bounded background writer: in order, off the calling thread, drops only droppable jobs, flushes, reports."""

from __future__ import annotations

import threading

from rl_guards.rollouts.writer import BackgroundWriter, Job


def _blocked_writer(max_pending: int) -> tuple[BackgroundWriter, threading.Event, list[str]]:
    """A writer whose first job waits for ``release``: later jobs queue up behind it."""
    writer = BackgroundWriter(max_pending)
    release, started = threading.Event(), threading.Event()
    done: list[str] = []

    def first() -> str:
        started.set()
        release.wait(30)
        done.append("first")
        return "first"

    writer.submit(Job("first", first))
    assert started.wait(30)  # running: it no longer counts against max_pending
    return writer, release, done


def test_submit_returns_before_the_job_runs_and_flush_waits_for_it() -> None:
    writer, release, done = _blocked_writer(2)
    writer.submit(Job("second", lambda: done.append("second")))
    assert done == [] and writer.pending == 2  # the caller went on while the writer is busy
    release.set()
    assert writer.flush(30)
    assert done == ["first", "second"]  # in submission order
    assert [(r.label, r.status) for r in writer.results()] == [("first", "ok"), ("second", "ok")]
    assert writer.results() == []  # drained


def test_a_full_queue_drops_the_oldest_droppable_job_never_a_kept_one() -> None:
    writer, release, done = _blocked_writer(2)
    writer.submit(Job("periodic-1", lambda: done.append("periodic-1"), tag=1))
    writer.submit(Job("checkpoint-2", lambda: done.append("checkpoint-2"), keep=True, tag=2))
    writer.submit(Job("periodic-3", lambda: done.append("periodic-3"), tag=3))  # full: periodic-1 goes
    release.set()
    assert writer.flush(30)
    assert done == ["first", "checkpoint-2", "periodic-3"]
    results = writer.results()
    assert [(r.label, r.status, r.tag) for r in results if r.status == "dropped"] == [("periodic-1", "dropped", 1)]
    assert writer.dropped == 1


def test_a_full_queue_of_kept_jobs_makes_the_caller_wait_instead_of_dropping() -> None:
    writer, release, done = _blocked_writer(1)
    writer.submit(Job("checkpoint-1", lambda: done.append("checkpoint-1"), keep=True))
    waiting = threading.Thread(target=lambda: writer.submit(Job("checkpoint-2", lambda: done.append("c2"), keep=True)))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # no room and nothing droppable: the submit waits for the writer
    release.set()
    waiting.join(30)
    assert writer.flush(30) and done == ["first", "checkpoint-1", "c2"] and writer.dropped == 0


def test_an_error_is_reported_not_raised_and_the_writer_goes_on() -> None:
    writer = BackgroundWriter(2)

    def fail() -> None:
        raise OSError(28, "No space left on device")

    writer.submit(Job("bad", fail, tag=7))
    writer.submit(Job("good", lambda: 42))
    assert writer.close(30)
    results = writer.results()
    assert [(r.label, r.status) for r in results] == [("bad", "error"), ("good", "ok")]
    assert isinstance(results[0].error, OSError) and results[0].tag == 7 and results[1].value == 42
