"""Two processes (gloo): a mask bug on one rank makes every rank raise, with the same counts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _two_ranks import run_two_ranks

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    from rl_guards.config import GuardsConfig
    from rl_guards.errors import MaskingError
    from rl_guards.guards.base import GuardSession, RunContext, run_hook
    from rl_guards.guards.masks import GRPOMaskGuard

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    PAD, EOS = 0, 2
    out = {
        "prompt_ids": torch.tensor([[0, 10, 11], [12, 13, 14]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
        "completion_ids": torch.tensor([[40, EOS, PAD], [41, 42, EOS]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
    }
    if rank == 1:
        out["completion_mask"][0, 2] = 1  # loss on the padding after row 0's EOS, on this rank only
    guard = GRPOMaskGuard(GuardsConfig.from_dict({"masking": {"mode": "raise"}}))
    guard.setup(RunContext(eos_token_ids=[EOS], pad_token_id=PAD, world_size=2, process_index=rank))
    session = GuardSession()
    result = {"rank": rank}
    try:
        run_hook(guard, "check_tensors", session, 3, out)
        result["raised"] = False
    except MaskingError as exc:
        result["raised"] = True
        result["message"] = str(exc)
    result["violating_rows"] = session.metrics.get("rl_guards/masking/violating_rows")
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(result))
    """
)


@pytest.mark.slow
def test_all_ranks_raise_together(tmp_path: Path) -> None:
    results = run_two_ranks(tmp_path, WORKER)
    assert results[0]["raised"] and results[1]["raised"]
    assert results[0]["violating_rows"] == results[1]["violating_rows"] == [1.0]
    for r in (0, 1):
        assert results[r]["message"].startswith("[rl_guards/masking] post_eos: 1 of 4 rows")
    assert "rows are on other ranks; rank 0 has none" in results[0]["message"]
    assert "row 0: " in results[1]["message"]
