"""Two processes for a test: a worker script run once per rank (gloo over localhost), each printing one
``RESULT {json}`` line; the results by rank."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port free on localhost now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kill_processes_with(marker: str) -> list[int]:
    """SIGKILL every process whose command line holds ``marker`` (a run's unique output path): torchrun starts its
    workers in sessions of their own, so killing torchrun's process group leaves them running (and holding the
    test's pipes). The pids killed."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours to read
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed


def run_two_ranks(
    tmp_path: Path, worker: str, args: list[str] | None = None, extra_env: dict[str, str] | None = None
) -> dict[int, dict[str, Any]]:
    """Write ``worker`` to ``tmp_path`` and run it as ranks 0 and 1; each rank's ``RESULT`` object, with the rank's
    whole output (stdout and stderr) under ``"output"``. Fails on a rank that exits non-zero or takes over 120 s."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "OMP_NUM_THREADS": "1", **(extra_env or {})}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(script), *(args or [])], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    results: dict[int, dict[str, Any]] = {}
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, stdout[-3000:]
        line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
        result = json.loads(line[len("RESULT ") :])
        results[result["rank"]] = {**result, "output": stdout}
    return results
