"""Issue 11 #16: messages that misled. Each case asserts the cause is named first and the misleading advice is
gone: a typo'd route key in raise mode, a StrayThinkPenalty that is already there, a reward stuck at a constant,
a pre-rendered string prompt with a think prefill, and check-template's exit codes on every TRL template."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from test_tasks_guards import make_batch, run

from rl_guards.chat.preflight import build_preflight_report
from rl_guards.config import GuardsConfig
from rl_guards.errors import DeadGradientError, RoutingError, ThinkMarkupError
from rl_guards.guards.base import RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.think_tags import ThinkTagsGuard
from rl_guards.rewards.stray_think import StrayThinkPenalty
from rl_guards.testing import available_chat_templates, build_tokenizer, tiny_grpo_config

TYPO_ROUTES = {"routing": {"routes": {"maht": ["math_ok"], "code": ["code_ok"]}}}  # "math", misspelt


def _typo_batch() -> Any:
    # math rows scored by math_ok, which the routes give to the task "maht" that never comes
    return make_batch(["math", "math", "code", "code"], [[1.0, None], [0.0, None], [None, 1.0], [None, 0.0]])


def test_raise_mode_names_the_typod_route_key_first() -> None:
    with pytest.raises(RoutingError) as raised:  # 0.1: "misrouted score" / "unscored rows", the typo unnamed
        run(RoutingGuard, [_typo_batch()], TYPO_ROUTES, mode="raise")
    message = str(raised.value)
    assert "rows of tasks that no route names" in message
    assert "route key 'maht' matches no row, and looks like the task 'math'" in message
    _, session = run(RoutingGuard, [_typo_batch()], TYPO_ROUTES, mode="warn")
    assert next(f.kind for f in session.findings) == "unrouted_task"  # warn mode: the same order


def _stray_tags_batch() -> Any:
    batch = make_batch(
        ["chat"] * 4,
        [[1.0], [0.0], [1.0], [0.0]],
        names=["judge"],
        completions=["<think>hm</think>yes", "<think>no</think>no", "<think>a</think>b", "<think>c</think>d"],
    )
    batch.thinking = [False] * 4  # non-thinking rows that think anyway
    return batch


@pytest.mark.parametrize("enabled", [True, False])
def test_think_tags_hint_knows_the_penalty_is_already_there(enabled: bool) -> None:
    penalty = StrayThinkPenalty(weight=2.0, enabled=enabled)
    ctx = RunContext(reward_funcs=[penalty], chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(ThinkMarkupError) as raised:
        run(ThinkTagsGuard, [_stray_tags_batch()], {"think_tags": {"max_anomaly_rate": 0.1}}, ctx, mode="raise")
    message = str(raised.value)
    assert "add rl_guards.rewards.stray_think.StrayThinkPenalty" not in message  # 0.1 said to add it
    if enabled:
        assert "StrayThinkPenalty (weight 2) is already in reward_funcs: raise its weight" in message
    else:
        assert "StrayThinkPenalty in reward_funcs is disabled: enable it" in message
    without = RunContext(chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(ThinkMarkupError, match=r"add rl_guards\.rewards\.stray_think\.StrayThinkPenalty"):
        run(ThinkTagsGuard, [_stray_tags_batch()], {"think_tags": {"max_anomaly_rate": 0.1}}, without, mode="raise")


def test_a_constant_reward_is_suspected_before_the_task() -> None:
    stuck = [make_batch(["math"] * 4, [[0.0]] * 4, names=["math_ok"], step=s) for s in range(3)]
    with pytest.raises(DeadGradientError) as raised:
        run(DeadGroupGuard, stuck, {"dead_groups": {"warn_after_steps": 2}}, mode="raise")
    message = str(raised.value)
    reward_first = message.index("first check the reward function")
    assert "num_generations" not in message[:reward_first]  # 0.1: "too hard: raise num_generations" came first
    # A constant score is no pass/fail evidence: no pass rate, so no group-size advice is claimed for it.
    assert "pass rate" not in message
    guard, session = run(DeadGroupGuard, stuck, {"dead_groups": {"warn_after_steps": 2}})
    guard.on_train_end(session.reporter(guard.name, guard.config, 3))
    assert ("dead_groups", "group_size_advice") not in session.notes


def test_a_pre_rendered_string_prompt_with_a_think_prefill_is_not_raw_text(tmp_path: Path) -> None:
    tokenizer = build_tokenizer()
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], tokenize=False, add_generation_prompt=True
    )
    strings = Dataset.from_dict({"prompt": [rendered + "<think>\n"] * 2, "task": ["arith"] * 2})
    report = build_preflight_report(tiny_grpo_config(tmp_path), tokenizer, strings)
    [finding] = report.find("train_untemplated")
    assert finding.severity == "info" and "no chat markup" not in finding.message  # 0.1: "raw text, no markup"
    assert "pre-rendered strings" in finding.message and "think prefill" in finding.message
    cut = Dataset.from_dict({"prompt": [rendered[:-12]] * 2, "task": ["arith"] * 2})  # markup, but no turn opened
    [finding] = build_preflight_report(tiny_grpo_config(tmp_path), tokenizer, cut).find("train_untemplated")
    assert finding.severity == "warning" and "with chat markup, but they do not end" in finding.message


def _check_template(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rl_guards.cli.main", "check-template", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_check_template_exit_codes_on_every_trl_template() -> None:
    # One process for the sweep: the CLI's main() in a loop (each call builds its tokenizer, as the CLI does).
    script = (
        "import contextlib, io, sys\n"
        "from rl_guards.cli.main import main\n"
        "from rl_guards.testing import available_chat_templates\n"
        "for name in available_chat_templates():\n"
        "    for extra in ([], ['--prefill', '<think>\\\\n']):\n"
        "        out = io.StringIO()\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            code = main(['check-template', name, *extra])\n"
        "        print(name, bool(extra), code, 'could not check' in out.getvalue())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    results = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    assert len(results) == 2 * len(available_chat_templates())
    for name, _, code, said in results:
        assert code in ("0", "1", "2"), (name, code)
        assert (code == "2") == (said == "True"), name  # 2 exactly when a render failed, and it says so
    codes = {(name, prefill): code for name, prefill, code, _ in results}
    assert codes[("llama3", "False")] == "0"  # 0.1: 0 having checked nothing (and 1 with a jinja traceback)
    assert codes[("qwen3", "True")] == "1"  # a doubled <think> prefill is blocking
    assert _check_template("no_such_template").returncode == 2
    llama = _check_template("llama3")
    assert "rendering with bos_token=''" in llama.stdout and "Traceback" not in llama.stderr


def test_guards_config_of_the_cases_is_valid() -> None:
    GuardsConfig.from_dict(TYPO_ROUTES)
