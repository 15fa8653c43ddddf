"""``rl-guards preflight CONFIG``: the start-of-training report without starting training.

CONFIG is a YAML file of GRPOConfig fields plus a few keys of its own::

    model_name_or_path: ./checkpoints/sft     # tokenizer directory (or tokenizer_name_or_path:)
    dataset: data/train.jsonl                 # local json/jsonl/parquet/csv file or save_to_disk directory
    eval_dataset: data/eval.jsonl             # optional
    learning_rate: 1.0e-6
    loss_type: dr_grpo
    chat_template_kwargs: {enable_thinking: false}
    rl_guards:                                # optional GuardsConfig section
      preflight: {sft_tokenizer: ./checkpoints/sft, length_probe: probe.json}

Prints the report; exit status 1 when a finding is blocking, 2 when the config cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.errors import ConfigError

# Keys of the YAML file that are not GRPOConfig fields.
OWN_KEYS = (
    "model_name_or_path",
    "tokenizer_name_or_path",
    "dataset",
    "eval_dataset",
    "sft_tokenizer",
    "length_probe",
    "rl_guards",
)
DATASET_LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def register(subparsers: Any) -> None:
    """Add the ``preflight`` subcommand."""
    parser = subparsers.add_parser(
        "preflight",
        help="check a GRPO config before training: template paths, optimisation choices, group size, length cap",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="YAML file of GRPOConfig fields (+ model_name_or_path, dataset, rl_guards)")
    parser.add_argument("--tokenizer", help="tokenizer directory (overrides model_name_or_path)")
    parser.add_argument("--dataset", help="training dataset path (overrides dataset)")
    parser.add_argument("--eval-dataset", help="eval dataset path (overrides eval_dataset)")
    parser.add_argument("--sft-tokenizer", help="tokenizer directory of the SFT stage, to compare templates")
    parser.add_argument("--length-probe", help="JSON file of length-probe results (p90, p99, share_at_cap)")
    parser.add_argument("--num-processes", type=int, default=1, help="processes the run will use (default 1)")
    parser.add_argument("--json", dest="json_out", help="also write the report as JSON to this file")
    parser.set_defaults(func=run)


def load_local_dataset(path: str | Path) -> Any:
    """A ``datasets.Dataset`` from a local file or a ``save_to_disk`` directory (nothing is downloaded)."""
    import datasets

    datasets.disable_progress_bars()
    p = Path(path)
    if p.is_dir():
        return datasets.load_from_disk(str(p))
    loader = DATASET_LOADERS.get(p.suffix.lower())
    if loader is None:
        raise ConfigError(f"dataset {path}: expected a directory or one of {sorted(DATASET_LOADERS)}")
    if not p.is_file():
        raise ConfigError(f"dataset {path}: no such file")
    return datasets.load_dataset(loader, data_files=str(p), split="train")


def build_grpo_config(fields: dict[str, Any]) -> tuple[Any, str]:
    """A GRPOConfig from YAML fields; on a machine without the configured accelerator, retry on CPU.

    Returns the config and a note ("" unless the CPU fallback was used).
    """
    from trl import GRPOConfig

    fields = dict(fields)
    fields.setdefault("output_dir", "rl_guards_preflight")
    fields.setdefault("report_to", "none")
    try:
        return GRPOConfig(**fields), ""
    except TypeError as exc:
        raise ConfigError(f"not a GRPOConfig field: {exc}") from exc
    except ValueError as exc:
        if not any(word in str(exc) for word in ("bf16", "fp16", "gpu", "GPU", "cuda", "CUDA")):
            raise ConfigError(f"GRPOConfig rejected the config: {exc}") from exc
        cpu_fields = {**fields, "use_cpu": True, "bf16": False, "fp16": False}
        note = f"note: built the GRPOConfig with use_cpu=True, bf16=False here ({exc}); other fields as given"
        return GRPOConfig(**cpu_fields), note


def read_config(path: str | Path) -> dict[str, Any]:
    """The YAML mapping."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def run(ns: argparse.Namespace) -> int:
    """Build and print the report; 1 on blocking findings, 2 on an unreadable config."""
    try:
        report, note = _build(ns)
    except ConfigError as exc:
        print(f"rl-guards preflight: {exc}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    print(report.render())
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return 1 if report.blocking else 0


def _build(ns: argparse.Namespace) -> tuple[Any, str]:
    from rl_guards.trl.preflight import build_preflight_report

    data = read_config(ns.config)
    own = {k: data.pop(k) for k in OWN_KEYS if k in data}
    guards = GuardsConfig.from_dict(own.get("rl_guards") or {})
    preflight = guards.preflight
    tokenizer_dir = ns.tokenizer or own.get("tokenizer_name_or_path") or own.get("model_name_or_path")
    if not tokenizer_dir:
        raise ConfigError(f"{ns.config}: set model_name_or_path (or tokenizer_name_or_path), or pass --tokenizer")
    if not Path(tokenizer_dir).is_dir():
        raise ConfigError(f"tokenizer {tokenizer_dir}: not a local directory (preflight never downloads)")
    args, note = build_grpo_config(data)
    train_path = ns.dataset or own.get("dataset")
    eval_path = ns.eval_dataset or own.get("eval_dataset")
    report = build_preflight_report(
        args,
        str(tokenizer_dir),
        load_local_dataset(train_path) if train_path else None,
        load_local_dataset(eval_path) if eval_path else None,
        sft_tokenizer=ns.sft_tokenizer or own.get("sft_tokenizer"),
        length_probe=ns.length_probe or own.get("length_probe"),
        config=preflight,
        world_size=ns.num_processes,
        task_column=guards.tasks.task_column,
    )
    return report, note


__all__ = ["build_grpo_config", "load_local_dataset", "read_config", "register", "run"]
