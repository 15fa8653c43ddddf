"""Two processes (gloo): the engine decides a train batch on its own thread, on a group of its own, while the
training thread goes on (and runs collectives of its own on the default group); the outcome arrives at ``join``:
metrics to the sink then, a stop raised on every rank together with the failing batch logged first. An eval batch
is decided in the call."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _two_ranks import run_two_ranks

WORKER = textwrap.dedent(
    """
    import atexit, json, os, sys, threading
    from typing import ClassVar
    import numpy as np
    import torch
    import torch.distributed as dist
    from rl_guards.config import GuardsConfig
    from rl_guards.engine.assembly import LocalRows
    from rl_guards.engine.driver import Engine
    from rl_guards.engine.ranks import Ranks
    from rl_guards.errors import GuardError
    from rl_guards.guards.base import Guard, RunContext

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)

    class LongRows(Guard):
        name: ClassVar[str] = "long_rows"
        config_field: ClassVar[str] = "truncation"
        FEATURES: ClassVar[tuple[str, ...]] = ("len",)

        def __init__(self, config):
            super().__init__(config)
            self.threads = []

        def scan(self, batch):
            return {"len": [float(len(batch.completion_ids[i])) for i in batch.held_rows]}

        def on_batch(self, batch, report):
            self.threads.append(threading.current_thread().name)
            lengths = self.features(batch)["len"]
            report.metric("longest", max(lengths))
            long = [i for i, n in enumerate(lengths) if n > 10]
            if long:
                report.violation("too_long", lambda: f"rows {long} are longer than 10", GuardError, rows=long)

    def rows(step, lengths, mode="train"):
        return LocalRows(
            step=step, mode=mode, num_generations=2, reward_names=["r"], reward_weights=[1.0],
            rewards=np.zeros((4, 1)), advantages=[0.0, 0.0], tasks=["a", "a"],
            completions=["x" * k for k in lengths], completion_ids=[list(range(1, k + 1)) for k in lengths],
            prompt_ids=[[100, 101]] * 2, truncated=[False] * 2, thinking=[None] * 2, prompt_opened=[False] * 2,
            columns={},
        )

    if os.environ.get("NO_OWN_GROUP"):  # a machine where rl_guards cannot make a group of its own
        from rl_guards.tensors import collectives

        def no_group():
            raise RuntimeError("no gloo here")

        collectives.own_group = no_group
    config = GuardsConfig.from_dict({"truncation": {"mode": "raise"}})
    guard = LongRows(config)
    ctx = RunContext(output_dir=sys.argv[1], world_size=2, process_index=rank, is_main_process=rank == 0)
    engine = Engine(config, [guard], ctx, ranks=Ranks(2, rank, rank == 0))
    sunk, logged = [], []
    engine.metrics_sink = lambda mode, metrics: sunk.append((mode, sorted(metrics)))
    engine.log_now = logged.append
    engine.setup()
    out = {"rank": rank, "background": engine.background, "own_group": engine.ranks.group is not None}

    engine.submit(rows(1, [3, 4]))
    out["sunk_before_join"] = len(sunk)
    grads = torch.ones(3) * (rank + 1)
    dist.all_reduce(grads)  # the trainer's own collective on the default group, while the batch is decided
    out["grads"] = grads.tolist()
    engine.join()
    out["sunk_after_join"] = list(sunk)

    engine.submit(rows(1, [3, 4], mode="eval"))  # an eval batch: decided in the call, its metrics out at once
    out["eval_sunk"] = [mode for mode, _ in sunk[1:]]
    del sunk[1:]

    out["raised_at"] = "submit"
    try:
        engine.submit(rows(2, [3, 12] if rank == 1 else [3, 4]))  # a long row on rank 1 only
        out["raised_at"] = "step_end"
        engine.step_end(2, final=False)
        out["stop"] = None
    except GuardError as exc:
        out["stop"] = str(exc)
    out["logged"] = logged
    out["sunk_at_stop"] = sunk[1:]
    out["threads"] = guard.threads
    dist.barrier()
    group = engine.ranks.group
    atexit._run_exitfuncs()  # what the interpreter runs at exit, before its teardown
    out["own_group_left"] = group is not None and group in dist.distributed_c10d._world.pg_map
    dist.destroy_process_group()
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.slow
def test_a_batch_decided_in_the_background_stops_every_rank_at_the_join(tmp_path: Path) -> None:
    results = run_two_ranks(tmp_path, WORKER, [str(tmp_path / "out")])
    for rank, r in results.items():
        assert r["background"] and r["own_group"], r
        assert not r["own_group_left"]  # destroyed at exit, before the interpreter's teardown
        assert r["grads"] == [3.0, 3.0, 3.0]  # the default group's collective went through beside the engine's
        assert r["sunk_before_join"] == 0  # metrics wait for the join: they belong to the step's log
        assert r["sunk_after_join"] == [["train", ["rl_guards/long_rows/longest"]]]
        assert r["eval_sunk"] == ["eval"]
        assert r["threads"] == ["rl_guards-batch", "MainThread", "rl_guards-batch"]
        assert r["logged"] == [2]  # the failing batch's metrics logged at its own step before the stop
        assert r["sunk_at_stop"] == [["train", ["rl_guards/long_rows/longest", "rl_guards/long_rows/violations"]]]
        assert r["raised_at"] == "step_end"
        assert r["stop"] is not None and "rows [3] are longer than 10" in r["stop"], (rank, r["stop"])
    assert results[0]["stop"] == results[1]["stop"]  # every rank decides from every rank's numbers


@pytest.mark.slow
def test_without_a_group_of_its_own_the_engine_decides_in_the_call_and_says_so(tmp_path: Path) -> None:
    results = run_two_ranks(tmp_path, WORKER, [str(tmp_path / "out")], {"NO_OWN_GROUP": "1"})
    for rank, r in results.items():
        assert not r["background"] and not r["own_group"], r
        assert "could not make a process group of its own on rank 0 (RuntimeError: no gloo here" in r["output"]
        assert r["sunk_before_join"] == 1  # decided in the call: its metrics are out at once
        assert r["grads"] == [3.0, 3.0, 3.0]
        assert r["threads"] == ["MainThread", "MainThread", "MainThread"]
        assert r["raised_at"] == "submit" and r["logged"] == [2]
        assert r["stop"] is not None and "rows [3] are longer than 10" in r["stop"], (rank, r["stop"])
