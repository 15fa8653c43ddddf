"""What ``rl-guards audit-rewards`` costs: a 200-row audit of a regex grader (target: under 5 s on this CPU), each
check's share, and the same audit with completions from a file and with several functions.

- ``command``: the whole ``rl-guards audit-rewards rewards.py:compute_score --dataset train.parquet --json`` in a
  fresh process (Python start, imports, reading the parquet, every check), wall clock, best and median of
  ``--repeats``.
- ``in process``: :func:`rl_guards.audit.audit_rewards` after the imports, with the seconds of each check
  (``load``, ``rows``, ``nondeterministic``, ``inverted``, ``probes``) from the report.

The grader is a verl-style ``compute_score`` (last ``\\boxed{}`` or last number of the answer after ``</think>``);
the dataset is verl's parquet shape (``data_source``, ``prompt`` messages, ``reward_model.ground_truth``,
``extra_info``), 200 rows; completions built from the reference answers (20 a row: 4,000 scored), 12 rows probed.

Run: ``.venv/bin/python benchmarks/bench_audit.py [--rows 200] [--repeats 3]`` (about 20 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GRADER = '''
import re
import time

_BOXED = re.compile(r"\\\\boxed\\{([^{}]*)\\}")
_NUMBER = re.compile(r"-?\\d+(?:\\.\\d+)?")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    answer = solution_str.split("</think>")[-1]
    boxed = _BOXED.findall(answer)
    pred = boxed[-1].strip() if boxed else (_NUMBER.findall(answer) or [None])[-1]
    return 1.0 if pred == str(ground_truth).strip() else 0.0


def judge_1ms(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.001)  # a judge's round trip
    return compute_score(data_source, solution_str, ground_truth, extra_info)


def length_bonus(data_source, solution_str, ground_truth, extra_info=None):
    return min(len(solution_str), 400) / 4000.0
'''


def write_inputs(folder: Path, rows: int) -> tuple[Path, Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i} + {3 * i + 7}? Put the answer in \\boxed{{}}."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(4 * i + 7)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(rows)
    ]
    data = folder / "train.parquet"
    pq.write_table(pa.Table.from_pylist(records), data)
    grader = folder / "rewards.py"
    grader.write_text(GRADER, encoding="utf-8")
    completions = folder / "completions.jsonl"
    with completions.open("w", encoding="utf-8") as handle:
        for r in records:
            q, a = r["prompt"][0]["content"], r["reward_model"]["ground_truth"]
            thinking = "Let me add the two numbers carefully, digit by digit. " * 8
            for answer in (a, str(int(a) + 1)):
                text = f"<think>\n{thinking}\n</think>\n\n\\boxed{{{answer}}}"
                handle.write(json.dumps({"prompt": q, "completion": text}))
                handle.write("\n")
    return data, grader, completions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from rl_guards.audit import audit_rewards

    with tempfile.TemporaryDirectory() as tmp:
        data, grader, completions = write_inputs(Path(tmp), args.rows)
        command = [sys.executable, "-m", "rl_guards.cli.main", "audit-rewards", f"{grader}:compute_score",
                   "--dataset", str(data), "--rows", str(args.rows), "--json"]
        walls = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
            walls.append(time.perf_counter() - t)
            if done.returncode != 0:
                print(done.stdout, done.stderr)
                return 1
        cases = [
            ("regex grader, completions built from the references", [f"{grader}:compute_score"], None, None),
            ("regex grader, completions from a jsonl (2 a row, 280 chars)", [f"{grader}:compute_score"],
             str(completions), None),
            ("regex grader + length bonus (weights 1, 0.5)", [f"{grader}:compute_score", f"{grader}:length_bonus"],
             None, [1.0, 0.5]),
            ("a judge of 1 ms per completion (one run)", [f"{grader}:judge_1ms"], None, None),
        ]
        lines = [
            f"### 200-row audit of a regex grader ({args.rows} rows, verl parquet, best of {args.repeats})",
            "",
            f"- command (fresh process, imports included): best {min(walls):.2f} s, median "
            f"{statistics.median(walls):.2f} s (target: under 5 s)",
            "",
            "| audit (in process) | completions scored | total s | load | rows | nondeterministic | inverted | probes "
            "| grader rows/s | p50 ms | p99 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, rewards, source, weights in cases:
            best = None
            for _ in range(1 if "judge" in label else args.repeats):
                report = audit_rewards(rewards, str(data), rows=args.rows, completions=source, weights=weights)
                if best is None or report.seconds < best.seconds:
                    best = report
            assert best is not None
            speed = best.functions[0].speed
            c = best.costs
            scored = int(speed["completions"])
            lines.append(
                f"| {label} | {scored} | {best.seconds:.2f} | {c['load']:.2f} | {c['rows']:.2f} | "
                f"{c['nondeterministic']:.2f} | {c['inverted']:.2f} | {c['probes']:.2f} | {speed['rows_per_s']:,.0f} "
                f"| {speed['p50_ms']:.3f} | {speed['p99_ms']:.3f} |"
            )
            verdicts = ", ".join(f"{f.name} {f.verdict}" for f in best.functions)
            lines.append(f"| ↳ verdicts: {verdicts} | | | | | | | | | | |")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
