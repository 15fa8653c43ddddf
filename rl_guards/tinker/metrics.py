"""rl_guards' metrics through the cookbook's own metric path, and back.

A group's ``compute_group_rewards`` returns one metrics dict per trajectory; the cookbook averages each key over the
dicts that have it into ``env/all/<key>`` (and ``env/<tag>/<key>`` when tags select strict subsets of groups). When a
batch is decided, :func:`deliver` writes its values into those dicts so that every such mean is the value itself:

- ``rl_guards/<guard>/<metric>``: into every trajectory of the batch (``env/all/...``; each tag shows the same value);
- ``rl_guards_task/<task>/<metric>``: into the task's own groups; when the loop drops constant-reward groups
  (``remove_constant_reward_groups``) and every group of a task goes, into the groups that stay.

:func:`history` reads ``metrics.jsonl`` back as the engine logs its keys (the run summary's curves).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rl_guards.core.metric_keys import METRIC_PREFIX, parse_task_metric_key, task_metric_key
from rl_guards.tinker.rows import GroupResult


def deliver(
    values: dict[str, float], groups: Sequence[GroupResult], labels: Sequence[Any], drops_constant: bool
) -> None:
    """Write ``values`` into the groups' trajectory metrics; ``labels``: each group's task label in the batch."""
    global_values = {k: v for k, v in values.items() if parse_task_metric_key(k) is None}
    per_task: dict[Any, dict[str, float]] = {}
    for key, value in values.items():
        parsed = parse_task_metric_key(key)
        if parsed is not None:
            per_task.setdefault(parsed[0], {})[key] = value
    survivors = list(range(len(groups)))
    if drops_constant:  # the cookbook keeps the groups with two rewards or more (the first one when none has)
        survivors = [i for i, g in enumerate(groups) if not g.constant] or [0]
    kept = {labels[i] for i in survivors}
    orphans = {k: v for task, keys in per_task.items() if task not in kept for k, v in keys.items()}
    for i, group in enumerate(groups):
        extra = dict(global_values)
        extra.update(per_task.get(labels[i], {}))
        if i in survivors:
            extra.update(orphans)
        for metrics in group.metric_dicts:
            metrics.update(extra)


def history(log_path: str, only_task: str | None) -> list[dict[str, Any]]:
    """``metrics.jsonl``'s rows with rl_guards' keys as the engine logs them (``env/all/`` off), and each tag's
    ``reward/total`` as the task's ``reward_mean`` (``env/all/reward/total`` for ``only_task`` when the run has one)."""
    path = Path(log_path) / "metrics.jsonl"
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        row: dict[str, Any] = {"step": raw.get("step")}
        tags = {k.split("/")[1] for k in raw if k.startswith("env/") and k.endswith("/reward/total")}
        for key, value in raw.items():
            if key.startswith(f"env/all/{METRIC_PREFIX}"):
                row[key.removeprefix("env/all/")] = value
            elif key.startswith("env/") and key.endswith("/reward/total"):
                tag = key.split("/")[1]
                task = tag if tag != "all" else (only_task if tags == {"all"} else None)
                if task is not None:
                    row[task_metric_key(task, "reward_mean")] = value
        rows.append(row)
    return rows


__all__ = ["deliver", "history"]
