"""``rl-guards probe-lengths``: sample completions on training prompts and recommend ``max_completion_length``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "probe-lengths",
        help="measure completion lengths on training prompts and recommend max_completion_length",
        description=(
            "Generate one completion per sampled training prompt (HF generate; CPU works for small models), "
            "print the length distribution and a recommended max_completion_length."
        ),
    )
    parser.add_argument("--model", required=True, help="model folder (from_pretrained)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: --model)")
    parser.add_argument("--dataset", required=True, help="datasets.save_to_disk folder or JSON-lines file")
    parser.add_argument("--split", default="train", help="split of a saved DatasetDict (default: train)")
    parser.add_argument("--prompt-column", default="prompt", help="column holding the prompts (default: prompt)")
    parser.add_argument("--samples", type=int, default=32, help="prompts sampled from the dataset (default: 32)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="generation cap (default: 1024)")
    parser.add_argument(
        "--chat-template-kwargs", type=json.loads, default=None, help="JSON, e.g. '{\"enable_thinking\": false}'"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call (default: 8)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (TRL default 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="sampling and prompt-selection seed")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--output", default=None, help="also write the JSON summary here (for preflight.length_probe)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rl_guards.trl.length_probe import load_prompts, probe_lengths

    prompts = load_prompts(
        args.dataset, samples=args.samples, seed=args.seed, column=args.prompt_column, split=args.split
    )
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    probe = probe_lengths(
        model,
        tokenizer,
        prompts,
        max_new_tokens=args.max_new_tokens,
        chat_template_kwargs=args.chat_template_kwargs,
        batch_size=args.batch_size,
        temperature=args.temperature,
        seed=args.seed,
    )
    numbers = probe.to_dict()
    if args.output:
        Path(args.output).write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(numbers))
    else:
        print(probe.summary.text())
        for tail in probe.capped_tails:
            print(f"  capped completion ends: {tail!r}")
    return 0
