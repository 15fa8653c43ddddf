"""The engine on hand-built rows: no trainer, no torch collectives, one process.

A driver hands the engine ``LocalRows`` and events; these tests check what the engine does with them: the batch
the guards see, the metrics handed to the sink, stops (with the failing batch's metrics logged first), a guard's
own bug, rows a driver could not build, the state round trip, and the token-id buffers that cross ranks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.engine.assembly import LocalRows, pack_ids, unpack_ids
from rl_guards.engine.driver import Engine
from rl_guards.engine.state import engine_state, restore_engine
from rl_guards.errors import GuardError
from rl_guards.guards.base import Guard, Reporter, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.testing.logs import shows


class LongRows(Guard):
    """A test guard: a per-row feature (completion length) on held rows; stops on a row longer than ``limit``."""

    name: ClassVar[str] = "long_rows"
    config_field: ClassVar[str] = "truncation"
    FEATURES: ClassVar[tuple[str, ...]] = ("len",)
    limit = 10

    def __init__(self, config: GuardsConfig) -> None:
        super().__init__(config)
        self.seen: list[RolloutBatch] = []

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        return {"len": [float(len(batch.completion_ids[i])) for i in batch.held_rows]}

    def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
        self.seen.append(batch)
        lengths = self.features(batch)["len"]
        report.metric("longest", max(lengths))
        long = [i for i, n in enumerate(lengths) if n > self.limit]
        if long:
            report.violation("too_long", lambda: f"rows {long} are longer than {self.limit}", GuardError, rows=long)


class BrokenScan(Guard):
    name: ClassVar[str] = "broken"
    config_field: ClassVar[str] = "truncation"
    FEATURES: ClassVar[tuple[str, ...]] = ("x",)

    def scan(self, batch: RolloutBatch) -> dict[str, list[float]]:
        raise ZeroDivisionError("a guard's own bug")


def _rows(step: int, rewards: list[float], lengths: list[int], tasks: list[str], group: int = 2) -> LocalRows:
    n = len(rewards)
    return LocalRows(
        step=step,
        mode="train",
        num_generations=group,
        reward_names=["r"],
        reward_weights=[1.0],
        rewards=np.asarray(rewards, dtype=np.float64).reshape(n, 1),
        advantages=[0.0] * n,
        tasks=tasks,
        completions=["x" * k for k in lengths],
        completion_ids=[list(range(1, k + 1)) for k in lengths],
        prompt_ids=[[100, 101]] * n,
        truncated=[False] * n,
        thinking=[None] * n,
        prompt_opened=[False] * n,
        columns={"id": list(range(n))},
    )


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every engine here writes its findings under a relative output_dir: keep it in the test's own folder."""
    monkeypatch.chdir(tmp_path)


def _engine(guards: list[type[Guard]], config: dict[str, Any] | None = None) -> tuple[Engine, list[Any]]:
    cfg = GuardsConfig.from_dict(config or {})
    engine = Engine(cfg, [cls(cfg) for cls in guards], RunContext(output_dir="unused"))
    sunk: list[Any] = []
    engine.metrics_sink = lambda mode, metrics: sunk.append((mode, metrics))
    engine.setup()
    return engine, sunk


def test_a_batch_reaches_every_guard_with_every_row_and_metrics_reach_the_sink() -> None:
    engine, sunk = _engine([TaskRewardMonitor, DeadGroupGuard, LongRows])
    batch = engine.process(_rows(1, [1.0, 0.0, 1.0, 1.0], [3, 4, 5, 6], ["a", "a", "b", "b"]))
    assert batch is not None and batch.local_rows is None  # one process holds every row
    guard = engine.guard("long_rows")
    assert isinstance(guard, LongRows) and guard.seen == [batch]
    assert batch.features["long_rows/len"] == [3.0, 4.0, 5.0, 6.0]
    assert batch.completion_lengths == [3, 4, 5, 6] and batch.tasks == ["a", "a", "b", "b"]
    assert batch.rewards == [[1.0], [0.0], [1.0], [1.0]]
    ((mode, metrics),) = sunk
    assert mode == "train" and metrics["rl_guards/long_rows/longest"] == [6.0]
    assert "rl_guards_task/b/dead_group_share" in metrics  # the per-task monitors ran on the same batch
    assert engine.batches_seen == 1 and not engine.session.findings


def test_skipped_rewards_read_as_none() -> None:
    engine, _ = _engine([LongRows])
    batch = engine.process(_rows(1, [1.0, float("nan")], [1, 2], ["a", "a"]))
    assert batch is not None and batch.rewards == [[1.0], [None]]


def test_a_raise_mode_violation_stops_after_every_guard_ran_and_logs_its_batch_first() -> None:
    engine, sunk = _engine([LongRows, TaskRewardMonitor], {"truncation": {"mode": "raise"}})
    logged: list[int | None] = []
    engine.log_now = logged.append
    with pytest.raises(GuardError, match=r"rows \[1\] are longer than 10"):
        engine.process(_rows(3, [1.0, 0.0], [2, 11], ["a", "a"]))
    assert logged == [3]  # the failing batch's metrics are logged at its own step before the raise
    assert "rl_guards/long_rows/longest" in sunk[-1][1] and any(k.startswith("rl_guards_task/a/") for k in sunk[-1][1])
    assert [(f.guard, f.kind, f.severity) for f in engine.session.findings] == [("long_rows", "too_long", "blocking")]


def test_warn_mode_goes_on_and_counts() -> None:
    engine, _ = _engine([LongRows], {"truncation": {"mode": "warn"}})
    with shows("longer than 10"):
        engine.process(_rows(1, [1.0, 0.0], [2, 11], ["a", "a"]))
    engine.process(_rows(2, [1.0, 0.0], [2, 12], ["a", "a"]))
    assert engine.session.counts[("long_rows", "too_long")] == 2


def test_a_guards_own_bug_is_counted_and_its_features_read_as_zeros() -> None:
    engine, _ = _engine([BrokenScan, LongRows])
    with shows("scan failed: ZeroDivisionError"):
        batch = engine.process(_rows(1, [1.0, 0.0], [2, 3], ["a", "a"]))
    assert batch is not None and batch.features["broken/x"] == [0.0, 0.0]
    assert batch.features["long_rows/len"] == [2.0, 3.0]  # the guards after it still ran


def test_rows_a_driver_could_not_build_skip_the_batch_with_a_warning() -> None:
    engine, _ = _engine([LongRows])
    with shows("batch guards skipped at step 4: ValueError: bad row"):
        out = engine.process(LocalRows.failed(4, "train", 2, np.zeros((2, 1)), "ValueError: bad row"))
    assert out is None and engine.batches_seen == 0 and engine.guard("long_rows").seen == []


def test_the_state_round_trips_into_a_fresh_engine() -> None:
    engine, _ = _engine([TaskRewardMonitor, DeadGroupGuard, LongRows], {"truncation": {"mode": "log"}})
    for step in range(1, 4):
        engine.process(_rows(step, [1.0, 1.0, 0.0, 1.0], [2, 20, 3, 4], ["a", "a", "b", "b"]))
    saved = {"attributes": engine_state(engine, 3)}
    fresh, _ = _engine([TaskRewardMonitor, DeadGroupGuard, LongRows], {"truncation": {"mode": "log"}})
    restore_engine(fresh, saved, 3)
    assert fresh.batches_seen == 3
    assert fresh.session.counts == engine.session.counts and fresh.session.counts[("long_rows", "too_long")] == 3
    assert engine_state(fresh, 3) == saved["attributes"]


def test_a_damaged_state_is_said_once_and_the_rest_restores() -> None:
    engine, _ = _engine([LongRows])
    with shows("could not be restored in full"):
        restore_engine(engine, {"attributes": {"version": 1, "guards": {}, "session": "garbage", "batches_seen": 5}}, 7)
    assert engine.batches_seen == 5
    assert ("state", "state_not_restored") in engine.session.counts


@pytest.mark.parametrize("rows", [[], [[]], [[1, 2, 3], [], [2**31 - 1]], [list(range(5000))] * 3])
def test_token_id_buffers_round_trip(rows: list[list[int]]) -> None:
    packed = pack_ids(rows)
    assert all(isinstance(part, bytes) for part in packed)
    assert unpack_ids(packed) == rows


def test_reward_errors_of_a_function_past_the_52nd_are_seen() -> None:
    """The row-error bits are declared per 52 functions (a float64 holds 52 exactly): none is skipped."""
    from rl_guards.guards.reward_errors import RewardErrorGuard
    from rl_guards.rewards.row_errors import RowErrorLog, catch_row_errors

    def ok(completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    def fails_on_long(completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0 if len(c) < 5 else 1 / 0 for c in completions]

    log = RowErrorLog()
    funcs = [catch_row_errors(fails_on_long if i == 57 else ok, i, log) for i in range(60)]
    cfg = GuardsConfig.from_dict({"reward_errors": {"mode": "warn"}})
    ctx = RunContext(output_dir="unused", reward_funcs=funcs, reward_func_names=[f"f{i}" for i in range(60)])
    ctx.reward_error_log = log
    engine = Engine(cfg, [RewardErrorGuard(cfg)], ctx)
    engine.setup()
    assert engine.guard("reward_errors").FEATURES == ("raised", "raised1")
    completions = ["abc", "abcdefg"]
    scores = [fn(completions=completions) for fn in funcs]
    rows = _rows(1, [0.0, 0.0], [3, 7], ["a", "a"])
    rows.rewards = np.asarray([[np.nan if s[r] is None else s[r] for s in scores] for r in range(2)])
    rows.reward_names, rows.reward_weights = list(ctx.reward_func_names), [1.0] * 60
    rows.completions = completions
    with shows("'f57' raised on 1 of 2 rows"):
        engine.process(rows)
    assert [f.kind for f in engine.session.findings] == ["raised:f57"]


def test_a_dumps_token_rows_read_like_lists_and_pickle_as_lists() -> None:
    import pickle

    from rl_guards.engine.assembly import TokenRow

    rows = [[5, 6, 7], [], [2**31 - 1, 0]]
    lazy = unpack_ids(pack_ids(rows), lazy=True)
    assert all(isinstance(r, TokenRow) for r in lazy)
    assert lazy == rows and [list(r) for r in lazy] == rows and [len(r) for r in lazy] == [3, 0, 2]
    first = lazy[0]
    assert first[-1] == 7 and type(first[-1]) is int and first[1:] == [6, 7] and 6 in first and not lazy[1]
    assert repr(first) == "[5, 6, 7]" and first != [5, 6] and first == TokenRow(np.asarray([5, 6, 7], np.int32))
    assert pickle.loads(pickle.dumps(lazy)) == rows and type(pickle.loads(pickle.dumps(first))) is list


def test_a_dump_of_token_rows_writes_the_same_table_as_lists() -> None:
    from rl_guards.engine.assembly import TokenRow
    from rl_guards.rollouts.store import build_rollout_table

    engine, _ = _engine([LongRows])
    batch = engine.process(_rows(1, [1.0, 0.0], [3, 4], ["a", "a"]))
    assert batch is not None
    plain, _ = build_rollout_table([batch])
    batch.completion_ids = [TokenRow(np.asarray(r, dtype=np.int32)) for r in batch.completion_ids]
    batch.prompt_ids = [TokenRow(np.asarray(r, dtype=np.int32)) for r in batch.prompt_ids]
    lazy, _ = build_rollout_table([batch])
    assert lazy.equals(plain)


def test_a_number_column_reads_like_the_list_it_stands_for() -> None:
    import pickle

    from rl_guards.core.batch import NumberColumn

    floats = NumberColumn(np.array([0.5, -1.0, 2.0]))
    assert floats == [0.5, -1.0, 2.0] and floats[1] == -1.0 and type(floats[0]) is float
    assert floats[1:] == [-1.0, 2.0] and list(floats) == [0.5, -1.0, 2.0] and floats != [0.5, -1.0]
    ints = NumberColumn(np.array([3.0, 7.0]), "int")
    assert ints == [3, 7] and type(ints[-1]) is int
    flags = NumberColumn(np.array([0.0, 1.0, 2.0]), "bool")
    assert flags == [False, True, True] and flags[0] is False
    modes = NumberColumn(np.array([1.0, 0.0, -1.0]), "mode")
    assert modes == [True, False, None] and modes[2] is None and modes[0] is True
    assert np.asarray(modes).tolist() == [True, False, None]  # None stays None, as from the list
    back = pickle.loads(pickle.dumps(modes))
    assert back == [True, False, None] and type(back) is list
    held = np.asarray(floats)
    assert held is floats.array and np.array(floats, copy=True) is not floats.array
    with pytest.raises(ValueError, match="read-only"):
        held[0] = 9.0  # a reader cannot change the batch's column through the array it was handed
    assert floats[0] == 0.5
    assert RolloutBatch.column_array(None, ints).tolist() == [3.0, 7.0]  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        NumberColumn(np.zeros(1), "text")


def test_reward_rows_read_none_where_a_function_skipped() -> None:
    import pickle

    from rl_guards.core.batch import RewardRows

    rows = RewardRows(np.array([[1.0, np.nan], [0.0, 0.5]]))
    assert rows[0] == [1.0, None] and rows[-1] == [0.0, 0.5]
    assert rows == [[1.0, None], [0.0, 0.5]] and list(rows) == [[1.0, None], [0.0, 0.5]]
    assert pickle.loads(pickle.dumps(rows)) == [[1.0, None], [0.0, 0.5]]
    assert np.isnan(np.asarray(rows)[0, 1]) and len(rows) == 2
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(rows)[0, 0] = 5.0


@pytest.mark.parametrize("seed", range(40))
def test_unique_over_runs_matches_numpy_unique(seed: int) -> None:
    from rl_guards.engine.assembly import _unique_runs

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    values = np.repeat(rng.integers(-5, 6, size=n), rng.integers(1, 9, size=n)).astype(np.int64)
    unique, inverse = _unique_runs(values)
    want_unique, want_inverse = np.unique(values, return_inverse=True)
    assert unique.tolist() == want_unique.tolist()
    assert inverse.reshape(-1).tolist() == want_inverse.reshape(-1).tolist()


class CountingRanks:
    """Two ranks as fill_rows sees them: counts the gathers of dump rows (this rank's part comes back alone)."""

    several = True
    process_index = 0

    def __init__(self) -> None:
        self.gathers = 0

    def gather_objects_to_main(self, obj: Any) -> list[Any]:
        self.gathers += 1
        return [obj]


def test_fill_rows_gathers_each_new_batch_once_even_where_a_freed_one_lived() -> None:
    """fill_rows is collective: whether a batch's rows were already brought to the main process must not depend on
    where in memory it lives. A new batch at the address of a freed one is still new (keyed by id(), the second
    rank could skip the gather the first one ran: a hang, seen in a 2-process run)."""
    from rl_guards.core.task_labels import TaskLabels
    from rl_guards.engine.assembly import Assembly
    from rl_guards.guards.base import GuardSession

    config = GuardsConfig()
    ranks = CountingRanks()
    assembly = Assembly(config, [], GuardSession(), ranks, TaskLabels(config.tasks.max_tasks))

    def new_batch() -> RolloutBatch:
        return RolloutBatch(step=1, mode="train", num_generations=1, reward_names=["r"], reward_weights=[1.0],
                            rewards=[[0.0]], advantages=[0.0], tasks=["a"], completions=["x"],
                            completion_ids=[[1]], prompt_ids=[[2]], truncated=[False], thinking=[None])  # fmt: skip

    kept = new_batch()
    assembly.fill_rows([kept], everywhere=False)
    assembly.fill_rows([kept], everywhere=False)  # already on the main process: no second gather
    assert ranks.gathers == 1
    for n in range(2, 52):  # each batch dropped before the next is made: its memory is reused
        assembly.fill_rows([new_batch()], everywhere=False)
        assert ranks.gathers == n
