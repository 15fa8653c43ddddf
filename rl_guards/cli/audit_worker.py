"""The audit in a process of its own: the user's reward code can print, start process pools or crash without taking
the command's output or exit code with it.

:func:`run_isolated` (the command's side) starts ``python -m rl_guards.cli.audit_worker ARGS``, with the
worker's standard output sent to standard error (whatever the user's code prints, and its pools' workers, never
reaches ``--json``) and its standard error shown as it comes (progress bars); the worker writes its result (exit code,
output) and, as each check starts, its phase to files the command reads. A worker that ends without a result (a
signal, a hard crash, ``os._exit`` in the user's code, a pool that took it down) is exit 2 with that cause and the
check it was in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

RESULT_ENV = "RL_GUARDS_AUDIT_RESULT"


def run_isolated(argv: list[str]) -> int:
    """Run ``rl-guards ARGV`` (an ``audit-rewards`` command) in a worker; print its output; its exit code."""
    with tempfile.TemporaryDirectory(prefix="rl_guards_audit_") as folder:
        result = Path(folder) / "result.json"
        phase = Path(folder) / "phase"
        env = {**os.environ, RESULT_ENV: str(result)}
        try:
            code = subprocess.call(
                [sys.executable, "-m", "rl_guards.cli.audit_worker", *argv],
                stdout=sys.stderr.fileno(),  # the user's prints, and any process they start, to stderr
                env=env,
            )
        except KeyboardInterrupt:
            return 130
        if result.is_file():
            try:
                data = json.loads(result.read_text(encoding="utf-8"))
                if data.get("output"):
                    print(data["output"])
                return int(data["exit_code"])
            except (ValueError, KeyError, TypeError, OSError) as exc:
                why = f"its result file could not be read ({type(exc).__name__}: {exc})"
        else:
            why = _cause(code)
        where = phase.read_text(encoding="utf-8").strip() if phase.is_file() else "start-up"
        print(
            f"rl-guards audit-rewards: could not check: the reward code ended the audit's process ({why}) during "
            f"{where}. Run the function on one of the dataset's rows by hand to see the failure; a process pool it "
            "starts must be created under `if __name__ == '__main__':` and be picklable.",
            file=sys.stderr,
        )
        return 2


def _cause(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def main() -> int:
    """The worker: the audit in this process, its result and phase written where the command reads them."""
    from rl_guards.cli.audit import audit_here
    from rl_guards.cli.main import build_parser

    result = Path(os.environ[RESULT_ENV])
    phase = result.with_name("phase")

    def status(name: str) -> None:
        try:
            phase.write_text(f"the {name} check", encoding="utf-8")
        except OSError:
            pass

    args = build_parser().parse_args(sys.argv[1:])
    code, output = audit_here(args, status)
    tmp = result.with_suffix(".tmp")
    tmp.write_text(json.dumps({"exit_code": code, "output": output}), encoding="utf-8")
    os.replace(tmp, result)
    return code


if __name__ == "__main__":
    sys.exit(main())
