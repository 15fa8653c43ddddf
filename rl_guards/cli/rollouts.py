"""``rl-guards rollouts RUN_DIR list | show | compare``: read the rollout dumps of a run in a terminal.

::

    rl-guards rollouts outputs/run1 list
    rl-guards rollouts outputs/run1 show --step 20 --task arith --min-reward 0.5 --limit 5
    rl-guards rollouts outputs/run1 compare --steps 10 40 --task echo
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import OrderedDict
from typing import Any

from rl_guards.console import Column, is_terminal, print_table, two_columns, width_of
from rl_guards.rollouts.reader import RolloutStore, UnreadableDumpError, filter_rows
from rl_guards.rollouts.render import (
    fmt_number,
    format_rollout,
    header_line,
    printable,
    tail,
    visible_whitespace,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rollouts",
        help="list, show and compare rollout dumps",
        description="Read the rollout dumps (Parquet) the rollouts guard wrote for a run.",
    )
    parser.add_argument("run_dir", help="trainer output_dir, or the rollouts folder itself")
    actions = parser.add_subparsers(dest="action", required=True)

    actions.add_parser("list", help="dumped steps, rows, tasks, reason").set_defaults(func=cmd_list)

    show = actions.add_parser("show", help="rollouts of one step, whitespace and special tokens visible")
    show.add_argument("--step", type=int, required=True)
    _add_filters(show)
    show.add_argument("--limit", type=int, default=10, help="rollouts shown (default 10)")
    show.add_argument("--prompt-chars", type=int, default=300, help="prompt tail characters shown (default 300)")
    show.set_defaults(func=cmd_show)

    compare = actions.add_parser("compare", help="the same prompts in two dumps, side by side")
    compare.add_argument("--steps", type=int, nargs=2, required=True, metavar=("A", "B"))
    compare.add_argument("--task", default=None)
    compare.add_argument("--limit", type=int, default=5, help="prompts shown (default 5)")
    compare.add_argument("--per-prompt", type=int, default=2, help="completions per prompt and step (default 2)")
    compare.add_argument("--width", type=int, default=0, help="total width (default: the terminal's)")
    compare.set_defaults(func=cmd_compare)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default=None)
    parser.add_argument("--min-reward", type=float, default=None)
    parser.add_argument("--max-reward", type=float, default=None)
    parser.add_argument("--anomaly", default=None, help="think anomaly kind, or 'any'")
    truncated = parser.add_mutually_exclusive_group()
    truncated.add_argument("--truncated", dest="truncated", action="store_true", default=None)
    truncated.add_argument("--not-truncated", dest="truncated", action="store_false")


def _store(args: argparse.Namespace) -> RolloutStore | None:
    try:
        return RolloutStore(args.run_dir)
    except FileNotFoundError as exc:
        print(f"rl-guards rollouts: {printable(exc)}", file=sys.stderr)
        return None


def cmd_list(args: argparse.Namespace) -> int:
    store = _store(args)
    if store is None:
        return 2
    index = store.index()
    rows = [
        [
            e["step"], e["rows"], printable(e["reason"]), "" if e.get("checkpoint") is None else e["checkpoint"],
            ", ".join(printable(t) for t in e["tasks"]),
        ]
        for e in index
    ]  # fmt: skip
    columns = [Column("step", "right"), Column("rows", "right"), "reason", Column("checkpoint", "right"), "tasks"]
    print_table(columns, rows, title=f"{printable(store.folder)}: {len(index)} dumps")
    _say_unreadable(store)
    return 0


def _say_unreadable(store: RolloutStore) -> None:
    """One line on stderr per dump file that could not be read (the others are still listed and shown)."""
    for item in store.unreadable():
        print(f"rl-guards rollouts: skipped unreadable dump {printable(item)}", file=sys.stderr)


def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    if store is None:
        return 2
    try:
        rows = store.load(args.step)
    except FileNotFoundError as exc:
        print(f"rl-guards rollouts: {printable(exc)}", file=sys.stderr)
        _say_unreadable(store)
        return 2
    except UnreadableDumpError as exc:
        print(f"rl-guards rollouts: {printable(exc)}", file=sys.stderr)
        return 1
    picked = filter_rows(
        rows,
        task=args.task,
        min_reward=args.min_reward,
        max_reward=args.max_reward,
        anomaly=args.anomaly,
        truncated=args.truncated,
    )
    print(f"step {args.step}: {len(picked)} of {len(rows)} rollouts match; showing {min(len(picked), args.limit)}")
    for row in picked[: args.limit]:
        print(format_rollout(row, args.prompt_chars))
    _say_undecoded(store)
    return 0


def _say_undecoded(store: RolloutStore) -> None:
    """Why the prompts are empty (the run's tokenizer file is missing or unreadable), and what to do."""
    note = store.decoder_note()
    if note is not None:
        print(f"rl-guards rollouts: {printable(note)}", file=sys.stderr)


def by_prompt(rows: list[dict[str, Any]]) -> OrderedDict[str, list[dict[str, Any]]]:
    """Rows grouped by rendered prompt text, in order of first appearance."""
    out: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for row in rows:
        out.setdefault(row.get("prompt") or "", []).append(row)
    return out


def _mean_reward(rows: list[dict[str, Any]]) -> float | None:
    values = [r["reward"] for r in rows if r.get("reward") is not None]
    return sum(values) / len(values) if values else None


def _header(row: dict[str, Any] | None) -> str:
    return header_line(row) if row is not None else ""


def _completion(row: dict[str, Any] | None) -> str:
    return visible_whitespace(row.get("completion") or "") if row is not None else ""


def cmd_compare(args: argparse.Namespace) -> int:
    store = _store(args)
    if store is None:
        return 2
    step_a, step_b = args.steps
    try:
        rows_a = filter_rows(store.load(step_a), task=args.task)
        rows_b = filter_rows(store.load(step_b), task=args.task)
    except FileNotFoundError as exc:
        print(f"rl-guards rollouts: {printable(exc)}", file=sys.stderr)
        _say_unreadable(store)
        return 2
    except UnreadableDumpError as exc:
        print(f"rl-guards rollouts: {printable(exc)}", file=sys.stderr)
        return 1
    groups_a, groups_b = by_prompt(rows_a), by_prompt(rows_b)
    common = [p for p in groups_a if p in groups_b]
    where = f" (task {args.task})" if args.task else ""
    shown = min(len(common), args.limit)
    print(f"steps {step_a} vs {step_b}{where}: {len(common)} prompts in both dumps; showing {shown}")
    _say_undecoded(store)
    if not common:
        print(
            "No rendered prompt appears in both dumps (each step samples new prompts). Pick steps from the same "
            "epoch position, or use `show` on each step."
        )
        return 0
    width = args.width or width_of()
    for prompt in common[: args.limit]:
        a, b = groups_a[prompt], groups_b[prompt]
        print(f"\ntask {printable(a[0].get('task'))} | prompt (tail):")
        print(visible_whitespace(tail(prompt, 300)))
        titles = (
            f"step {step_a}: {len(a)} rollouts, mean reward {fmt_number(_mean_reward(a))}",
            f"step {step_b}: {len(b)} rollouts, mean reward {fmt_number(_mean_reward(b))}",
        )
        pairs = [
            (f"{_header(left)}\n{_completion(left)}".strip(), f"{_header(right)}\n{_completion(right)}".strip())
            for left, right in itertools.zip_longest(a[: args.per_prompt], b[: args.per_prompt])
        ]
        print(two_columns(pairs, width=width, titles=titles, styled=is_terminal()))
    return 0
