"""The preflight report on real tokenizers and TRL's real chat templates, the guard, the CLI, a real GRPOTrainer."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from rl_guards.chat.preflight import build_preflight_report, template_fingerprint
from rl_guards.config import GuardsConfig
from rl_guards.console import capture
from rl_guards.core.preflight import TrainingChoices
from rl_guards.errors import PreflightError
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.preflight import PreflightGuard
from rl_guards.testing import build_tokenizer, make_dataset, tiny_grpo_config

THINK_OFF = {"enable_thinking": False}
OFF_SUFFIX = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


@pytest.fixture(scope="module")
def train() -> Dataset:
    return make_dataset(n_per_task=4)


def _args(tmp_path: Path, **overrides: Any) -> Any:
    return tiny_grpo_config(tmp_path / "out", **{"chat_template_kwargs": THINK_OFF, **overrides})


def _prerendered_eval(tokenizer: Any, train: Dataset, **kwargs: Any) -> Dataset:
    """Eval prompts stored as strings rendered by some eval harness with ``kwargs``."""
    prompts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True, **kwargs) for p in train["prompt"]
    ]
    return Dataset.from_dict({"prompt": prompts, "task": train["task"], "answer": train["answer"]})


def test_choices_from_a_real_grpo_config(tmp_path: Path) -> None:
    choices = TrainingChoices.from_args(_args(tmp_path, lr_scheduler_type="cosine", loss_type="dr_grpo"))
    assert choices.lr_scheduler_type == "cosine" and choices.loss_type == "dr_grpo"
    assert choices.scale_rewards == "group" and choices.beta == 0.0
    assert choices.groups_per_generation_batch == 2  # batch 8, 4 generations
    assert choices.chat_template_kwargs == THINK_OFF


def test_consistent_run_has_no_blocking_finding_and_shows_the_real_rendering(
    tmp_path: Path, tokenizer: Any, train: Dataset
) -> None:
    report = build_preflight_report(_args(tmp_path), tokenizer, train, train)
    assert report.blocking == []
    [train_fp] = report.templates
    assert train_fp.generation_suffix == OFF_SUFFIX  # rendered by qwen3.jinja, not written from memory
    expected = tokenizer.apply_chat_template(
        train[0]["prompt"], tokenize=False, add_generation_prompt=True, **THINK_OFF
    )
    assert report.examples[0] == ("train", expected)
    assert {label for label, _ in report.examples} == {"train", "eval"}
    assert report.find("eval_dataset")[0].severity == "info"


def test_eval_dataset_rendered_with_other_kwargs_is_blocking_and_the_diff_shows_the_line(
    tmp_path: Path, tokenizer: Any, train: Dataset
) -> None:
    eval_ds = _prerendered_eval(tokenizer, train, enable_thinking=True)
    report = build_preflight_report(_args(tmp_path), tokenizer, train, eval_ds)
    [finding] = report.blocking
    assert finding.code == "eval_template_mismatch"
    assert "8/8 eval prompts do not end with" in finding.message
    lines = finding.detail.splitlines()
    assert "-<think>↵" in lines and "-</think>↵" in lines
    assert " <|im_start|>assistant↵" in lines  # context line shared by both


def test_eval_prerendered_with_the_training_kwargs_passes(tmp_path: Path, tokenizer: Any, train: Dataset) -> None:
    report = build_preflight_report(_args(tmp_path), tokenizer, train, _prerendered_eval(tokenizer, train, **THINK_OFF))
    assert report.blocking == []
    assert "pre-rendered strings that end with training's generation prompt" in report.find("eval_dataset")[0].message


def test_external_eval_kwargs_are_compared(tmp_path: Path, tokenizer: Any, train: Dataset) -> None:
    report = build_preflight_report(
        _args(tmp_path), tokenizer, train, eval_chat_template_kwargs={"enable_thinking": True}
    )
    [finding] = report.blocking
    assert finding.code == "eval_external_template_mismatch"
    assert '{"enable_thinking": false} vs {"enable_thinking": true}' in finding.message
    same = build_preflight_report(_args(tmp_path), tokenizer, train, eval_chat_template_kwargs=THINK_OFF)
    assert same.blocking == [] and same.find("eval_external_template_same")


@pytest.mark.parametrize(
    ("sft_template", "code", "severity"),
    [
        # Ignores enable_thinking=False: SFT taught turns without the empty think block RL now prefills.
        ("qwen3_instruct_2507", "sft_template_mismatch", "warning"),
        ("qwen3_training", "sft_template_equivalent", "info"),  # other template text, same rendering here
        ("qwen3", "sft_template_same", "info"),
    ],
)
def test_sft_tokenizer_dir_is_compared(
    tmp_path: Path, tokenizer: Any, train: Dataset, sft_template: str, code: str, severity: str
) -> None:
    sft_dir = tmp_path / "sft"
    build_tokenizer(chat_template=sft_template).save_pretrained(sft_dir)
    tokenizer_dir = tmp_path / "rl"
    build_tokenizer().save_pretrained(tokenizer_dir)
    report = build_preflight_report(_args(tmp_path), str(tokenizer_dir), train, sft_tokenizer=str(sft_dir))
    [finding] = [f for f in report.findings if f.code.startswith("sft_")]
    assert (finding.code, finding.severity) == (code, severity)
    if code == "sft_template_mismatch":
        assert "-<think>↵" in finding.detail.splitlines() and finding.detail.startswith("--- train\n+++ sft")


def test_string_train_prompts_without_markup_are_a_note(tmp_path: Path, tokenizer: Any) -> None:
    plain = Dataset.from_dict({"prompt": ["What is 2+2?", "Repeat the word: apple"], "task": ["arith", "echo"]})
    report = build_preflight_report(_args(tmp_path), tokenizer, plain)
    [finding] = report.find("train_untemplated")
    # raw-text prompts are a first-class TRL dataset type: said, never a warning (issue 20 #8)
    assert finding.severity == "info" and "no chat markup" in finding.message
    assert report.examples[0] == ("train", "What is 2+2?")


def test_length_probe_file_makes_a_tiny_cap_blocking(tmp_path: Path, tokenizer: Any, train: Dataset) -> None:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"p50": 40, "p90": 90, "p99": 120, "max": 150, "cap": 512, "share_at_cap": 0.0}))
    config = GuardsConfig.from_dict({"preflight": {"length_probe": str(probe)}}).preflight
    report = build_preflight_report(_args(tmp_path), tokenizer, train, config=config)  # cap 16
    assert [f.code for f in report.blocking] == ["completion_length"]


def test_fingerprint_ids_follow_the_vocabulary(tokenizer: Any) -> None:
    small = template_fingerprint(tokenizer, chat_template_kwargs=THINK_OFF)
    other = template_fingerprint(build_tokenizer(vocab_size=4096), chat_template_kwargs=THINK_OFF)
    assert small.rendered == other.rendered and small.ids_sha != other.ids_sha  # added tokens moved


# ----- the guard, by hand --------------------------------------------------------------------------------


def _guard(mode: str, tmp_path: Path, tokenizer: Any, train: Dataset, eval_ds: Dataset | None) -> PreflightGuard:
    guard = PreflightGuard(GuardsConfig.from_dict({"preflight": {"mode": mode}}))
    guard.setup(RunContext(args=_args(tmp_path), tokenizer=tokenizer, train_dataset=train, eval_dataset=eval_ds))
    return guard


def test_guard_raise_mode_stops_on_blocking(
    tmp_path: Path, tokenizer: Any, train: Dataset, caplog: pytest.LogCaptureFixture
) -> None:
    guard = _guard("raise", tmp_path, tokenizer, train, _prerendered_eval(tokenizer, train, enable_thinking=True))
    session = GuardSession()
    with pytest.raises(PreflightError, match="eval_template_mismatch") as info:
        guard.on_train_begin(session.reporter("preflight", guard.config, 0))
    assert "-<think>↵" in str(info.value) and info.value.guard == "preflight"
    assert "[rl_guards] preflight: 1 blocking" in caplog.text  # the one summary line (the report: preflight.txt)
    assert session.metrics["rl_guards/preflight/blocking"] == [1.0]


@pytest.mark.parametrize("mode", ["warn", "log"])
def test_guard_warn_and_log_modes_do_not_stop(tmp_path: Path, tokenizer: Any, train: Dataset, mode: str) -> None:
    guard = _guard(mode, tmp_path, tokenizer, train, _prerendered_eval(tokenizer, train, enable_thinking=True))
    session = GuardSession()
    with capture() as caught:
        guard.on_train_begin(session.reporter("preflight", guard.config, 0))
    ours = caught.messages
    # warn: the blocking finding and each warning row, once each; log: nothing shown
    assert len(ours) == (1 + len(guard.last_report.warnings) if mode == "warn" else 0)
    assert session.counts[("preflight", "eval_template_mismatch")] == 1
    assert session.metrics["rl_guards/preflight/blocking"] == [1.0]
    assert session.metrics["rl_guards/preflight/warnings"] == [float(len(guard.last_report.warnings))]


def test_guard_finding_kind_is_the_code_in_every_mode(tmp_path: Path, tokenizer: Any, train: Dataset) -> None:
    kinds = {}
    for mode in ("raise", "warn", "log"):
        guard = _guard(mode, tmp_path, tokenizer, train, _prerendered_eval(tokenizer, train, enable_thinking=True))
        session = GuardSession()
        session.defer = True  # as the TRL adapter runs it: a stop waits for settle()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            guard.on_train_begin(session.reporter("preflight", guard.config, 0))
            stop = session.settle()
        assert isinstance(stop, PreflightError) if mode == "raise" else stop is None
        kinds[mode] = {kind for guard_name, kind in session.counts if guard_name == "preflight"}
    assert kinds["raise"] == kinds["warn"] == kinds["log"] == {"eval_template_mismatch"}  # 437f4ff: "blocking"


def test_guard_raise_mode_passes_a_consistent_run(tmp_path: Path, tokenizer: Any, train: Dataset) -> None:
    guard = _guard("raise", tmp_path, tokenizer, train, train)
    session = GuardSession()
    guard.on_train_begin(session.reporter("preflight", guard.config, 0))
    assert guard.last_report is not None and guard.last_report.blocking == []
    # No length probe is a note in the report (issue 20 #1), not a finding; nothing is a violation.
    assert ("preflight", "completion_length") not in session.counts
    assert "rl_guards/preflight/violations" not in session.metrics


# ----- the CLI ---------------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    from rl_guards.cli import preflight

    parser = argparse.ArgumentParser(prog="rl-guards")
    preflight.register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(argv)
    return int(ns.func(ns))


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory: pytest.TempPathFactory, train: Dataset) -> Path:
    root = tmp_path_factory.mktemp("preflight_cli")
    build_tokenizer().save_pretrained(root / "tok")
    train.to_json(str(root / "train.jsonl"))
    return root


def _write_config(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_prints_the_report_and_exits_0_without_blocking(cli_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(
        cli_dir,
        "ok.yaml",
        f"model_name_or_path: {cli_dir / 'tok'}\ndataset: {cli_dir / 'train.jsonl'}\n"
        "loss_type: dr_grpo\nscale_rewards: none\nlr_scheduler_type: constant_with_warmup\nwarmup_steps: 10\n"
        "chat_template_kwargs: {enable_thinking: false}\nuse_cpu: true\nbf16: false\n",
    )
    assert _cli(["preflight", str(config), "--json", str(cli_dir / "ok.json")]) == 0
    out = capsys.readouterr().out
    assert "rl_guards preflight: 0 blocking" in out and "Dr. GRPO (neither normalisation)" in out
    assert "<think>↵" in out  # rendered examples from the dataset file
    data = json.loads((cli_dir / "ok.json").read_text())
    assert data["choices"]["loss_type"] == "dr_grpo"


def test_cli_exits_1_on_blocking(cli_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(
        cli_dir,
        "bad.yaml",
        f"model_name_or_path: {cli_dir / 'tok'}\ndataset: {cli_dir / 'train.jsonl'}\n"
        "chat_template_kwargs: {enable_thinking: false}\nuse_cpu: true\nbf16: false\n"
        "rl_guards:\n  preflight:\n    eval_chat_template_kwargs: {enable_thinking: true}\n",
    )
    assert _cli(["preflight", str(config)]) == 1
    assert "eval_external_template_mismatch" in capsys.readouterr().out


def test_cli_gpu_config_is_checked_on_cpu(cli_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # bf16 is GRPOConfig's default; this machine cannot build it, so the CLI retries with use_cpu and says so.
    config = _write_config(cli_dir, "gpu.yaml", f"model_name_or_path: {cli_dir / 'tok'}\nloss_type: grpo\n")
    assert _cli(["preflight", str(config)]) == 0
    captured = capsys.readouterr()
    assert "use_cpu=True" in captured.err and "[length_normalisation] loss_type='grpo'" in captured.out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("learning_rate: 1.0e-6\n", "set model_name_or_path"),
        ("model_name_or_path: /nonexistent/tok\n", "not a local directory"),
        ("model_name_or_path: {tok}\nnot_a_field: 1\n", "not a GRPOConfig field"),
        ("model_name_or_path: {tok}\nrl_guards: {{preflight: {{bogus: 1}}}}\n", "preflight.bogus"),
    ],
)
def test_cli_config_errors_exit_2(cli_dir: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    config = _write_config(cli_dir, "err.yaml", text.format(tok=cli_dir / "tok"))
    assert _cli(["preflight", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_rloo_config_gets_advice_only_about_its_own_settings(tokenizer: Any, train: Dataset, tmp_path: Path) -> None:
    from trl import GRPOConfig, RLOOConfig

    from rl_guards.chat.preflight import build_preflight_report

    rloo = RLOOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    report = build_preflight_report(rloo, tokenizer, train)
    codes = {f.code for f in report.sorted_findings()}
    text = " ".join(f.message for f in report.sorted_findings())
    assert "rloo_advantages" in codes and "length_normalisation" not in codes and "std_normalisation" not in codes
    assert "loss_type" not in text and "scale_rewards" not in text and "RLOOConfig default" in text

    class MyGRPOConfig(GRPOConfig):
        pass

    grpo = MyGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    codes = {f.code for f in build_preflight_report(grpo, tokenizer, train).sorted_findings()}
    assert {"length_normalisation", "std_normalisation"} <= codes and "rloo_advantages" not in codes
