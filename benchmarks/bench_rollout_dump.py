"""Cost of one rollout dump (1,024 rollouts of ~512 tokens) next to TRL's own ``log_completions`` path.

rl_guards: a dump step of ``RolloutRecorder`` (``on_batch`` + ``after_batch`` on the training thread, then the
background writer's Arrow table of token ids and the TRL-decoded text, zstd Parquet written atomically, index
rewritten: ``flush`` waits for it here). Broken down into its parts; decoding happens when a reader reads.
TRL: what ``GRPOTrainer.log`` does with ``log_completions=True`` after the step: a pandas DataFrame of prompt
messages, completion messages, per-function rewards and advantages, then ``to_parquet`` (its texts were
decoded earlier for the reward functions, so that decode is shown separately, not in TRL's total).

Run: ``.venv/bin/python benchmarks/bench_rollout_dump.py [rows] [mean_tokens] [repeats]``  (prints a table)
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from _timing import best_ms

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.recorder import RolloutRecorder, markup_spec
from rl_guards.rollouts.store import MarkupSpec, build_rollout_table
from rl_guards.testing import build_tokenizer

SENTENCES = (
    "Let me work through this step by step. ",
    "First, 37 times 12 is 444, and adding 19 gives 463. ",
    "Wait, I should double-check the units before I go on.\n",
    "def solve(xs):\n    return sorted(set(xs))[-2]\n",
    "So the answer is \\boxed{463}. ",
    "Hmm, the question asks for the second largest value, not the largest. ",
)


def make_batch(tokenizer: Any, rows: int, mean_tokens: int, group: int = 8) -> RolloutBatch:
    rng = random.Random(0)
    # Half natural-ish text, half random BPE tokens: the random half keeps Parquet from compressing unrealistically.
    corpus = "".join(rng.choice(SENTENCES) for _ in range(4000))
    natural = tokenizer.encode(corpus, add_special_tokens=False)
    pool: list[int] = []
    for token in natural:
        pool += [token, rng.randrange(256, 50_000)]
    think, end_think = tokenizer.encode("<think>\n"), tokenizer.encode("\n</think>\n\n")
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    completion_ids, prompt_ids, prompts, tasks, truncated = [], [], [], [], []
    for g in range(rows // group):
        question = f"Problem {g}: " + "".join(rng.choice(SENTENCES) for _ in range(12))
        messages = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        pids = tokenizer.encode(text, add_special_tokens=False)
        for _ in range(group):
            n = max(32, min(2 * mean_tokens, int(rng.gauss(mean_tokens, mean_tokens / 4))))
            start = rng.randrange(0, len(pool) - n)
            body = pool[start : start + n]
            cut = rng.random() < 0.05
            ids = think + body[: n // 2] + end_think + body[n // 2 :] + ([] if cut else [eos])
            completion_ids.append(ids)
            prompt_ids.append(pids)
            prompts.append(messages)
            tasks.append(("math", "code", "chat")[g % 3])
            truncated.append(cut)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    rewards = [
        [float(rng.random() < 0.5) if t == "math" else None, rng.random() if t != "math" else None] for t in tasks
    ]
    return RolloutBatch(
        step=10,
        mode="train",
        num_generations=group,
        reward_names=["math_ok", "judge"],
        reward_weights=[1.0, 1.0],
        rewards=rewards,
        advantages=[rng.gauss(0, 1) for _ in texts],
        tasks=tasks,
        completions=texts,
        completion_ids=completion_ids,
        prompt_ids=prompt_ids,
        truncated=truncated,
        thinking=[True] * len(texts),
        max_completion_length=2 * mean_tokens,
        prompts=prompts,
    )


def trl_log_completions(batch: RolloutBatch, folder: Path, step: int) -> None:
    """The body of ``GRPOTrainer.log`` for ``log_completions=True`` (TRL 1.16), without W&B and rich printing."""
    import pandas as pd
    from trl.trainer.utils import strip_images_from_messages

    completions = [[{"role": "assistant", "content": t}] for t in batch.completions]
    rewards = {
        name: [r[i] if r[i] is not None else float("nan") for r in batch.rewards]
        for i, name in enumerate(batch.reward_names)
    }
    table = {
        "step": [step] * len(batch.prompts),
        "prompt": [strip_images_from_messages(m) for m in batch.prompts],
        "completion": [strip_images_from_messages(m) for m in completions],
        **rewards,
        "advantage": batch.advantages,
    }
    pd.DataFrame(table).to_parquet(os.path.join(folder, f"completions_{step:05d}.parquet"))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    mean_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tokenizer = build_tokenizer(vocab_size=None, cache_dir=Path.home() / ".cache" / "rl_guards")
    batch = make_batch(tokenizer, rows, mean_tokens)
    tokens = sum(len(ids) for ids in batch.completion_ids)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    out = Path(tempfile.mkdtemp(prefix="bench_rollouts_"))
    ctx = RunContext(output_dir=str(out), tokenizer=tokenizer, decode=decode, chat_template=tokenizer.chat_template)
    config = GuardsConfig.from_dict({"rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}})
    spec: MarkupSpec = markup_spec(ctx, config.think_tags)

    runs: list[int] = []

    def recorder_dump() -> None:
        runs.append(len(runs))
        recorder = RolloutRecorder(config)
        recorder.setup(RunContext(**{**ctx.__dict__, "output_dir": str(out / f"run{len(runs)}")}))
        session = GuardSession()
        report = session.reporter(recorder.name, recorder.config, batch.step)
        recorder.on_batch(batch, report)
        recorder.after_batch(batch, report)
        recorder.flush(report)
        assert not session.counts, session.summary_text()

    table, _ = build_rollout_table([batch], spec)
    file = out / "run1" / "rl_guards" / "rollouts" / "step_000010.parquet"

    def write_only() -> None:
        import pyarrow.parquet as pq

        pq.write_table(table, str(out / "w.parquet"), compression="zstd")

    trl_dir = out / "completions"
    trl_dir.mkdir()
    results = [
        ("rl_guards dump, total (training thread + background write, flushed)", best_ms(recorder_dump, repeats)),
        (
            "  (not done: decode with special tokens kept, done at read time)",
            best_ms(lambda: [decode(i) for i in batch.completion_ids], repeats),
        ),
        (
            "  Arrow table build (ids, text, think verdicts, columns)",
            best_ms(lambda: build_rollout_table([batch], spec), repeats),
        ),
        ("  zstd Parquet write of the table", best_ms(write_only, repeats)),
        (
            "TRL log_completions: DataFrame + to_parquet",
            best_ms(lambda: trl_log_completions(batch, trl_dir, 10), repeats),
        ),
        (
            "(TRL's own decode for reward funcs, batch_decode)",
            best_ms(lambda: tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True), repeats),
        ),
    ]
    ours_mb = file.stat().st_size / 1e6
    trl_mb = (trl_dir / "completions_00010.parquet").stat().st_size / 1e6
    print(f"{rows} rollouts, {tokens} completion tokens ({tokens / rows:.0f}/rollout), best of {repeats}")
    print(f"{'what':<58} {'ms':>9}")
    for name, ms in results:
        print(f"{name:<58} {ms:>9.1f}")
    print(f"file size: rl_guards {ours_mb:.2f} MB (zstd, with token ids), TRL {trl_mb:.2f} MB (snappy, no ids)")


if __name__ == "__main__":
    main()
