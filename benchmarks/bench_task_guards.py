"""Per-batch cost of the task guards on a large synthetic batch (prints seconds; no assertions).

Run: ``.venv/bin/python benchmarks/bench_task_guards.py [rows] [tokens_per_completion]``
"""

from __future__ import annotations

import random
import sys
import time

from _timing import best_ms

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.testing import build_tokenizer


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    rng = random.Random(0)
    tokenizer = build_tokenizer()
    ids = [[rng.randrange(0, 2048) for _ in range(rng.randint(tokens // 4, tokens))] for _ in range(rows)]
    t = time.perf_counter()
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    decode_s = time.perf_counter() - t
    tasks = [("math", "code", "chat")[(i // 8) % 3] for i in range(rows)]
    rewards = [[float(rng.random() < 0.5) if task == "math" else None, rng.random() if task != "math" else None]
               for task in tasks]  # fmt: skip
    batch = RolloutBatch(
        step=1, mode="train", num_generations=8, reward_names=["math_ok", "judge"], reward_weights=[1.0, 1.0],
        rewards=rewards, advantages=[rng.gauss(0, 1) for _ in range(rows)], tasks=tasks, completions=texts,
        completion_ids=ids, prompt_ids=[[1] * 200] * rows, truncated=[rng.random() < 0.05 for _ in range(rows)],
        thinking=[None] * rows, max_completion_length=tokens,
        prompts=[[{"role": "user", "content": f"question {i // 8} " * 40}] for i in range(rows)],
    )  # fmt: skip
    config = GuardsConfig.from_dict(
        {"routing": {"routes": {"math": ["math_ok"], "code": ["judge"], "chat": ["judge"]}}}
    )
    ctx = RunContext(tokenizer=tokenizer, decode_text=lambda x: tokenizer.decode(x, skip_special_tokens=True))
    print(f"batch: {rows} rows, up to {tokens} tokens each; decoding it once takes {decode_s:.3f} s")
    for cls in (TaskRewardMonitor, RoutingGuard, DeadGroupGuard, TruncationGuard, SlicingGuard):
        cfg = GuardsConfig.from_dict(config.to_dict())
        getattr(cfg, cls.config_field).mode = "log"
        guard = cls(cfg)
        guard.setup(ctx)
        session = GuardSession()
        best = best_ms(lambda g=guard, s=session: g.on_batch(batch, s.reporter(g.name, g.config, 1)), 3)
        print(f"  {cls.__name__:<18} {best:8.1f} ms per batch")


if __name__ == "__main__":
    main()
