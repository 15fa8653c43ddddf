"""The reward probes on tinker-cookbook envs, through the cookbook's own loop on the local backend: each probe's text
is stepped through the row's env (``rl_guards.reward_calls.tinker.TinkerCaller``: the renderer's tokenizer, its stop
token, ``env.step``). Planted graders (``rl_guards.testing.tinker_envs.TinyTaskEnv``) are caught, their clean twins
stay silent; a grader that hangs on a probe's text is left out while the loop trains on; raise mode stops the loop
before the batch trains."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

pytestmark = pytest.mark.slow

# The tiny model's steps take a fraction of a second where a real one takes tens: at the default budget (2 % of the
# run's time) the probes would not fit into a short run (tests/rewards/test_reward_probes.py does the same). The run's
# clock starts when the first batch is decided (its generation is not counted), so the first probe is at step 1.
PROBES = ["probes.budget=100"]
ARITH = {"tasks": ("arith",), "planted_tasks": ("arith",), "groups": 4, "steps": 2}
# The tiny model answers in 1-2 characters; a text[:64] only matters past 64 characters, so these runs sample
# without stop sequences to max_tokens (~100 characters), and leave out the two guards such runs trip by design.
QUIET = ["truncation.enabled=false", "think_tags.enabled=false"]
LONG = {"stop": False, "max_tokens": 128, "guards_set": [*PROBES, *QUIET]}


def _rows_probed(result: Any) -> int:
    """Rows the env reward was scored on by the probes (all rounds)."""
    coverage = result.run.guard("probes").coverage
    return sum(coverage["functions"]["env"]["rows"].values()) if coverage else 0


def test_a_grader_of_text_64_reads_a_prefix_and_its_whole_text_twin_is_silent(cookbook_run: Any) -> None:
    planted = cookbook_run(**ARITH, **LONG, grader="last_number_64")
    assert planted.error is None, planted.error
    assert planted.kinds() == {("probes", "reads_prefix:env")}, planted.run.summary()
    finding = next(f for f in planted.run.findings if f.kind == "reads_prefix:env")
    assert finding.severity == "warning" and re.search(r"seen on \d+ of the \d+ rows probed", finding.message)
    # the cut, narrowed: a 1-2 digit answer is read whole up to 62-63 characters of text before it
    assert re.search(r"reads only the first 6[1-4]-6[2-4] characters", finding.message), finding.message
    assert "What is" in finding.message  # the row's question
    twin = cookbook_run(**ARITH, **LONG, grader="last_number")
    assert twin.error is None, twin.error
    assert twin.kinds() == set(), twin.run.summary()
    assert _rows_probed(twin) >= 3, twin.run.summary()  # probed, and silent


def test_a_step_that_grades_the_thinking_is_caught_and_the_cookbooks_own_step_is_silent(cookbook_run: Any) -> None:
    # ProblemEnv.step grades get_text_content(parse_response(tokens)): the thinking is parsed out, so a check_answer
    # never sees it on a cleanly ended response; a recipe's step that grades the decoded tokens does
    planted = cookbook_run(**ARITH, renderer="qwen3", grader="first_number", raw_text=True, guards_set=PROBES)
    assert planted.error is None, planted.error
    assert planted.kinds() == {("probes", "reads_thinking:env")}, planted.run.summary()
    # the same check_answer through the cookbook's own step, with the HTML trace of every group on
    twin = cookbook_run(**ARITH, renderer="qwen3", grader="first_number", guards_set=PROBES,
                        config_overrides={"num_groups_to_log": 4})  # fmt: skip
    assert twin.error is None, twin.error
    assert twin.kinds() == set(), twin.run.summary()
    assert _rows_probed(twin) >= 3, twin.run.summary()
    # the probes' steps (at step 1) went into neither the cookbook's traces nor its timing: 16 rollouts, 16 steps
    logged = [p for p in twin.log_path.rglob("*") if p.is_file() and p.suffix in (".html", ".json", ".jsonl")]
    assert (twin.log_path / "iteration_000001" / "train.html") in logged
    assert not [p for p in logged if "Thinking about the question" in p.read_text(errors="replace")]
    assert (twin.log_path / "iteration_000001" / "train.html").read_text().count("Reward components") == 16
    assert [r["time/env_step:count"] for r in twin.metrics if "time/env_step:count" in r] == [16, 16]


def test_the_arithmetic_example_is_silent_with_the_probes_on(tiny: Any, tmp_path: Path, capsys: Any) -> None:
    spec = importlib.util.spec_from_file_location(
        "tinker_arithmetic", Path(__file__).resolve().parents[2] / "examples" / "tinker_arithmetic.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    log = tmp_path / "arith"
    status = example.main(["--log_path", str(log), "--steps", "2", "--guards_set", *PROBES, "metrics.level=full"])
    out = capsys.readouterr().out
    assert status == 0 and "rl_guards: no findings." in out, out
    assert re.search(r"probes: [1-9]\d* round\(s\)", out), out
    rows = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("env/all/rl_guards/probes/probed_rows", 0) > 0 for r in rows)


def test_a_grader_that_hangs_on_a_probe_text_is_left_out_and_the_loop_trains_on(cookbook_run: Any) -> None:
    import time

    start = time.perf_counter()
    result = cookbook_run(**{**ARITH, "steps": 3}, grader="stall", guards_set=[*PROBES, "probes.every_steps=1"])
    spent = time.perf_counter() - start
    assert result.error is None, result.error
    assert result.kinds() == {("probes", "stalled:env")}, result.run.summary()
    stalled = next(f for f in result.run.findings if f.kind == "stalled:env")
    assert "the last text it read:" in stalled.message, stalled.message
    assert [r["step"] for r in result.metrics if "env/all/reward/total" in r] == [0, 1, 2]
    assert result.backend.calls["/optim_step"] == 3
    assert "left out after it stalled" in result.run.guard("probes").summary_text()
    assert spent < 120, spent  # one deadline waited for, not the grader's hour


def test_raise_mode_stops_the_loop_before_the_batch_trains(cookbook_run: Any) -> None:
    result = cookbook_run(**ARITH, **{**LONG, "guards_set": [*LONG["guards_set"], "probes.mode=raise"]},
                          grader="last_number_64")  # fmt: skip
    assert type(result.error).__name__ == "RewardProbeError", result.error
    assert str(result.error).startswith("[rl_guards/probes]")
    stop = next(f for f in result.run.findings if f.kind == "reads_prefix:env")
    # raised from the batch's last group: the steps before it trained, its own did not
    assert result.backend.calls.get("/forward_backward", 0) == stop.step
    records = [json.loads(line) for line in (result.log_path / "rl_guards" / "findings.jsonl").read_text().splitlines()]
    assert {r["type"] for r in records} >= {"finding", "stop"}
