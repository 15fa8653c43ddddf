"""All guards on vs off on a real small model on one CUDA GPU: step time interleaved in one trainer, plus syncs.

The GPU counterpart of ``bench_overhead.py --only step`` (same interleaving: the hook's wrapped methods are
swapped for TRL's originals per step, in on/off pairs of random order). Also counts the CUDA synchronisations the
guards add per batch (``torch.cuda.set_sync_debug_mode("warn")`` around the hook's per-batch work: every sync is
one warning) and times the GRPO mask check on-device at large synthetic shapes with CUDA events.

Needs a CUDA GPU and a model on local disk (nothing is downloaded)::

    python benchmarks/gpu_overhead.py --model /models/Qwen3-0.6B --pairs 30 --batch 64 --num-generations 8 \\
        --max-completion-length 512
    python benchmarks/gpu_overhead.py --random-init qwen3-0.6b    # no weights: Qwen3-0.6B shape, random init,
                                                                   # the offline full Qwen tokenizer

Prints markdown tables; no assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

RANDOM_SHAPES = {
    # Qwen3-0.6B's config (hidden 1024, 28 layers, 16 heads / 8 KV heads of 128, MLP 3072, tied embeddings).
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
    },
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="local directory of a causal LM with its tokenizer (e.g. Qwen3-0.6B)")
    source.add_argument("--random-init", choices=sorted(RANDOM_SHAPES), help="random weights of this shape")
    parser.add_argument("--pairs", type=int, default=30, help="on/off step pairs (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the pairs (default 3)")
    parser.add_argument("--batch", type=int, default=64, help="per-device batch (rows; default 64)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=512)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--mask-shapes", default="1024x4096,4096x8192", help="rows x completion length, for the "
                        "on-device mask check timing ('' to skip)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def require_cuda() -> Any:
    """torch, once CUDA is known to work; otherwise exit 2 with a message that says what to run instead."""
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda or "none (a CPU-only build)"
        sys.exit(
            f"gpu_overhead.py needs a CUDA GPU, and torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, CUDA build: {built}). On a CPU machine run benchmarks/bench_overhead.py."
        )
    return torch


def load_model_and_tokenizer(args: argparse.Namespace, torch: Any) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, args.dtype)
    if args.model:
        path = Path(args.model)
        if not (path / "config.json").is_file():
            sys.exit(f"--model {args.model!r}: no config.json there; give a local model directory (nothing downloads)")
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
        return model, tokenizer, str(path)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rl_guards.testing import build_tokenizer

    tokenizer = build_tokenizer(vocab_size=None, cache_dir=Path.home() / ".cache" / "rl_guards")
    config = Qwen3Config(vocab_size=len(tokenizer), **RANDOM_SHAPES[args.random_init])
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(config).to(dtype)
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id]
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out = Path(tempfile.mkdtemp(prefix="gpu_overhead_model_"))
    model.save_pretrained(out)  # TRL re-reads the config from disk for some paths
    tokenizer.save_pretrained(out)
    return model, tokenizer, f"random-init {args.random_init} ({out})"


class SyncCounter:
    """Counts CUDA syncs inside a call: ``set_sync_debug_mode("warn")`` warns once per synchronising op."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.per_batch: list[int] = []

    def around(self, engine: Any) -> None:
        """Count the hook's per-batch work: from ``Engine.check_tensors`` (the hook's first call on a batch) through
        the adapter's ``local_rows`` to the end of ``Engine.process`` (its last), as one count per batch."""
        check_tensors, process = engine.check_tensors, engine.process
        state: dict[str, Any] = {}

        def start(*args: Any, **kwargs: Any) -> Any:
            state["caught"] = warnings.catch_warnings(record=True)
            state["log"] = state["caught"].__enter__()
            warnings.simplefilter("always")
            self.torch.cuda.set_sync_debug_mode("warn")
            return check_tensors(*args, **kwargs)

        def finish(*args: Any, **kwargs: Any) -> Any:
            try:
                return process(*args, **kwargs)
            finally:
                self.torch.cuda.set_sync_debug_mode("default")
                caught = state.pop("caught", None)
                if caught is not None:
                    log = state.pop("log")
                    caught.__exit__(None, None, None)
                    self.per_batch.append(sum("synchroniz" in str(w.message) for w in log))

        engine.check_tensors, engine.process = start, finish


def time_mask_check(torch: Any, tokenizer: Any, shapes: str) -> None:
    from bench_masks import make_batch

    from rl_guards.tensors.grpo_masks import check_grpo_batch

    if not shapes:
        return
    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    print("\n## GRPO mask check on the GPU (check_grpo_batch, CUDA events, best of 5)\n")
    print("| rows x completion length | ms | syncs |")
    print("|---|---:|---:|")
    for shape in shapes.split(","):
        rows, length = (int(x) for x in shape.lower().split("x"))
        batch = {k: v.cuda() for k, v in make_batch(rows, 256, length, vocab=len(tokenizer), eos=eos, pad=pad).items()}
        kwargs = {"eos_token_ids": [eos, pad], "pad_token_id": pad, "mask_truncated": False}
        check_grpo_batch(batch, **kwargs)  # warm-up
        best = float("inf")
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            check_grpo_batch(batch, **kwargs)
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end))
        counter = SyncCounter(torch)
        counter.wrap(check_grpo_batch)(batch, **kwargs)
        print(f"| {rows} x {length} | {best:.2f} | {counter.per_batch[0]} |")
        del batch
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch = require_cuda()

    from bench_overhead import _GuardTimer, _interleave_callback, bootstrap_ci, quantile
    from trl import GRPOConfig, GRPOTrainer

    import rl_guards
    from rl_guards.config import GuardsConfig
    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty
    from rl_guards.testing import make_dataset
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    model, tokenizer, label = load_model_and_tokenizer(args, torch)
    print(
        f"{torch.cuda.get_device_name()}; torch {torch.__version__}; model {label}; batch {args.batch} "
        f"({args.batch // args.num_generations} prompts x {args.num_generations}), <= {args.max_completion_length} "
        f"new tokens, {args.dtype}"
    )
    rng = random.Random(args.seed)
    arms = [rng.random() < 0.5 for _ in range(args.warmup)]
    for _ in range(args.pairs):
        first = rng.random() < 0.5
        arms += [first, not first]
    arms.append(False)

    penalty = StrayThinkPenalty.from_guards_config(GuardsConfig(), tokenizer=tokenizer)
    reward_funcs = [*route({"arith": [arith_correct], "echo": [echo_match]}), length_penalty, penalty]
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.batch,
            num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            max_steps=len(arms),
            learning_rate=1e-6,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16=args.dtype == "bfloat16",
            seed=args.seed,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=reward_funcs,
            args=config,
            train_dataset=make_dataset(n_per_task=max(16, args.batch), thinking=None),
        )
        off = (trainer._generate_and_score_completions, trainer._calculate_rewards)
        run = rl_guards.install(trainer, GuardsConfig.from_dict({"template": {"mode": "warn"}}))
        timer = _GuardTimer(run)
        syncs = SyncCounter(torch)
        syncs.around(run.engine)
        on = (trainer._generate_and_score_completions, trainer._calculate_rewards)
        callback = _interleave_callback(trainer, on, off, arms)
        trainer.add_callback(callback)
        t0 = time.perf_counter()
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            trainer.train()
        wall = time.perf_counter() - t0

    times = {step: (arm, sec * 1000) for step, arm, sec in callback.times}
    pairs: list[tuple[float, float]] = []
    for k in range(args.pairs):
        a, b = args.warmup + 2 * k, args.warmup + 2 * k + 1
        if a in times and b in times:
            (arm_a, ms_a), (_, ms_b) = times[a], times[b]
            pairs.append((ms_a, ms_b) if arm_a else (ms_b, ms_a))
    on_ms, off_ms = [p[0] for p in pairs], [p[1] for p in pairs]
    ratios = [a / b for a, b in pairs]
    on_steps = max(1, sum(arms[: len(callback.times)]))

    def ratio_of_means(ps: list[tuple[float, float]]) -> float:
        return sum(p[0] for p in ps) / sum(p[1] for p in ps)

    lo, hi = bootstrap_ci(pairs, ratio_of_means, seed=args.seed)
    guard_ms = sum(v for k, v in timer.ms.items() if not k.endswith("on_train_begin")) / on_steps
    print(f"\n{len(arms)} steps in {wall:.0f} s; {len(pairs)} on/off pairs\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| step ms off, median [IQR] | {statistics.median(off_ms):.0f} [{quantile(off_ms, 0.25):.0f}, "
          f"{quantile(off_ms, 0.75):.0f}] |")  # fmt: skip
    print(f"| step ms on, median [IQR] | {statistics.median(on_ms):.0f} [{quantile(on_ms, 0.25):.0f}, "
          f"{quantile(on_ms, 0.75):.0f}] |")  # fmt: skip
    print(f"| per-pair ratio on/off, median [IQR] | {statistics.median(ratios):.4f} [{quantile(ratios, 0.25):.4f}, "
          f"{quantile(ratios, 0.75):.4f}] |")  # fmt: skip
    print(f"| ratio of means [bootstrap 95 % CI] | {ratio_of_means(pairs):.4f} [{lo:.4f}, {hi:.4f}] |")
    print(f"| guards' own ms per guarded step | {guard_ms:.1f} ({guard_ms / statistics.median(off_ms):.2%}) |")
    counts = syncs.per_batch or [0]
    print(f"| CUDA syncs per guarded batch (hook + guards), min / max | {min(counts)} / {max(counts)} |")
    print("\n| hook | ms per guarded step |")
    print("|---|---:|")
    for name, ms in sorted(timer.ms.items(), key=lambda kv: -kv[1]):
        if not name.endswith("on_train_begin"):
            print(f"| {name} | {ms / on_steps:.2f} |")
    time_mask_check(torch, tokenizer, args.mask_shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
