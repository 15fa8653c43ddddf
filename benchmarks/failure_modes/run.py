"""Failure-mode benchmark: each failure mode as a small real GRPO/SFT run with the bug planted, and the same run clean.

For every case of :data:`benchmarks.failure_modes.cases.CASES`: is the planted bug caught (which guard/kind, at
which step), and does the clean run raise any false alarm (a finding of severity blocking or warning, a guard
raise, or a warning the rl_guards logger said; info findings are listed apart). Tiny offline Qwen3 model on CPU, at
most 4 steps per run::

    python benchmarks/failure_modes/run.py [--only NAME[,NAME]] [--out benchmarks/failure_modes/results.json]

``run_all(only=None) -> list[dict]`` returns the rows (``benchmarks/run_all.py`` builds RESULTS.md from them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: make `benchmarks.failure_modes` importable
    sys.path.insert(0, str(ROOT))

from benchmarks.failure_modes.cases import CASES, Case  # noqa: E402
from benchmarks.failure_modes.harness import (  # noqa: E402
    SEED,
    GrpoSpec,
    Hit,
    Outcome,
    length_probe_file,
    quiet,
    run_grpo,
    run_sft,
)
from benchmarks.failure_modes.precision import precision_table, run_precision  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "failure_modes" / "results.json"
CAUGHT_W = 68  # width of the "caught" column of the table


def run_spec(case: Case, planted: bool, workdir: Path) -> tuple[Outcome, float]:
    start = time.perf_counter()
    with quiet():
        spec = case.build(planted, workdir)
    outcome = run_grpo(spec, workdir) if isinstance(spec, GrpoSpec) else run_sft(spec, workdir)
    return outcome, time.perf_counter() - start


def _hit_dict(h: Hit) -> dict[str, Any]:
    return {
        "guard": h.guard,
        "kind": h.kind,
        "severity": h.severity,
        "step": h.step,
        "source": h.source,
        "message": h.message[:400],
    }


def stated_in(case: Case, outcome: Outcome) -> bool:
    """Whether the run's preflight report states every choice the case looks for."""
    return all(
        any(h.kind == code and text.lower() in h.message.lower() for h in outcome.preflight)
        for code, text in case.stated
    )


def detection(case: Case, outcome: Outcome) -> tuple[bool, list[Hit]]:
    """Whether the planted run was caught, and the hits that caught it (earliest first)."""
    if case.stated:
        found = []
        for code, text in case.stated:
            match = [h for h in outcome.preflight if h.kind == code and text.lower() in h.message.lower()]
            if not match:
                return False, found
            found.append(match[0])
        return True, found
    hits = [h for h in outcome.hits if (h.guard, h.kind) in case.expect]
    hits.sort(key=lambda h: h.step if h.step is not None else 10**9)
    return bool(hits), hits


def false_alarms(outcome: Outcome) -> list[str]:
    """Everything on a clean run that asks for attention: error/warning findings, a guard raise, a crash."""
    out = [f"{h.label()} ({h.severity}) @ {h.step}" for h in outcome.alarms()]
    if outcome.raised and not any(h.severity == "blocking" for h in outcome.alarms()):
        out.append(f"raised {outcome.raised}")
    if outcome.crashed:
        out.append(f"crashed {outcome.crashed}")
    return out


def run_case(case: Case, workdir: Path | None = None) -> dict[str, Any]:
    """Both runs of one case; the row of the results table."""
    with tempfile.TemporaryDirectory(prefix=f"fm-{case.name}-", dir=workdir) as tmp:
        planted, t_planted = run_spec(case, True, Path(tmp))
        clean, t_clean = run_spec(case, False, Path(tmp))
    caught, by = detection(case, planted)
    alarms = false_alarms(clean)
    first = by[0] if by else None
    return {
        "name": case.name,
        "failure": case.failure,
        "plant": case.plant,
        "note": case.note,
        "kind": "sft" if "sft" in case.tags else ("preflight" if "preflight" in case.tags else "grpo"),
        "caught": caught,
        "caught_by": [f"{h.label()} ({h.severity})" for h in by],
        "caught_step": first.step if first else None,
        "planted": {
            "steps": planted.steps,
            "raised": planted.raised,
            "crashed": planted.crashed,
            "findings": [_hit_dict(h) for h in planted.hits],
            "preflight": [_hit_dict(h) for h in planted.preflight if h.kind in {c for c, _ in case.stated}],
            "seconds": round(t_planted, 2),
        },
        "clean": {
            "steps": clean.steps,
            "raised": clean.raised,
            "crashed": clean.crashed,
            "false_alarms": alarms,
            "info": sorted({h.label() for h in clean.infos()}),
            "preflight_warnings": sorted({h.kind for h in clean.preflight if h.severity == "warning"}),
            "findings": [_hit_dict(h) for h in clean.hits],
            "seconds": round(t_clean, 2),
        },
        # For choices: does the clean run's report say the same thing (then the statement is not specific)?
        "clean_states_it_too": stated_in(case, clean) if case.stated else None,
        "false_alarm_count": len(alarms),
        "seconds": round(t_planted + t_clean, 2),
    }


def select(only: str | list[str] | None) -> list[Case]:
    if only is None:
        return list(CASES)
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; available: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def warm_up() -> float:
    """One-time costs (imports, the tiny fixture, the length probe), kept out of the first case's seconds."""
    start = time.perf_counter()
    with quiet():
        import trl  # noqa: F401
        from trl import GRPOTrainer, SFTTrainer  # noqa: F401

        length_probe_file()
    return time.perf_counter() - start


def run_all(only: str | list[str] | None = None, *, seed: int = 0, progress: bool = False) -> list[dict[str, Any]]:
    """Run every case (or the ``only`` ones, names or a comma-separated string); one row per case.

    ``seed`` is the trainers' seed (sampling and data order); the results table was measured with 0.
    """
    SEED["value"] = int(seed)
    warm_up()
    rows = []
    for case in select(only):
        row = run_case(case)
        rows.append(row)
        if progress:
            print(format_row(row), flush=True)
    return rows


def caught_text(row: dict[str, Any]) -> str:
    if not row["caught"]:
        planted = row["planted"]
        extra = planted["crashed"] or planted["raised"] or "nothing reported"
        return f"NO ({extra})"
    step = row["caught_step"]
    return f"yes: {row['caught_by'][0]} @ step {step}"


def format_row(row: dict[str, Any]) -> str:
    alarms = ", ".join(row["clean"]["false_alarms"]) or "0"
    return f"{row['name']:<26} | {caught_text(row):<{CAUGHT_W}} | {alarms:<18} | {row['seconds']:7.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    caught = "planted caught? guard/kind @ step"
    head = f"{'failure mode':<26} | {caught:<{CAUGHT_W}} | {'clean false alarms':<18} | seconds"
    lines = [head, "-" * len(head)]
    lines += [format_row(r) for r in rows]
    n_caught = sum(r["caught"] for r in rows)
    alarms = sum(r["false_alarm_count"] for r in rows)
    total = sum(r["seconds"] for r in rows)
    lines.append("-" * len(head))
    lines.append(f"caught {n_caught}/{len(rows)}; clean false alarms {alarms}; {total:.1f} s of runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--seed", type=int, default=0, help="trainer seed of every run (default 0)")
    args = parser.parse_args(argv)
    if args.list:
        for case in CASES:
            print(f"{case.name:<26} {case.failure}")
        return 0
    start = time.perf_counter()
    rows = run_all(args.only, seed=args.seed)
    healthy = [] if args.only else run_precision()
    elapsed = time.perf_counter() - start
    print(table(rows))
    if healthy:
        print("\nprecision (healthy runs, default config):\n" + precision_table(healthy))
    print(f"wall time {elapsed:.1f} s on {os.cpu_count()} cores (imports, fixture and length probe included)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "wall_seconds": round(elapsed, 1),
        "cpu_count": os.cpu_count(),
        "seed": args.seed,
        "rows": rows,
        "healthy": healthy,
    }
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    ok = all(r["caught"] for r in rows) and not any(r["false_alarm_count"] for r in rows)
    return 0 if ok and all(r["silent"] for r in healthy) else 1


if __name__ == "__main__":
    sys.exit(main())
