"""Reward code that prints, starts a spawn process pool, or takes its process down: the audit command must keep its
output and exit codes whatever the user's code does."""

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

_pool = None


def _pool_get():
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    return _pool


def _grade(text, answer):
    print("worker grading", text[:10])
    numbers = [t for t in text.replace(".", " ").split() if t.lstrip("-").isdigit()]
    return float(bool(numbers) and numbers[-1] == str(answer))


def pooled(completion, answer):
    return _pool_get().submit(_grade, completion, answer).result(timeout=60)


def chatty(completion, answer):
    print("DEBUG scoring", completion[:10])
    os.system("echo from-a-subprocess")
    return _grade(completion, answer)


def exits(completion, answer):
    os._exit(7)


def segfaults(completion, answer):
    import ctypes

    return float(ctypes.string_at(0) == b"")


def hangs_on_long_texts(completion, answer):
    if len(completion) > 500:
        time.sleep(3600)
    return _grade(completion, answer)
