"""Two processes (gloo): lockstep sections. An exception on one rank anywhere in a section (before a collective, in
a nested section, before a collective of torch's own inside ``gated_torch``), or ranks that reach different
collectives, leave the section on both ranks at the same point, each knowing the failing rank's error; collectives
after it still pair up."""

from __future__ import annotations

import textwrap
from pathlib import Path

from _two_ranks import run_two_ranks

WORKER = textwrap.dedent(
    """
    import json, os, time
    import torch
    import torch.distributed as dist
    from rl_guards.tensors import collectives
    from rl_guards.tensors.lockstep import Section, gated_torch

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    out = {"rank": rank}

    def synced():  # a plain collective after each case: it pairs up only if both ranks left the case together
        return collectives.all_reduce_ints([rank + 1], op="sum") == [3]

    # 1. rank 1 raises before the section's second collective
    with Section("one") as s:
        collectives.all_reduce_ints([1])
        if rank == 1:
            raise ValueError("boom on rank 1")
        collectives.all_gather_objects("x")
    out["one"] = [s.failure.rank, s.failure.message.split(" (at")[0], s.failure.error_type, synced()]

    # 2. rank 1 raises in the outer section while rank 0 is inside an inner one
    reached, inner = [], None
    with Section("outer") as outer:
        if rank == 1:
            raise KeyError("outer")
        with Section("inner") as inner:
            collectives.all_reduce_ints([1, 2])
            reached.append("inner collective")
    out["nested"] = [outer.failure.rank, inner and inner.failure, reached, synced()]

    # 3. an inner section's failure is its own: the outer one goes on
    with Section("outer") as outer:
        with Section("inner") as inner:
            if rank == 0:
                raise RuntimeError("inner on rank 0")
            collectives.all_reduce_ints([1])
        collectives.all_reduce_ints([1])
    out["inner_only"] = [inner.failure.rank, outer.failure, synced()]

    # 4. ranks that reach different collectives (a decision that differed): both leave, no rank raised
    with Section("diverge") as s:
        if rank == 0:
            collectives.all_gather_objects("only rank 0 gathers")
    out["diverge"] = [s.failure.rank, "different collectives" in s.failure.message, synced()]

    # 5. torch's own collectives inside gated_torch: rank 1 raises before an all_gather rank 0 starts
    with Section("torch") as s, gated_torch():
        if rank == 1:
            raise OSError("before torch's gather")
        parts = [torch.zeros(1) for _ in range(2)]
        dist.all_gather(parts, torch.ones(1))
    out["torch"] = [s.failure.rank, s.failure.error_type, dist.all_gather is not None and synced()]

    # 6. a passthrough error raised on every rank leaves without an agreement
    class Agreed(Exception):
        pass

    try:
        with Section("stop", passthrough=(Agreed,)):
            collectives.all_reduce_ints([1])
            raise Agreed()
    except Agreed:
        out["passthrough"] = synced()

    # 7. what a gate costs: 200 sections of one gated collective, against the collective alone
    start = time.perf_counter()
    for _ in range(200):
        collectives.all_reduce_ints([1])
    alone = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(200):
        with Section("cost"):
            collectives.all_reduce_ints([1])
    out["cost_ms"] = [1000 * alone / 200, 1000 * time.perf_counter() / 200 - 1000 * start / 200]
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()
    """
)


def test_a_failure_anywhere_in_a_section_leaves_it_on_every_rank(tmp_path: Path) -> None:
    results = run_two_ranks(tmp_path, WORKER)
    for rank in (0, 1):
        got = results[rank]
        assert got["one"] == [1, "ValueError: boom on rank 1", "ValueError", True], got
        assert got["nested"][0] == 1 and got["nested"][1] is None and got["nested"][3], got
        assert got["nested"][2] == [], got  # rank 0 was stopped at the inner collective's gate
        assert got["inner_only"] == [0, None, True], got
        assert got["diverge"] == [-1, True, True], got
        assert got["torch"] == [1, "OSError", True], got
        assert got["passthrough"] is True, got
    print("gated all_reduce_ints vs alone (ms):", results[0]["cost_ms"])
