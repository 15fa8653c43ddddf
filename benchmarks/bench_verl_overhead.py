"""What rl_guards costs a verl step on CPU, side by side with verl's own reward manager on the same rows.

- ``verl naive``: verl's reward worker (``RewardLoopWorker.compute_score_batch``, in this process) scoring one
  step's rows with verl's ``naive`` manager and ``default_compute_score`` (gsm8k: a regex over the last 300
  characters, about the cheapest scorer there is, so the ratio below is near its worst case);
- ``guarded``: the same worker, the same rows, with ``GuardedRewardManager`` wrapping ``naive`` (the record per row);
- ``hook``: the trainer-side step hook on those rows (``VerlGuardRun.process``: rows in group order, verl's decode,
  every guard, the mask check; no dump: ``rollouts.every_steps`` is set past the run), and separately a dump step.

The rows are padded as verl's rollout pads them (``--prompts`` x ``--n`` rows, responses of ``--tokens`` tokens of
the tiny fixture's vocabulary ending ``#### 42`` and EOS). Times are the best of ``--repeats`` (a shared machine).

Run: ``.venv-verl/bin/python benchmarks/bench_verl_overhead.py [--prompts 32 --n 8 --tokens 512]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._timing import best_seconds  # noqa: E402


def padded_rows(tokenizer: Any, prompts: int, n: int, tokens: int) -> Any:
    """One step's rows as verl's agent loop pads them (DataProto: prompts left-padded, responses right-padded)."""
    import random

    import numpy as np
    import torch
    from verl.protocol import DataProto

    rng = random.Random(0)
    words = "the of and to in is was for on that with as by at it from be this an are or".split()
    tail = tokenizer(" #### 42", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    prompt_rows, response_rows = [], []
    for p in range(prompts):
        messages = [{"role": "user", "content": f"Question {p}: what is 40 + 2? End with #### and the answer."}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        prompt = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
        for _ in range(n):
            text = " ".join(rng.choice(words) for _ in range(tokens))
            body = tokenizer(text, add_special_tokens=False)["input_ids"][: tokens - len(tail)]
            prompt_rows.append(prompt)
            response_rows.append(body + tail)
    pad = tokenizer.pad_token_id
    width, length = max(map(len, prompt_rows)), tokens
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_rows])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_rows])
    responses = torch.tensor([r + [pad] * (length - len(r)) for r in response_rows])
    response_mask = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in response_rows])
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    rows = len(prompt_rows)
    non_tensor = {
        "data_source": np.array(["openai/gsm8k"] * rows, dtype=object),
        "reward_model": np.array([{"ground_truth": "42", "style": "rule"} for _ in range(rows)], dtype=object),
        "extra_info": np.array([{"index": i // n} for i in range(rows)], dtype=object),
        "uid": np.array([f"u{i // n}" for i in range(rows)], dtype=object),
        "raw_prompt": np.array([None] * rows, dtype=object),
    }
    return DataProto.from_dict(
        tensors={
            "prompts": ids,
            "responses": responses,
            "input_ids": torch.cat([ids, responses], dim=1),
            "attention_mask": attention,
            "response_mask": response_mask,
        },
        non_tensors=non_tensor,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)

    import torch
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from rl_guards.testing import tiny_setup
    from rl_guards.testing.verl_run import compose_config
    from rl_guards.verl.records import RECORD_KEY
    from rl_guards.verl.rows import from_dataproto
    from rl_guards.verl.run import VerlGuardRun

    torch.set_num_threads(1)
    tiny = tiny_setup()
    tmp = Path(tempfile.mkdtemp(prefix="bench_verl_"))
    common = [
        f"actor_rollout_ref.rollout.n={args.n}",
        f"data.max_response_length={args.tokens}",
        "+reward.rl_guards.rollouts.every_steps=100000",
    ]
    guarded_cfg = compose_config(tiny.model_dir, tmp / "g", scorer="verl", overrides=common)
    plain_cfg = compose_config(
        tiny.model_dir,
        tmp / "p",
        scorer="verl",
        overrides=[
            *common,
            "reward.reward_manager.source=register",
            "reward.reward_manager.name=naive",
            "reward.reward_manager.module.path=null",
        ],
    )
    data = padded_rows(tiny.tokenizer, args.prompts, args.n, args.tokens)
    rows = len(data)

    plain, guarded = RewardLoopWorker(plain_cfg), RewardLoopWorker(guarded_cfg)
    outputs: list[dict[str, Any]] = []

    def score(worker: Any) -> None:
        outputs[:] = worker.loop.run_until_complete(worker.compute_score_batch(data))

    # interleaved, best of each: the machine's load changes between runs, not between neighbours
    plain_s = guarded_s = float("inf")
    for _ in range(args.repeats):
        plain_s = min(plain_s, best_seconds(lambda: score(plain), 1))
        guarded_s = min(guarded_s, best_seconds(lambda: score(guarded), 1))

    # the trainer's batch: verl's rm_scores (assemble_rm_scores, the colocate path) and the extra columns
    import numpy as np
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    data.batch["rm_scores"] = RewardManagerBase.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    data.non_tensor_batch[RECORD_KEY] = np.array([o["reward_extra_info"][RECORD_KEY] for o in outputs])
    started = time.perf_counter()
    run = VerlGuardRun(guarded_cfg)
    setup_s = time.perf_counter() - started
    step = [0]

    def hook_step() -> None:
        step[0] += 1
        run.process(from_dataproto(data, None, step=step[0]))

    hook_step()  # the first step also runs the start-of-training work
    hook_s = best_seconds(hook_step, args.repeats)
    run.engine.guard("rollouts").config.every_steps = 1
    dump_s = best_seconds(hook_step, 2)
    run.engine.flush(step[0])

    extra = guarded_s - plain_s
    print(f"verl overhead on CPU: {args.prompts} prompts x {args.n} = {rows} rows of {args.tokens} tokens, gsm8k")
    print(f"  verl naive manager      {plain_s * 1000:8.1f} ms/step  ({plain_s / rows * 1e6:6.0f} us/row)")
    print(f"  guarded (naive inside)  {guarded_s * 1000:8.1f} ms/step  ({guarded_s / rows * 1e6:6.0f} us/row)"
          f"  = {guarded_s / plain_s:.2f}x verl's")  # fmt: skip
    print(f"  step hook (no dump)     {hook_s * 1000:8.1f} ms/step  = {hook_s / plain_s:.2f}x verl's manager")
    print(f"  step hook with a dump   {dump_s * 1000:8.1f} ms/step  (the write itself is on a background thread)")
    print(f"  hook setup (once)       {setup_s * 1000:8.1f} ms")
    print(f"  rl_guards per step: manager +{extra * 1000:.1f} ms, hook {hook_s * 1000:.1f} ms = "
          f"{(extra + hook_s) / plain_s:.2f}x verl's own manager time")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
