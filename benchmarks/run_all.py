"""Run every benchmark in ``benchmarks/``, write ``benchmarks/RESULTS.md``: one command, 5-10 minutes on 2 cores.

Each ``benchmarks/*.py`` script runs in its own process, one after another (never side by side: they time
things), with the arguments of :data:`PRESETS` (a script not listed runs with none), under a time limit.
Then the failure-mode benchmark (``benchmarks/failure_modes/run.py``, ``run_all() -> list[dict]``) runs in this
process. ``RESULTS.md`` gets the machine (CPU, cores, memory, load, Python, torch / trl / transformers), the date,
the git commit, a summary of what ran and how long, and each benchmark's own tables, in the order they ran::

    .venv/bin/python benchmarks/run_all.py                      # everything -> benchmarks/RESULTS.md
    .venv/bin/python benchmarks/run_all.py --only bench_scanner,failure_modes --out /tmp/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Arguments per script (none = its defaults); together about 5 minutes on an idle 2-core machine, under 10 loaded.
PRESETS: dict[str, list[str]] = {
    "bench_overhead.py": [],  # 100 on/off step pairs, 64..4,096 rows x 256..8,192 tokens (--quick: smaller)
    "bench_scanner.py": ["50"],  # megabytes of corpus
    "bench_rollout_dump.py": ["1024", "512", "3"],  # rows, mean tokens, repeats
    "bench_task_guards.py": ["512", "1024"],  # rows, tokens per completion
    "bench_masks.py": ["3"],  # repeats
    "bench_tiny_fixture.py": [],
    "bench_scale.py": [],  # issue 12's figures side by side (real 2-process gloo runs)
    "bench_checks_cost.py": [],  # drift probe generations and reward-probe calls, as shares of a run
    "bench_tinker.py": ["--pairs", "1", "--iterations", "3"],  # a cookbook loop, 64 x 256, plain vs guarded (~1.5 min)
}
# Scripts never run here, and why (RESULTS.md lists them).
NOT_RUN: dict[str, str] = {
    "run_all.py": "this script",
    "gpu_overhead.py": "needs a CUDA GPU and a local model: run it by hand on one (see its docstring)",
}
FAILURE_MODES = "failure_modes"


@dataclass
class Result:
    name: str
    command: str
    seconds: float
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str


def machine_info() -> dict[str, str]:
    """What the numbers were measured on."""
    info: dict[str, str] = {}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = f"{cpu}, {os.cpu_count()} cores"
    try:
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
        info["memory"] = f"{mem_kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    info["os"] = platform.platform()
    info["python"] = platform.python_version()
    versions = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, trl, transformers; "
            "print(f'torch {torch.__version__} (CUDA available: {torch.cuda.is_available()}), trl {trl.__version__}, "
            "transformers {transformers.__version__}')",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    info["packages"] = versions.stdout.strip() or versions.stderr.strip()[-300:]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(  # RESULTS.md itself does not count
        ["git", "status", "--porcelain", "--", ".", ":!benchmarks/RESULTS.md"], capture_output=True, text=True, cwd=ROOT
    )
    if commit.returncode == 0:
        info["commit"] = commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    return info


def discover(only: set[str] | None) -> tuple[list[Path], list[tuple[str, str]]]:
    """The scripts to run (sorted, overhead first) and the ones skipped with the reason."""
    scripts, skipped = [], []
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        if only is not None and path.stem not in only:
            continue
        if path.name in NOT_RUN:
            if path.name != "run_all.py":
                skipped.append((path.name, NOT_RUN[path.name]))
            continue
        scripts.append(path)
    scripts.sort(key=lambda p: (p.name != "bench_overhead.py", p.name))
    return scripts, skipped


def run_script(path: Path, timeout: float) -> Result:
    args = PRESETS.get(path.name, [])
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled"),
    }
    command = " ".join(["python", str(path.relative_to(ROOT)), *args])
    print(f"running {command} ...", flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(path), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
        )
        code: int | None = proc.returncode
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.perf_counter() - start
    status = "timed out" if code is None else f"exit {code}"
    print(f"  {status} after {seconds:.0f} s", flush=True)
    return Result(path.stem, command, seconds, code, out, err)


def run_failure_modes() -> Result | None:
    """``benchmarks/failure_modes/run.py``'s ``run_all()``, in this process, as a table."""
    if not (HERE / FAILURE_MODES / "run.py").is_file():
        return None
    print("running benchmarks/failure_modes/run.py run_all() ...", flush=True)
    start = time.perf_counter()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.failure_modes import run as failure_modes
        from benchmarks.failure_modes.precision import precision_table, run_precision

        rows = failure_modes.run_all()
        text = failure_modes.table(rows) if hasattr(failure_modes, "table") else generic_table(rows)
        text += "\n\nprecision (healthy runs, default config):\n" + precision_table(run_precision())
        code: int | None = 0
        err = ""
    except Exception:
        text, code, err = "", 1, traceback.format_exc()
    seconds = time.perf_counter() - start
    print(f"  {'exit 0' if code == 0 else 'failed'} after {seconds:.0f} s", flush=True)
    return Result(FAILURE_MODES, "benchmarks.failure_modes.run.run_all()", seconds, code, text, err)


def readable(stdout: str) -> str:
    """A script's output without the Trainer's per-step log dicts (``{'loss': ...}``), which say nothing here."""
    lines = stdout.rstrip().splitlines()
    kept = [line for line in lines if not (line.startswith("{'") and line.endswith("}"))]
    if len(kept) < len(lines):
        kept.append(f"({len(lines) - len(kept)} Trainer log lines left out)")
    return "\n".join(kept)


def generic_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of flat dict rows (nested values shown as text)."""
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(k, "")).replace("|", "\\|") for k in keys) + " |")
    return "\n".join(lines)


def render(results: list[Result], skipped: list[tuple[str, str]], info: dict[str, str], started: str) -> str:
    total = sum(r.seconds for r in results)
    lines = [
        "# rl_guards benchmark results",
        "",
        f"Generated by `python benchmarks/run_all.py` on {started}; {total / 60:.1f} minutes in all.",
        "Timings come from one run on the machine below; on a shared machine they are noisy (see each table's "
        "spread). Rerun the command to refresh this file.",
        "",
        "## Machine",
        "",
        *[f"- {key}: {value}" for key, value in info.items()],
        "",
        "## What ran",
        "",
        "| benchmark | command | seconds | status |",
        "|---|---|---:|---|",
    ]
    for r in results:
        status = "timed out" if r.returncode is None else ("ok" if r.returncode == 0 else f"exit {r.returncode}")
        lines.append(f"| {r.name} | `{r.command}` | {r.seconds:.0f} | {status} |")
    for name, why in skipped:
        lines.append(f"| {Path(name).stem} | | | not run: {why} |")
    for r in results:
        lines += ["", f"## {r.name}", "", f"`{r.command}`", ""]
        body = readable(r.stdout)
        if "|---" in body:  # the script prints markdown itself: its headings go one level down
            lines += [("#" + line if line.startswith("#") else line) for line in body.splitlines()]
        elif body:
            lines += ["```text", body, "```"]
        if r.returncode != 0:
            tail = "\n".join(r.stderr.rstrip().splitlines()[-25:])
            what = "timed out" if r.returncode is None else f"exit {r.returncode}"
            lines += ["", f"**{what}**; end of its stderr:", "", "```text", tail, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated names (script stems, or failure_modes)")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"), help="markdown file to write")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per script (default 300)")
    args = parser.parse_args(argv)
    only = {n.strip().removesuffix(".py") for n in args.only.split(",")} if args.only else None

    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = machine_info()
    info["load average at start"] = f"{os.getloadavg()[0]:.1f}"
    scripts, skipped = discover(only)
    results = [run_script(path, args.timeout) for path in scripts]
    if only is None or FAILURE_MODES in only:
        failure = run_failure_modes()
        if failure is not None:
            results.append(failure)
    info["load average at end"] = f"{os.getloadavg()[0]:.1f}"
    out = Path(args.out)
    out.write_text(render(results, skipped, info, started), encoding="utf-8")
    print(f"wrote {out} ({sum(r.seconds for r in results) / 60:.1f} minutes of benchmarks)")
    return 0 if all(r.returncode == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
