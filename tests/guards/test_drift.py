"""Behaviour drift: the statistics (pure), a planted run where a length-paying reward rises while behaviour drifts
(caught, with the probe prompt's completions at baseline and now; its clean twin silent), resume keeping the probe
set and the baseline, and where people look (rl-guards drift, the HTML report)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.cli.main import main
from rl_guards.core.behaviour import ROW_FIELDS, BehaviourStats, Thresholds, compare, distinct_n, repetition, row_stats
from rl_guards.core.think_markup import THINK
from rl_guards.guards.drift import DriftGuard
from rl_guards.rollouts.report import write_report
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import arith_correct, completion_text, echo_match


@pytest.mark.parametrize(
    ("ids", "expected"),
    [([1, 2, 3, 4, 5, 6], 0.0), ([1, 2, 3, 4] * 3, 5 / 9), ([7] * 10, 6 / 7), ([1, 2], 0.0)],
)
def test_repetition(ids: list[int], expected: float) -> None:
    assert repetition(ids) == pytest.approx(expected)


def test_distinct_n() -> None:
    assert distinct_n([[1, 2, 3], [4, 5, 6]]) == 1.0
    assert distinct_n([[1, 2, 3], [1, 2, 3]]) == 0.5


@pytest.mark.parametrize(
    ("change", "stat"),
    [
        ({"length": 25.0}, "length"),
        ({"length": 4.0}, "length"),
        ({"repetition": 0.35}, "repetition"),
        ({"thinking_share": 0.2}, "thinking_share"),
        ({"empty_answer_rate": 0.5}, "empty_answer_rate"),
        ({"distinct_2": 0.4}, "distinct_2"),
        ({"non_ascii": 0.3}, "non_ascii"),
        ({"thinking_chars": 130.0}, "thinking_chars"),  # the thinking grew x2.6 (the completion's length did not)
        ({"thinking_chars": 15.0}, "thinking_chars"),
    ],
)
def test_compare_flags_each_statistic(change: dict[str, float], stat: str) -> None:
    before = BehaviourStats(
        completions=8, length=10.0, repetition=0.05, distinct_2=0.8, thinking_share=1.0, thinking_chars=50.0
    )
    after = BehaviourStats(**{**before.to_dict(), **change})
    assert [d.stat for d in compare(before, after, Thresholds())] == [stat]
    assert compare(before, BehaviourStats(**before.to_dict()), Thresholds()) == []


def test_thinking_length_within_its_ratio_is_not_drift() -> None:
    before = BehaviourStats(completions=8, length=10.0, thinking_share=1.0, thinking_chars=50.0)
    for chars in (30.0, 80.0, 99.0):
        assert compare(before, BehaviourStats(**{**before.to_dict(), "thinking_chars": chars}), Thresholds()) == []
    # a few characters either way is noise, whatever the ratio (a tiny model's 6.5 -> 2.25 on a 300-step run)
    short = BehaviourStats(completions=8, length=10.0, thinking_share=1.0, thinking_chars=6.5)
    for chars in (2.25, 20.0, 38.0):
        assert compare(short, BehaviourStats(**{**short.to_dict(), "thinking_chars": chars}), Thresholds()) == []
    grown = BehaviourStats(**{**short.to_dict(), "thinking_chars": 39.0})
    assert [d.stat for d in compare(short, grown, Thresholds())] == ["thinking_chars"]
    no_thinking = BehaviourStats(completions=8, length=10.0)  # nothing to compare a ratio with: share says it
    assert compare(no_thinking, BehaviourStats(**{**no_thinking.to_dict(), "thinking_chars": 40.0}), Thresholds()) == []


@pytest.mark.parametrize(
    ("text", "empty", "chars"),
    [
        ("<think>\nx\n</think>\n\n<|im_end|>", 1.0, 0.0),
        ("<think>\nx\n</think><|im_end|>", 1.0, 0.0),
        ("<think>\nx\n</think>\n  \n<|endoftext|>", 1.0, 0.0),
        ("<|im_end|>", 1.0, 0.0),
        ("<think>\nx\n</think>\n\n7<|im_end|>", 0.0, 1.0),  # the clean twin: an answer, then EOS
        ("seven<|im_end|><|endoftext|>", 0.0, 5.0),
    ],
)
def test_special_tokens_are_not_answer_text(text: str, empty: float, chars: float) -> None:
    special = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
    stats = row_stats(text, [1, 2, 3], terminated=True, markup=THINK, special_tokens=special)
    assert (stats.empty_answer, stats.answer_chars) == (empty, chars)


@pytest.mark.slow
def test_the_guard_counts_an_answer_of_only_special_tokens_as_empty(make_grpo_trainer: Any) -> None:
    """The probe completions' ids as the trainer's tokenizer writes them, decoded and measured as the guard does."""
    trainer = make_grpo_trainer(max_steps=1)
    run = rl_guards.install(trainer, CONFIG, guards=[DriftGuard])
    guard, tok = run.guard("drift"), trainer.processing_class
    texts = [f"<think>\nx\n</think>{answer}<|im_end|>" for answer in ("\n\n", "\n \n", "\n\n7")]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    out = {"completion_ids": ids, "terminated": [True] * 3, "rewards": [], "reward_names": [], "group_size": 3}
    numbers, _ = guard._numbers([{"prompt": [{"role": "user", "content": "What is 3+4?"}]}], out, 3)
    empty, chars = 2 + ROW_FIELDS.index("empty_answer"), 2 + ROW_FIELDS.index("answer_chars")
    assert [(r[empty], r[chars]) for r in numbers] == [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]


def pays_length(completions: list[Any], **kwargs: Any) -> list[float]:
    """Planted: a 'quality' reward that pays for length (hackable)."""
    return [min(len(completion_text(c)) / 100.0, 3.0) for c in completions]


def _trainer(make_grpo_trainer: Any, funcs: list[Any], out: Path, **overrides: Any) -> Any:
    settings = {
        "max_completion_length": 64,
        "max_steps": 12,
        "learning_rate": 1e-3,  # large on purpose: the tiny model's behaviour moves within a few steps
        "save_strategy": "steps",
        "save_steps": 6,
        **overrides,
    }
    return make_grpo_trainer(
        reward_funcs=funcs, train_dataset=make_dataset(n_per_task=8, thinking=True), output_dir=out, **settings
    )


CONFIG = {"drift": {"mode": "warn"}, "probes": {"enabled": False}, "reward_sanity": {"enabled": False}}


@pytest.mark.slow
def test_planted_drift_is_caught_with_evidence_and_clean_twin_is_silent(
    make_grpo_trainer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = _trainer(make_grpo_trainer, [pays_length], tmp_path / "planted")
    run = rl_guards.install(planted, CONFIG)
    with shows("drifted"):
        planted.train()
    found = [f for f in run.findings if f.guard == "drift"]
    assert found, run.summary()
    message = found[0].message
    assert "training reward rose" in message and "length" in message and "->" in message
    assert "baseline:" in message and f"step {found[0].step}:" in message and "probe prompt:" in message
    assert "<think>" in message or "<|im_end|>" in message  # completions decoded with special tokens visible

    clean = _trainer(make_grpo_trainer, [arith_correct, echo_match], tmp_path / "clean")
    clean_run = rl_guards.install(clean, CONFIG)
    clean.train()
    assert not [f for f in clean_run.findings if f.guard == "drift"], clean_run.summary()
    assert clean_run.guard("drift").checkpoints == [6, 12]

    capsys.readouterr()
    assert main(["drift", str(tmp_path / "planted"), "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "(baseline)" in out and "biggest changes since the baseline" in out and "│" in out
    page = write_report(tmp_path / "planted").read_text()
    assert "Behaviour drift on the probe prompts" in page and "changes since the baseline" in page
    logged = {k for h in planted.state.log_history for k in h}
    assert "rl_guards/drift/alarms" in logged


@pytest.mark.slow
def test_a_checkpoint_within_the_first_reward_window_compares_the_reward_halves(
    make_grpo_trainer: Any, tmp_path: Path
) -> None:
    """reward_window 12 > both checkpoints (6, 12): the first and the last window would be the same batches, the
    reward would never rise; the halves of the batches so far are compared instead. Clean twin silent."""
    config = {**CONFIG, "drift": {"mode": "warn", "reward_window": 12}}
    planted = _trainer(make_grpo_trainer, [pays_length], tmp_path / "planted")
    run = rl_guards.install(planted, config)
    with shows("drifted"):
        planted.train()
    found = [f for f in run.findings if f.guard == "drift"]
    assert found and found[0].step <= 12 and "training reward rose" in found[0].message, run.summary()
    guard = run.guard("drift")
    assert set(guard.reward_batches) == {"arith", "echo"}  # train batches per task: the halves split them

    clean = _trainer(make_grpo_trainer, [arith_correct, echo_match], tmp_path / "clean")
    clean_run = rl_guards.install(clean, config)
    clean.train()
    assert not [f for f in clean_run.findings if f.guard == "drift"], clean_run.summary()


@pytest.mark.slow
def test_resume_keeps_the_probe_set_and_the_baseline(make_grpo_trainer: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _trainer(make_grpo_trainer, [pays_length], out, max_steps=6, save_steps=3, learning_rate=1e-6)
    run1 = rl_guards.install(first, CONFIG)
    first.train()
    g1 = run1.guard("drift")
    baseline_file = out / "rl_guards" / "rollouts" / "drift" / "step_000000.json"
    written = baseline_file.stat().st_mtime_ns

    second = _trainer(make_grpo_trainer, [pays_length], out, max_steps=6, save_steps=3, learning_rate=1e-6)
    run2 = rl_guards.install(second, CONFIG)
    second.train(resume_from_checkpoint=str(out / "checkpoint-3"))
    g2 = run2.guard("drift")
    assert g2.indices == g1.indices and g2.tasks == g1.tasks and g2.source == g1.source
    assert g2.baseline == g1.baseline  # restored from checkpoint-3, not generated again
    assert baseline_file.stat().st_mtime_ns == written
    assert g2.checkpoints == [3, 6]
    record = json.loads((out / "rl_guards" / "rollouts" / "drift" / "step_000006.json").read_text())
    assert [p["index"] for p in record["probes"]] == g1.indices


@pytest.mark.slow
def test_probe_set_comes_from_the_eval_set_when_there_is_one(make_grpo_trainer: Any, tmp_path: Path) -> None:
    trainer = make_grpo_trainer(max_steps=1)
    trainer.eval_dataset = make_dataset(n_per_task=3, seed=5)
    run = rl_guards.install(trainer, {"drift": {"prompts_per_task": 2}}, guards=[DriftGuard])
    trainer.train()
    guard = run.guard("drift")
    assert guard.source == "eval" and sorted(guard.tasks) == ["arith", "arith", "echo", "echo"]
    assert guard.baseline and set(guard.baseline) == {"arith", "echo"}


@pytest.mark.parametrize(
    ("means", "expected"),
    [
        ([0.0], None),
        ([0.0, 1.0], None),  # one batch against one other: noise at a few rows a batch, the probe rewards decide
        ([0.0, 1.0, 1.0], None),
        ([0.0, 0.2, 0.8, 1.0], (0.1, 0.9)),  # two batches a half
        ([0.0] * 6 + [1.0] * 6, (0.0, 1.0)),
    ],
)
def test_the_training_reward_rise_needs_two_batches_a_half(means: list[float], expected: Any) -> None:
    from rl_guards.config import GuardsConfig

    guard = DriftGuard(GuardsConfig.from_dict({"drift": {"reward_window": 4}}))
    guard.reward_start["t"] = means[:4]
    guard.reward_recent["t"] = means[-4:]
    guard.reward_batches["t"] = len(means)
    got = guard._train_reward("t")
    assert got == expected if expected is None else got == pytest.approx(expected)


# ----- issue 41 item 5: drift/probe_failed gives the fix for its cause ------------------------------------------
def _generated(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = 2 * len(rows)
    return {"group_size": 2, "completion_ids": [[5, 6]] * n, "terminated": [True] * n, "rewards": [[1.0]] * n,
            "reward_names": ["f"], "reward_weights": [1.0]}  # fmt: skip


def _broken_decode(ids: list[int]) -> str:
    raise KeyError("a bug in the probe statistics")


@pytest.mark.parametrize(
    ("cause", "generate", "decode", "fix", "not_said"),
    [
        ("statistics", _generated, _broken_decode, "rl_guards' own code measuring the completions", "free memory"),
        ("oom", lambda rows: {"error": "probe generation failed: generation: OutOfMemoryError: CUDA out of memory"},
         None, "free memory at checkpoints", "report it"),
        ("template", lambda rows: {"error": "probe generation failed: prompt templating: TemplateError: no role"},
         None, "fix its cause", "free memory"),
        ("cause handed over", lambda rows: {"error": "probe generation failed: generation: RuntimeError: x",
                                            "cause": "memory"}, None, "free memory", "report it"),
        ("another rank", lambda rows: {"error": "probe generation failed on rank 1 (the error is in that rank's log)"},
         None, "Read that rank's log", "report it"),
    ],
    ids=["statistics", "oom", "template", "cause handed over", "another rank"],
)  # fmt: skip
def test_probe_failed_gives_the_fix_for_its_cause(
    tmp_path: Path, cause: str, generate: Any, decode: Any, fix: str, not_said: str
) -> None:
    from rl_guards.config import GuardsConfig
    from rl_guards.guards.base import GuardSession, RunContext, run_hook

    guard = DriftGuard(GuardsConfig.from_dict({"drift": {"mode": "warn", "prompts_per_task": 1}}))
    guard.setup(RunContext(output_dir=str(tmp_path), train_dataset=make_dataset(n_per_task=2), probe_generate=generate,
                           decode=decode or (lambda ids: "x")))  # fmt: skip
    session = GuardSession()
    with shows("probe_failed|Every rank skipped the probe"):
        run_hook(guard, "on_train_begin", session, 0)
    [finding] = [f for f in session.findings if f.kind == "probe_failed"]
    assert fix in finding.message  # e1b9f62: "lower drift.prompts_per_task ... or free memory" for every cause
    assert not_said not in finding.message
    assert not [f for f in session.findings if f.kind == "internal_error"]


# ----- issue 41 item 1: the checks before step 0 bound the reward calls TRL did not ask for ------------------------
@pytest.mark.slow
@pytest.mark.parametrize("first", ["drift", "reward_sanity"])
def test_a_reward_function_that_stalls_on_a_check_before_step_0_never_stops_the_run(
    make_grpo_trainer: Any, first: str
) -> None:
    """The first call a function ever gets is a check's at train start (reward sanity's reference answers, or
    drift's baseline probe when sanity is off): it hangs there (a judge API that never answers). The call is cut at
    ``probes.call_timeout``; the check says which function, judges nothing it could not score (no stop: a raise needs
    certainty), the reward probes leave the function out, and training (which calls it as before) runs on.
    Before: drift's probe call had no deadline, and reward sanity, with the stalled function's scores missing, judged
    the weighted total blind and stopped the run (RewardSanityError)."""
    import time

    seen: list[int] = []

    def hangs_once(completions: list[Any], **kwargs: Any) -> list[float]:
        seen.append(len(completions))
        if len(seen) == 1:
            time.sleep(3600)
        return [0.0] * len(completions)

    trainer = make_grpo_trainer(reward_funcs=[hangs_once, arith_correct], max_steps=2)
    config: dict[str, Any] = {"drift": {"mode": "warn", "prompts_per_task": 1},
                              "probes": {"call_timeout": 2.0, "budget": 100.0}}  # fmt: skip
    if first == "drift":
        config["reward_sanity"] = {"enabled": False}
    run = rl_guards.install(trainer, config)
    start = time.perf_counter()
    with shows("past its deadline|could not be checked", level=logging.INFO):
        trainer.train()
    assert time.perf_counter() - start < 300
    assert trainer.state.global_step == 2 and len(seen) >= 3  # trained; training kept calling it
    kind = "stalled:hangs_once" if first == "drift" else "unchecked:hangs_once"
    [finding] = [f for f in run.findings if f.guard == first and f.kind == kind]
    assert "did not return within 2 s" in finding.message, finding.message
    assert "hangs_once: left out after it stalled" in run.guard("probes").summary_text()
    assert run.guard("drift").baseline  # drift's probe went on: its statistics without that function's scores
    assert not [f for f in run.findings if f.guard == "reward_sanity" and f.severity == "error"], run.summary()
