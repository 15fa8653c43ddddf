"""``rl-guards probe-lengths [CONFIG]``: sample completions on training prompts and recommend ``max_completion_length``.

``CONFIG`` is the ``trl grpo`` / ``rl-guards grpo`` YAML of the run (its ``guards`` keys are ignored): the model
(``model_name_or_path``, ``dtype``), the dataset as ``trl grpo`` loads it (``dataset_name`` / ``dataset_config`` /
``datasets``, ``dataset_train_split``; a hub name, a folder of data files or a ``save_to_disk`` folder), the prompt
rendering (``chat_template_kwargs``) and the sampling settings (``temperature``, ``top_p``, ``top_k``); the cap
defaults to its ``max_completion_length``. Flags override it; without a YAML, ``--model`` and ``--dataset`` say
what to probe. A progress bar goes to stderr; what cannot be loaded is one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rl_guards.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "probe-lengths",
        help="measure completion lengths on training prompts and recommend max_completion_length",
        description=(
            "Generate one completion per sampled training prompt (HF generate; CPU works for small models), "
            "print the length distribution and a recommended max_completion_length. Reads the run's trl grpo / "
            "rl-guards grpo YAML; flags override it."
        ),
    )
    parser.add_argument("config", nargs="?", default=None, help="the run's trl grpo / rl-guards grpo YAML")
    parser.add_argument("--model", default=None, help="model folder (default: the YAML's model_name_or_path)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's)")
    parser.add_argument(
        "--dataset", default=None, help="dataset folder (save_to_disk, or data files) or file (default: the YAML's)"
    )
    parser.add_argument("--split", default=None, help="split to sample (default: the YAML's train split, or train)")
    parser.add_argument("--prompt-column", default="prompt", help="column holding the prompts (default: prompt)")
    parser.add_argument("--samples", type=int, default=32, help="prompts sampled from the dataset (default: 32)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="generation cap (default: the YAML's max_completion_length, "
        "else 1024)"
    )  # fmt: skip
    parser.add_argument(
        "--chat-template-kwargs", type=json.loads, default=None, help="JSON, e.g. '{\"enable_thinking\": false}'"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call (default: 8)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the YAML's)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, mps, or auto (default: cuda if present)")
    parser.add_argument("--dtype", default=None, choices=DTYPES, help="model dtype (default: the YAML's, else auto)")
    parser.add_argument("--seed", type=int, default=0, help="sampling and prompt-selection seed")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--output", default=None, help="also write the JSON summary here (for preflight.length_probe)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    if args.no_progress:
        hf_logging.disable_progress_bar()  # "Loading weights" too
    try:
        return _run(args)
    finally:
        if bars and args.no_progress:
            hf_logging.enable_progress_bar()


def _run(args: argparse.Namespace) -> int:
    from rl_guards.chat.length_probe import probe_lengths

    try:
        plan = _plan(args)
        model, tokenizer = _load_model(plan, args.device)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"rl-guards probe-lengths: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        probe = probe_lengths(
            model,
            tokenizer,
            plan["prompts"],
            max_new_tokens=plan["max_new_tokens"],
            chat_template_kwargs=plan["chat_template_kwargs"],
            batch_size=args.batch_size,
            temperature=plan["temperature"],
            top_p=plan["top_p"],
            top_k=plan["top_k"],
            seed=args.seed,
            progress=not args.no_progress,
        )
    except ValueError as exc:  # arguments generate() refuses
        print(f"rl-guards probe-lengths: {_one_line(exc)}", file=sys.stderr)
        return 2
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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    """What to probe: the YAML's settings, then the flags; prompts loaded. ConfigError / ValueError say what is
    missing or wrong."""
    from rl_guards.chat.length_probe import load_prompts, pick_split, sample_prompts

    plan: dict[str, Any] = {"model": None, "dtype": None, "chat_template_kwargs": None, "max_new_tokens": 1024,
                            "temperature": 1.0, "top_p": 1.0, "top_k": 0}  # fmt: skip
    script_args = dataset_args = None
    if args.config:
        script_args, training, model_args, dataset_args = _read_yaml(args.config)
        plan.update(
            model=model_args.model_name_or_path,
            dtype=getattr(model_args, "dtype", None),
            chat_template_kwargs=dict(training.chat_template_kwargs or {}) or None,
            max_new_tokens=int(training.max_completion_length or 1024),
            temperature=float(training.temperature),
            top_p=float(training.top_p),
            top_k=int(training.top_k or 0),
        )
    flags = {
        "model": args.model,
        "dtype": args.dtype,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "chat_template_kwargs": args.chat_template_kwargs,
    }
    plan.update({key: value for key, value in flags.items() if value is not None})
    if not plan["model"]:
        raise ConfigError("no model: pass the run's YAML (model_name_or_path) or --model DIR")
    plan["tokenizer"] = args.tokenizer or plan["model"]
    for key in ("model", "tokenizer"):
        if not Path(plan[key]).is_dir():
            raise ConfigError(f"{key} {plan[key]!r}: not a local folder (probe-lengths never downloads)")
    if plan["max_new_tokens"] < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {plan['max_new_tokens']}")
    if args.dataset:
        plan["prompts"] = load_prompts(
            args.dataset, samples=args.samples, seed=args.seed, column=args.prompt_column, split=args.split or "train"
        )
    elif script_args is not None:
        from rl_guards.trl.script_args import load_script_dataset

        try:
            dataset = load_script_dataset(script_args, dataset_args)
        except ConfigError:
            raise
        except Exception as exc:  # what datasets says about a name or folder it cannot load
            name = getattr(script_args, "dataset_name", None) or "the YAML's datasets"
            saved = name and any((Path(name) / f).is_file() for f in ("dataset_dict.json", "state.json"))
            hint = " (a save_to_disk folder, which trl grpo cannot load either: pass it as --dataset)" if saved else ""
            raise ValueError(f"dataset {name}: could not load{hint}: {type(exc).__name__}: {_one_line(exc)}") from exc
        data = pick_split(dataset, args.split or script_args.dataset_train_split, str(script_args.dataset_name))
        if args.prompt_column not in data.column_names:
            raise ValueError(f"the dataset has no {args.prompt_column!r} column; columns: {data.column_names}")
        plan["prompts"] = sample_prompts(list(data[args.prompt_column]), args.samples, args.seed)
    else:
        raise ConfigError("no dataset: pass the run's YAML (dataset_name / datasets) or --dataset PATH")
    if not plan["prompts"]:
        raise ValueError("the dataset has no prompts")
    return plan


def _read_yaml(path: str) -> tuple[Any, Any, Any, Any]:
    from rl_guards.config import read_yaml_mapping
    from rl_guards.trl.script_args import RL_GUARDS_KEYS, parse_trl_yaml

    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such YAML file")
    data = {k: v for k, v in read_yaml_mapping(path).items() if k not in RL_GUARDS_KEYS}
    script_args, training, model_args, dataset_args, _ = parse_trl_yaml(data)
    return script_args, training, model_args, dataset_args


def _device(name: str) -> str:
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"--device {name!r}: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
    return name


def _load_model(plan: dict[str, Any], device_name: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = _device(device_name)
    dtype = plan["dtype"] or "auto"
    torch_dtype = dtype if dtype == "auto" else getattr(torch, str(dtype), None)
    if torch_dtype is None:
        raise ConfigError(f"dtype {dtype!r}: expected one of {list(DTYPES)}")
    tokenizer = AutoTokenizer.from_pretrained(plan["tokenizer"])
    model = AutoModelForCausalLM.from_pretrained(plan["model"], dtype=torch_dtype)
    return model.to(device), tokenizer


__all__ = ["register", "run"]
