"""Route reward functions to tasks: each function only ever sees, and scores, the rows of its own tasks.

::

    reward_funcs = route({"math": [math_correct, fmt], "code": [tests_pass, fmt]})
    # -> [math_correct, fmt, tests_pass] wrapped; fmt serves both tasks
    trainer = GRPOTrainer(..., reward_funcs=reward_funcs)

A wrapper calls its function on the rows of its tasks only (an LLM judge is never paid for other tasks' rows)
and returns ``None`` for every other row, which TRL leaves out of that function's statistics. The declared
routes stay on each wrapper (``rl_guards_routes``), so :class:`~rl_guards.guards.routing.RoutingGuard` checks
live batches against them without any configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rl_guards.errors import ConfigError
from rl_guards.rewards.callables import is_async_reward, require_async_support, reward_name

__all__ = ["AsyncRoutedReward", "RoutedReward", "reward_name", "route"]


class RoutedReward:
    """A reward function restricted to some tasks; picklable when the wrapped function is.

    Attributes: ``fn`` (the wrapped function), ``tasks`` (the tasks it serves), ``task_column``, ``__name__``
    (the wrapped function's name, so TRL's ``rewards/<name>`` keys do not change), ``rl_guards_routes``
    (the full declared mapping, task -> function names, shared by every wrapper of one :func:`route` call).
    """

    def __init__(
        self, fn: Callable[..., Any], tasks: Sequence[str], routes: dict[str, list[str]], task_column: str = "task"
    ) -> None:
        self.fn = fn
        self.tasks = tuple(tasks)
        self.task_column = task_column
        self.rl_guards_routes = {task: list(names) for task, names in routes.items()}
        self.__name__ = reward_name(fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__name__}, tasks={list(self.tasks)})"

    def _select(self, kwargs: dict[str, Any], n: int) -> list[int]:
        if self.task_column not in kwargs:
            raise KeyError(
                f"reward function {self.__name__!r} is routed by the {self.task_column!r} column, but the batch has "
                f"no such column (got {sorted(k for k in kwargs if isinstance(kwargs[k], list))}). Add the column "
                f"to the dataset or pass task_column= to route()."
            )
        column = kwargs[self.task_column]
        if len(column) != n:
            raise ValueError(f"{self.task_column!r} column has {len(column)} values for {n} completions")
        return [i for i, task in enumerate(column) if task in self.tasks]

    def _subset(self, kwargs: dict[str, Any], rows: list[int], n: int) -> dict[str, Any]:
        """Per-row lists cut to ``rows``; ``log_extra`` scattered back to the full batch with None elsewhere."""
        out: dict[str, Any] = {}
        for key, value in kwargs.items():
            if isinstance(value, list | tuple) and len(value) == n:
                out[key] = [value[i] for i in rows]
            else:
                out[key] = value
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            out["log_extra"] = _ScatterLogExtra(log_extra, rows, n)
        return out

    def _scatter(self, values: Sequence[Any], rows: list[int], n: int) -> list[float | None]:
        if len(values) != len(rows):
            raise ValueError(
                f"reward function {self.__name__!r} returned {len(values)} rewards for {len(rows)} rows of tasks "
                f"{list(self.tasks)}"
            )
        out: list[float | None] = [None] * n
        for i, value in zip(rows, values, strict=True):
            out[i] = value
        return out

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        n = len(completions) if completions is not None else len(prompts or [])
        rows = self._select(kwargs, n)
        if not rows:
            return [None] * n
        call = self._subset({"prompts": prompts, "completions": completions, **kwargs}, rows, n)
        return self._scatter(self.fn(**call), rows, n)


class AsyncRoutedReward(RoutedReward):
    """:class:`RoutedReward` for an ``async`` reward function (TRL awaits it with the others)."""

    async def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        n = len(completions) if completions is not None else len(prompts or [])
        rows = self._select(kwargs, n)
        if not rows:
            return [None] * n
        call = self._subset({"prompts": prompts, "completions": completions, **kwargs}, rows, n)
        return self._scatter(await self.fn(**call), rows, n)


class _ScatterLogExtra:
    """TRL's ``log_extra`` expects one value per row of the whole batch; the wrapped function logs a subset."""

    def __init__(self, log_extra: Callable[[str, list[Any]], None], rows: list[int], n: int) -> None:
        self.log_extra, self.rows, self.n = log_extra, rows, n

    def __call__(self, column: str, values: list[Any]) -> None:
        full: list[Any] = [None] * self.n
        for i, value in zip(self.rows, values, strict=False):
            full[i] = value
        self.log_extra(column, full)


def route(routes: dict[str, list[Callable[..., Any]]], task_column: str = "task") -> list[RoutedReward]:
    """One wrapper per distinct function in ``routes`` (task -> functions), in order of first appearance.

    A function listed under several tasks gets one wrapper serving all of them. Raises ConfigError on an empty
    mapping, a non-callable, or two different functions with the same name (TRL's metric keys would collide).
    """
    if not routes:
        raise ConfigError("route() needs at least one task -> [reward functions] entry")
    order: list[Any] = []
    tasks_of: dict[int, list[str]] = {}
    for task, funcs in routes.items():
        if not isinstance(funcs, list | tuple):
            raise ConfigError(f"routes[{task!r}] must be a list of reward functions, got {type(funcs).__name__}")
        for fn in funcs:
            if not callable(fn):
                raise ConfigError(f"routes[{task!r}] holds {fn!r}, which is not callable")
            if id(fn) not in tasks_of:
                order.append(fn)
                tasks_of[id(fn)] = []
            if task not in tasks_of[id(fn)]:
                tasks_of[id(fn)].append(str(task))
    names: dict[str, Any] = {}
    for fn in order:
        name = reward_name(fn)
        if name in names and names[name] is not fn:
            raise ConfigError(
                f"two different reward functions are both named {name!r}; give one a distinct __name__ "
                f"(TRL logs rewards/<name>/mean and the routes are matched by name)"
            )
        names[name] = fn
    declared = {str(task): [reward_name(fn) for fn in funcs] for task, funcs in routes.items()}
    out: list[RoutedReward] = []
    for fn in order:
        require_async_support(fn, "route")
        cls = AsyncRoutedReward if is_async_reward(fn) else RoutedReward
        out.append(cls(fn, tasks_of[id(fn)], declared, task_column))
    return out
