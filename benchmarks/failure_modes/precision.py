"""Precision next to recall: the healthy-run corpus (``rl_guards.testing.healthy.HEALTHY_CASES``), every guard at
its default config, each run counted silent when it has no warn/raise finding and nothing said at warning level.

    .venv/bin/python -m benchmarks.failure_modes.precision            # the table
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.failure_modes.harness import quiet


def run_precision(only: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per healthy case: silent or what was loud, with seconds."""
    from rl_guards.testing import tiny_setup
    from rl_guards.testing.healthy import HEALTHY_CASES, run_healthy

    tiny = tiny_setup()
    rows = []
    for case in HEALTHY_CASES:
        if only and case.name not in only:
            continue
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"healthy-{case.name}-") as tmp, quiet():
            try:
                outcome = run_healthy(case, tiny.model_dir, tiny.load_tokenizer(), Path(tmp) / "out")
                loud = outcome.findings + [f"warning: {w.splitlines()[0][:80]}" for w in outcome.warnings]
                crashed = None
            except Exception as exc:  # a crash is loud too
                loud, crashed = [], f"{type(exc).__name__}: {exc}"
        rows.append(
            {
                "name": case.name,
                "what": case.what,
                "silent": not loud and crashed is None,
                "loud": loud if crashed is None else [f"crashed {crashed}"],
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    return rows


def precision_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'healthy run':<24} | {'silent?':<7} | {'what was loud':<60} | seconds"
    lines = [head, "-" * len(head)]
    for r in rows:
        loud = ", ".join(sorted(set(r["loud"]))) or "-"
        lines.append(f"{r['name']:<24} | {'yes' if r['silent'] else 'NO':<7} | {loud[:60]:<60} | {r['seconds']:7.1f}")
    lines.append("-" * len(head))
    silent = sum(r["silent"] for r in rows)
    lines.append(f"healthy runs silent {silent}/{len(rows)}")
    return "\n".join(lines)


def main() -> int:
    rows = run_precision(sys.argv[1:] or None)
    print(precision_table(rows))
    return 0 if all(r["silent"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
