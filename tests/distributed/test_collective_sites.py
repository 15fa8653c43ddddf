"""Two processes (torchrun, gloo, CPU): an exception on one rank at any collective rl_guards starts, or at any
collective of TRL's own that rl_guards' probe generation reaches, and the job still finishes (or stops cleanly,
every rank with the same GuardError) within its configured timeout, and the main process's summary names the rank
and its error.

The sites, found with ``grep -rn "all_gather\\|all_reduce\\|broadcast\\|gather_object\\|barrier" rl_guards/`` and by
reading the calls that reach collectives (``multiproc/guarded_run.py``, ``SITES`` and ``PROBE_SITES``):

- rl_guards' own (``rl_guards/tensors/collectives.py``, through ``Ranks``): the engine's process group (``own_group``,
  at install), a batch's feature gather (``Assembly.finish``), the task-name exchange (``Assembly._task_names_of``),
  the stop decision (``Agreement.decide``), the stopping rank's message (``Agreement._stop_error``), rows to every
  rank and rows to the main process (``Assembly.fill_rows``), the drift probe's numbers (``DriftGuard._probe``);
- the drift probe's generation (``probe_generate``): rl_guards' code before TRL's path, TRL's ``accelerator.gather``
  (lengths, truncation, token counts), ``gather`` (rewards), ``gather_object`` (the completions table), and
  rl_guards' code after it.

Not here: the mask check's own ``all_reduce`` (``GRPOMaskGuard._check_now``) runs only when the guard is called on its
own; under the engine its bits travel in the feature gather. The lockstep agreements themselves are the mechanism
(``tests/distributed/test_lockstep.py``).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_hook_multiproc import GUARDS_CONFIG, _launch

DDP_TIMEOUT = 120  # the job's process-group timeout (seconds): a rank left in a collective would wait this long
CASES = {  # site -> extra environment of the run
    "own_group": {},
    "feature_gather": {},
    "task_names": {},
    "decide": {},
    "stop_message": {"STOP_AT": "2"},
    "rows_everywhere": {"SHOW_AT": "2"},
    "rows_to_main": {},
    "probe_numbers": {},
    "probe_setup": {},
    "trl_gather": {},
    "trl_rewards": {},
    "trl_logs": {},
    "probe_results": {},
}
TIMES: dict[str, float] = {}


@pytest.mark.slow
@pytest.mark.parametrize("site", list(CASES))
def test_an_exception_at_a_collective_site_on_one_rank_stops_no_rank(site: str, tiny: Any, tmp_path: Path) -> None:
    out = tmp_path / site
    out.mkdir()
    env = {"INJECT": site, "DDP_TIMEOUT": str(DDP_TIMEOUT), **CASES[site]}
    config = {**GUARDS_CONFIG, "drift": {"mode": "warn"}}
    start = time.monotonic()
    proc = _launch(out, nproc=2, per_device_batch=6, cache=os.environ["RL_GUARDS_CACHE"], extra_env=env,
                   guards_config=config, timeout=2 * DDP_TIMEOUT + 60)  # fmt: skip
    took = TIMES[site] = time.monotonic() - start
    text = proc.stdout + proc.stderr
    (tmp_path / "output.txt").write_text(text)
    print(f"{site}: {took:.1f} s, exit {proc.returncode}")
    assert took < DDP_TIMEOUT, f"{site}: {took:.0f} s: a rank waited in a collective\n{text[-3000:]}"
    assert "Connection closed by peer" not in text and "timed out" not in text.lower(), text[-3000:]
    # rank 0 holds rank 1's error: a finding whose message names the rank, its kind in the summary
    findings = json.loads((out / "findings_rank0.json").read_text())
    said = [f for f in findings if re.search(rf"on rank 1\b.*injected at {site} on rank 1", f[2])]
    assert said, findings
    assert f"{said[0][0]}/{said[0][1]}" in (out / "summary_rank0.txt").read_text()
    if site == "stop_message":  # the stop agreed before the failure still stops every rank, with a GuardError
        assert proc.returncode != 0
        for rank in (0, 1):
            assert re.search(rf"\[rank{rank}\]: rl_guards\.errors\.GuardError", text), text[-3000:]
        return
    assert proc.returncode == 0, text[-3000:]
    history = (out / "log_history.json").read_text()
    assert history.count('"loss"') == 3, history  # training went on
    assert json.loads((out / "findings_rank1.json").read_text()) == findings  # every rank knows the same
