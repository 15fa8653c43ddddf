"""Metric key layout: ``rl_guards/<guard>/<metric>`` and ``rl_guards_task/<task>/<metric>``, task names encoded.

Task names come from a dataset column and may hold anything: ``a/b`` and ``a_b`` must not share a curve, and a
``/`` must not open a new W&B section. Each name is percent-encoded into one key segment: characters outside
``A-Z a-z 0-9 _ . -`` become ``%XX`` (UTF-8 bytes), so the encoding is reversible and W&B-safe. Two reserved
segments start with ``~`` (always encoded in a real name, so they cannot collide): :data:`EMPTY_SEGMENT` for the
empty name and :data:`OTHER_SEGMENT` for the bucket of tasks beyond the per-task cap (``tasks.max_tasks``).
"""

from __future__ import annotations

from urllib.parse import quote, unquote

METRIC_PREFIX = "rl_guards"
TASK_PREFIX = f"{METRIC_PREFIX}_task/"  # a W&B section of its own, apart from the guards' health
SAFE_CHARS = "_.-"  # besides ASCII letters and digits, kept as they are
EMPTY_SEGMENT = "~empty"
OTHER_SEGMENT = "~other"


class OtherTasks(str):
    """The label of rows whose task is beyond the per-task cap.

    A ``str`` so it sorts, prints and joins like a task name, but equal only to itself: a real task that happens to
    be called ``"(other tasks)"`` keeps its own statistics. Serialise task names with :func:`encode_task`.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OtherTasks)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, OtherTasks)

    def __hash__(self) -> int:
        return hash((OtherTasks, OTHER_SEGMENT))


OTHER_TASKS = OtherTasks("(other tasks)")


def encode_task(task: str) -> str:
    """One key segment for ``task``; :func:`decode_task` reverses it."""
    if isinstance(task, OtherTasks):
        return OTHER_SEGMENT
    text = str(task)
    if not text:
        return EMPTY_SEGMENT
    # surrogatepass: a lone surrogate (a name decoded from bad bytes, a streamed dataset) gets its own reversible
    # %ED%A0%80 escape instead of a UnicodeEncodeError at the first metric or checkpoint
    raw = text.encode("utf-8", "surrogatepass")
    return quote(raw, safe=SAFE_CHARS).replace("~", "%7E")  # quote() always keeps "~"; the reserved use it


def decode_task(segment: str) -> str:
    """The task name a key segment stands for (:data:`OTHER_TASKS` for the capped bucket)."""
    if segment == EMPTY_SEGMENT:
        return ""
    if segment == OTHER_SEGMENT:
        return OTHER_TASKS
    return unquote(segment, errors="surrogatepass")


def metric_key(guard: str, name: str) -> str:
    """``rl_guards/<guard>/<name>``."""
    return f"{METRIC_PREFIX}/{guard}/{name}"


def task_metric_key(task: str, name: str) -> str:
    """``rl_guards_task/<encoded task>/<name>``."""
    return f"{TASK_PREFIX}{encode_task(task)}/{name}"


def parse_task_metric_key(key: str) -> tuple[str, str] | None:
    """``(task, metric)`` of a per-task key, or None for any other key."""
    if not key.startswith(TASK_PREFIX):
        return None
    segment, sep, metric = key[len(TASK_PREFIX) :].partition("/")
    if not sep or not metric:
        return None
    return decode_task(segment), metric
