"""``rl-guards preflight CONFIG``: the start-of-training checks without starting training.

CONFIG is the YAML you give ``trl grpo`` / ``rl-guards grpo`` (TRL's own parser reads it: GRPOConfig, model,
dataset and reward-function fields, dataset mixtures, dotted reward-function paths), plus an optional ``guards:``
section (the rl_guards config)::

    model_name_or_path: ./checkpoints/sft     # a local folder: the tokenizer is read from it (never downloaded)
    dataset_name: ./data                      # or datasets: [...] (a mixture), as trl grpo takes them
    reward_funcs: [my_rewards.correct, think_format_reward]
    loss_type: dr_grpo
    chat_template_kwargs: {enable_thinking: false}
    guards:
      reward_sanity: {cases_file: cases.yaml}

The datasets and reward functions are loaded the way TRL's script loads them, and every guard that checks at train
start runs on the same context ``install()`` builds from a trainer (preflight report, template and thinking flags,
reward sanity, routing, task column): the verdict is the one training start would reach. The model is not loaded.

The first format (GRPOConfig fields plus ``dataset:``, ``eval_dataset:``, ``tokenizer_name_or_path:``,
``rl_guards:``) is still read. Exit status: 0 ok, 1 blocking (training would stop), 2 could not check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rl_guards.cli.help import plain
from rl_guards.config import GuardsConfig, read_yaml_mapping
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
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="the trl grpo / rl-guards grpo YAML (or the first preflight format)")
    parser.add_argument("--tokenizer", help="tokenizer directory (overrides model_name_or_path)")
    parser.add_argument("--dataset", help="training dataset path (overrides dataset)")
    parser.add_argument("--eval-dataset", help="eval dataset path (overrides eval_dataset)")
    parser.add_argument("--sft-tokenizer", help="tokenizer directory of the SFT stage, to compare templates")
    parser.add_argument("--length-probe", help="JSON file of length-probe results (p90, p99, share_at_cap)")
    parser.add_argument("--num-processes", type=int, default=1, help="processes the run will use (default 1)")
    parser.add_argument("--json", dest="json_out", help="also write the findings as JSON to this file")
    parser.add_argument("--guards_config", default=None, help="rl_guards YAML (instead of the guards: section)")
    parser.add_argument("--guards_set", nargs="*", default=[], help="overrides as section.field=value")
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
    """The YAML mapping (ConfigError for a file that is no YAML mapping, a key given twice, an alias bomb)."""
    return read_yaml_mapping(path)


def run(ns: argparse.Namespace) -> int:
    """Run the start-of-training checks and print them; 1 when training would stop, 2 when it cannot check."""
    from rl_guards.console import quiet
    from rl_guards.engine.start_checks import run_start_checks

    try:
        data = read_config(ns.config)
        ctx, guards, note = _trl_context(ns, data) if _is_trl_yaml(data) else _first_format_context(ns, data)
        if note:
            print(note, file=sys.stderr)
        with quiet():  # the report and the verdict below say every finding, once
            verdict = run_start_checks(ctx, guards)
    except ConfigError as exc:
        print(f"rl-guards preflight: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a dataset or reward function that cannot be loaded: nothing was checked
        print(f"rl-guards preflight: could not check: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if verdict.preflight_report is not None:
        print(verdict.preflight_report.render(), end="\n\n")
    print(verdict.render())
    if ns.json_out:
        report = verdict.preflight_report.to_dict() if verdict.preflight_report is not None else {}
        out = {
            **report,
            "start_checks": {"blocking": verdict.blocking, "findings": [f.to_dict() for f in verdict.findings]},
        }
        Path(ns.json_out).write_text(json.dumps(out, indent=2, ensure_ascii=False), encoding="utf-8")
    return 1 if verdict.blocking else 0


TRL_KEYS = ("dataset_name", "datasets", "reward_funcs", "reward_model_name_or_path", "guards")


def _is_trl_yaml(data: dict[str, Any]) -> bool:
    """A ``trl grpo`` YAML (dataset_name / datasets / reward_funcs / guards), not the first preflight format."""
    first_format = any(k in data for k in ("dataset", "eval_dataset", "tokenizer_name_or_path", "rl_guards"))
    return any(k in data for k in TRL_KEYS) and not first_format


def _guards_config(section: Any, ns: argparse.Namespace) -> GuardsConfig:
    return GuardsConfig.layered(section, ns.guards_config, list(ns.guards_set))


def _trl_context(ns: argparse.Namespace, data: dict[str, Any]) -> tuple[Any, GuardsConfig, str]:
    """The run context from a ``trl grpo`` YAML: TRL's parser, TRL's dataset and reward-function loading."""
    from rl_guards.engine.start_checks import context_without_trainer
    from rl_guards.trl.script_args import load_script_parts, parse_trl_yaml

    section = data.pop("guards", None)
    guards = _guards_config(section, ns)
    script_args, training_args, model_args, dataset_args, note = parse_trl_yaml(data)
    tokenizer_dir = ns.tokenizer or model_args.model_name_or_path
    if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
        raise ConfigError(
            f"tokenizer {tokenizer_dir!r}: not a local directory (preflight never downloads); pass --tokenizer"
        )
    train, evaluation, reward_funcs = load_script_parts(script_args, training_args, dataset_args)
    if ns.dataset:
        train = load_local_dataset(ns.dataset)
    if ns.eval_dataset:
        evaluation = load_local_dataset(ns.eval_dataset)
    _preflight_overrides(guards, ns, {})
    ctx = context_without_trainer(
        training_args,
        _tokenizer(str(tokenizer_dir)),
        train_dataset=train,
        eval_dataset=evaluation,
        reward_funcs=reward_funcs,
        world_size=ns.num_processes,
        call_timeout=guards.probes.call_timeout,
    )
    return ctx, guards, note


def _tokenizer(path: str) -> Any:
    from rl_guards.chat.preflight import load_tokenizer

    return load_tokenizer(path)


def _preflight_overrides(guards: GuardsConfig, ns: argparse.Namespace, own: dict[str, Any]) -> None:
    sft = ns.sft_tokenizer or own.get("sft_tokenizer")
    probe = ns.length_probe or own.get("length_probe")
    if sft:
        guards.preflight.sft_tokenizer = sft
    if probe:
        guards.preflight.length_probe = probe


def _first_format_context(ns: argparse.Namespace, data: dict[str, Any]) -> tuple[Any, GuardsConfig, str]:
    """The run context from the first preflight format (GRPOConfig fields + dataset/tokenizer keys)."""
    from rl_guards.engine.start_checks import context_without_trainer

    own = {k: data.pop(k) for k in OWN_KEYS if k in data}
    guards = _guards_config(own.get("rl_guards"), ns)
    tokenizer_dir = ns.tokenizer or own.get("tokenizer_name_or_path") or own.get("model_name_or_path")
    if not tokenizer_dir:
        raise ConfigError(f"{ns.config}: set model_name_or_path (or tokenizer_name_or_path), or pass --tokenizer")
    if not Path(tokenizer_dir).is_dir():
        raise ConfigError(f"tokenizer {tokenizer_dir}: not a local directory (preflight never downloads)")
    args, note = build_grpo_config(data)
    train_path = ns.dataset or own.get("dataset")
    eval_path = ns.eval_dataset or own.get("eval_dataset")
    _preflight_overrides(guards, ns, own)
    ctx = context_without_trainer(
        args,
        _tokenizer(str(tokenizer_dir)),
        train_dataset=load_local_dataset(train_path) if train_path else None,
        eval_dataset=load_local_dataset(eval_path) if eval_path else None,
        world_size=ns.num_processes,
    )
    return ctx, guards, note


__all__ = ["build_grpo_config", "load_local_dataset", "read_config", "register", "run"]
