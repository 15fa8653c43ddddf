"""Build times of the tiny offline fixture and the cost of a tiny GRPO step (prints seconds; no assertions).

Run: ``.venv/bin/python benchmarks/bench_tiny_fixture.py [--full]`` (``--full`` also times the 151k-rank vocabulary
and a GRPO step with it). Uses a fresh temp cache, one torch thread, and reports the load average: timings on a
shared 2-core machine swing widely with other work.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

start = time.perf_counter()
import torch  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from rl_guards.testing import (  # noqa: E402
    build_model,
    build_tokenizer,
    make_dataset,
    measure_turn_endings,
    tiny_grpo_config,
    tiny_setup,
    warm_up,
)
from rl_guards.testing.rewards import arith_correct, echo_match  # noqa: E402

IMPORT_S = time.perf_counter() - start


def timed(label: str, func, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = func(*args, **kwargs)
    print(f"{label:<44} {time.perf_counter() - start:7.2f} s", flush=True)
    return result


def grpo_steps(model: object, tokenizer: object, out: str, steps: int) -> float:
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[arith_correct, echo_match],
        args=tiny_grpo_config(out, max_steps=steps),
        train_dataset=make_dataset(thinking="mixed"),
    )
    trainer.train()
    times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    return sum(times) / len(times)


def main() -> None:
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch {torch.__version__}")
    print(f"{'import torch + trl + rl_guards.testing':<44} {IMPORT_S:7.2f} s")
    with tempfile.TemporaryDirectory() as cache:
        tokenizer = timed("build_tokenizer() (2048 ranks, cold)", build_tokenizer)
        timed("build_tokenizer() (2048 ranks, from memory)", build_tokenizer)
        model = timed("build_model()", build_model, tokenizer)
        timed("warm_up(steps=80)", warm_up, model, tokenizer)
        stats = timed("measure_turn_endings()", measure_turn_endings, model, tokenizer, num_samples=8)
        print("  " + ", ".join(f"{key}={value:.2f}" for key, value in stats.items()))
        setup = timed("tiny_setup() cold (build + warm + save)", tiny_setup, cache_dir=cache)
        timed("tiny_setup() again (memory)", tiny_setup, cache_dir=cache)
        step = grpo_steps(setup.model_dir, setup.tokenizer, os.path.join(cache, "grpo"), 5)
        print(f"{'GRPO step (2048 ranks, mean of 5 step_time)':<44} {step:7.2f} s")
        if "--full" in sys.argv:
            full = timed("build_tokenizer(None) (151k ranks, cold)", build_tokenizer, None, cache_dir=cache)
            timed("build_tokenizer(None) (from memory)", build_tokenizer, None)
            full_model = timed("build_model() (151k vocab)", build_model, full)
            step = grpo_steps(full_model, full, os.path.join(cache, "grpo-full"), 2)
            print(f"{'GRPO step (151k vocab, mean of 2 step_time)':<44} {step:7.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
