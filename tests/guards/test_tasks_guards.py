"""Task guards on hand-built rollout batches: a clean batch is silent, each planted problem is caught."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.errors import (
    ConfigError,
    DeadGradientError,
    GuardError,
    RewardSanityError,
    RoutingError,
    TruncationError,
)
from rl_guards.guards.base import Guard, GuardSession, RunContext
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.reward_sanity import RewardSanityGuard
from rl_guards.guards.routing import RoutingGuard
from rl_guards.guards.slicing import SlicingGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.guards.truncation import TruncationGuard
from rl_guards.rewards.routing import route
from rl_guards.rewards.sanity import assert_reward_sanity, check_reward_sanity, load_reward_cases
from rl_guards.rewards.slicing import drain_watched, watch_inputs

GUARDS: list[type[Guard]] = [TaskRewardMonitor, RoutingGuard, DeadGroupGuard, TruncationGuard, SlicingGuard]
NAMES = ["math_ok", "code_ok"]


def make_batch(
    tasks: list[str],
    rewards: list[list[float | None]],
    *,
    g: int = 2,
    names: list[str] | None = None,
    completions: list[str] | None = None,
    completion_ids: list[list[int]] | None = None,
    truncated: list[bool] | None = None,
    prompts: list[Any] | None = None,
    columns: dict[str, list[Any]] | None = None,
    mode: str = "train",
    step: int = 1,
) -> RolloutBatch:
    """A batch with TRL-style group advantages computed from the rewards (None counts 0)."""
    n = len(tasks)
    names = names or NAMES[: len(rewards[0])]
    totals = [sum(v for v in row if v is not None) for row in rewards]
    advantages = []
    for start in range(0, n, g):
        group = totals[start : start + g]
        mean = sum(group) / len(group)
        advantages += [t - mean for t in group]
    completions = completions or [f"completion {i} " + "word " * 5 for i in range(n)]
    return RolloutBatch(
        step=step,
        mode=mode,
        num_generations=g,
        reward_names=names,
        reward_weights=[1.0] * len(names),
        rewards=rewards,
        advantages=advantages,
        tasks=tasks,
        completions=completions,
        completion_ids=completion_ids or [[10 + i, 11, 99] for i in range(n)],
        prompt_ids=[[1, 2]] * n,
        truncated=truncated or [False] * n,
        thinking=[None] * n,
        max_completion_length=16,
        prompts=prompts if prompts is not None else [[{"role": "user", "content": f"q{i // g}"}] for i in range(n)],
        columns=columns or {},
    )


def clean_batch() -> RolloutBatch:
    """Two tasks, each scored by its own function only, live groups, nothing truncated or cut."""
    return make_batch(["math", "math", "code", "code"], [[1.0, None], [0.0, None], [None, 1.0], [None, 0.0]])


def run(
    guard_cls: type[Guard],
    batches: list[RolloutBatch],
    config: dict[str, Any] | None = None,
    ctx: RunContext | None = None,
    mode: str = "log",
) -> tuple[Guard, GuardSession]:
    """Run one guard over batches (mode ``log`` by default, so every finding is collected)."""
    cfg = GuardsConfig.from_dict(config or {})
    getattr(cfg, guard_cls.config_field).mode = mode
    guard = guard_cls(cfg)
    guard.setup(ctx or RunContext())
    session = GuardSession()
    guard.on_train_begin(session.reporter(guard.name, guard.config, 0))
    for batch in batches:
        guard.on_batch(batch, session.reporter(guard.name, guard.config, batch.step))
    return guard, session


def kinds(session: GuardSession) -> set[str]:
    return {f.kind for f in session.findings}


@pytest.mark.parametrize("guard_cls", GUARDS, ids=lambda c: c.__name__)
def test_clean_batch_is_silent(guard_cls: type[Guard]) -> None:
    config = {"routing": {"routes": {"math": ["math_ok"], "code": ["code_ok"]}}}
    _, session = run(guard_cls, [clean_batch()] * 3, config, mode="raise")
    assert session.findings == []
    assert session.metrics, f"{guard_cls.__name__} logged nothing"


# ----- planted problems: (guard, config, batch factory, ctx factory, kind, error, words in the message) -----
def _misrouted() -> RolloutBatch:
    return make_batch(["math", "math", "code", "code"], [[1.0, None], [0.0, None], [0.0, 1.0], [1.0, 0.0]])


def _unscored() -> RolloutBatch:
    return make_batch(["math", "math", "code", "code"], [[1.0, None], [None, None], [None, 1.0], [None, 0.0]])


def _unrouted() -> RolloutBatch:
    return make_batch(["math", "math", "poetry", "poetry"], [[1.0, None], [0.0, None], [None, None], [None, None]])


def _unrouted_scored() -> RolloutBatch:
    # code_ok is in no route (global): it scores the poetry rows, so only the missing route is wrong
    return make_batch(["math", "math", "poetry", "poetry"], [[1.0, None], [0.0, None], [None, 1.0], [None, 0.0]])


def _truncated() -> RolloutBatch:
    text = "I keep thinking and thinking and never stop " * 3
    return make_batch(
        ["math", "math", "code", "code"],
        [[1.0, None], [0.0, None], [None, 1.0], [None, 0.0]],
        completions=[text, "short", "ok", "ok"],
        truncated=[True, True, False, False],
    )


def _sliced_prompts() -> RolloutBatch:
    long = [f"document {i}: " + "lorem ipsum " * 300 for i in range(4)]
    return make_batch(
        ["math"] * 8,
        [[1.0], [0.0]] * 4,
        names=["math_ok"],
        prompts=[[{"role": "user", "content": long[i // 2][:3000]}] for i in range(8)],
    )


def _cut_completions() -> RolloutBatch:
    # ids 1..6 decode to "tok1 tok2 ..." below; the reward functions received only the first 8 characters
    return make_batch(
        ["math", "math"],
        [[1.0], [0.0]],
        names=["math_ok"],
        completions=["t1 t2 t3", "t1 t2"],
        completion_ids=[[1, 2, 3, 4, 5, 6], [1, 2]],
    )


def _decode_ctx() -> RunContext:
    return RunContext(decode_text=lambda ids: " ".join(f"t{i}" for i in ids))


PLANTED: list[tuple[str, type[Guard], dict[str, Any], Callable[[], RolloutBatch], Callable[[], RunContext] | None, str, type[GuardError], tuple[str, ...]]] = [  # noqa: E501
    ("misrouted", RoutingGuard, {"routing": {"routes": {"math": ["math_ok"], "code": ["code_ok"]}}}, _misrouted,
     None, "misrouted_score", RoutingError, ("code", "math_ok", "return None")),
    ("unscored", RoutingGuard, {"routing": {"routes": {"math": ["math_ok"], "code": ["code_ok"]}}}, _unscored,
     None, "unscored_rows", RoutingError, ("math", "math_ok", "1  2")),
    ("all_skipped_without_routes", RoutingGuard, {}, _unrouted, None, "unscored_rows", RoutingError,
     ("poetry", "(every function)", "zero advantage")),
    ("unrouted", RoutingGuard, {"routing": {"routes": {"math": ["math_ok"]}}}, _unrouted_scored, None, "unrouted_task",
     RoutingError, ("poetry", "declared tasks: ['math']")),
    ("unknown_name", RoutingGuard, {"routing": {"routes": {"math": ["math_okk"]}}}, clean_batch, None,
     "unknown_reward_func", RoutingError, ("math_okk", "math_ok")),
    ("truncated", TruncationGuard, {"truncation": {"min_rows": 2}}, _truncated, None, "truncation_rate",
     TruncationError, ("'math'", "2/2", "never stop", "probe-lengths")),
    ("sliced_prompts", SlicingGuard, {}, _sliced_prompts, None, "length_cap", TruncationError,
     ("prompt (user message)", "exactly 3000 characters")),
    ("cut_completions", SlicingGuard, {}, _cut_completions, _decode_ctx, "completion_cut", TruncationError,
     ("kept 8 of 17", "'t1 t2 t3'", "' t4 t5 t6'")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("guard_cls", "config", "make", "make_ctx", "kind", "error", "words"),
    [p[1:] for p in PLANTED],
    ids=[p[0] for p in PLANTED],
)
def test_planted_problem_is_caught(
    guard_cls: type[Guard],
    config: dict[str, Any],
    make: Callable[[], RolloutBatch],
    make_ctx: Callable[[], RunContext] | None,
    kind: str,
    error: type[GuardError],
    words: tuple[str, ...],
) -> None:
    ctx = make_ctx() if make_ctx else None
    _, session = run(guard_cls, [make()], config, ctx)
    assert kind in kinds(session)
    message = next(f.message for f in session.findings if f.kind == kind)
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"
    with pytest.raises(error) as raised:
        run(guard_cls, [make()], config, make_ctx() if make_ctx else None, mode="raise")
    assert message in str(raised.value)


def _cut(truncated: int, rows: int = 8) -> RolloutBatch:
    """``truncated`` of ``rows`` cut, spread over the groups (one per group first: no prompt cut whole, so only the
    window's share can tell; prompts cut whole are tests/guards/test_truncation_evidence.py)."""
    order = sorted(range(rows), key=lambda i: (i % 2, i))[:truncated]
    return make_batch(
        ["math"] * rows, [[1.0]] * rows, completions=["x"] * rows, truncated=[i in order for i in range(rows)]
    )


def test_truncation_is_judged_on_evidence_over_a_window_not_one_batch() -> None:
    """Issue 20: two truncated rows of an 8-row batch (25 %) are not evidence that the cap is too low; a share
    near max_rate over the window stays silent; a sustained high share is caught once the window has the rows."""
    _, session = run(TruncationGuard, [_cut(2)], mode="warn")
    assert session.findings == []
    _, session = run(TruncationGuard, [_cut(1)] * 8, mode="warn")  # 8/64 = 12.5 %, within sampling noise of 10 %
    assert session.findings == []
    _, session = run(TruncationGuard, [_cut(4)] * 8, mode="warn")  # 32/64: half of the task's rows cut
    first = [f.step for f in session.findings if f.kind == "truncation_rate"]
    assert first, session.summary_text()
    message = session.findings[0].message
    assert "16/32 truncated over its last 4 batch(es)" in message and "--length_probe" in message


def test_routing_guard_reads_routes_from_route_wrappers() -> None:
    def math_ok(completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    def code_ok(completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    ctx = RunContext(reward_func_names=NAMES, reward_funcs=route({"math": [math_ok], "code": [code_ok]}))
    _, session = run(RoutingGuard, [clean_batch()], ctx=ctx)
    assert session.findings == []
    _, session = run(RoutingGuard, [_misrouted()], ctx=ctx)
    assert kinds(session) == {"misrouted_score"}
    assert session.metrics["rl_guards/routing/misrouted_rows"] == [2.0]


def test_routing_guard_without_routes_notes_it_once() -> None:
    _, session = run(RoutingGuard, [clean_batch(), clean_batch()])
    assert session.findings == [] and list(session.notes) == [("routing", "no_routes")]  # a note, not a finding


# ----- task rewards ------------------------------------------------------------------------------------------
def test_task_monitor_keys_and_values() -> None:
    batch = make_batch(
        ["math", "math", "code", "code", "code", "code"],
        [[1.0, None], [None, None], [None, 0.5], [None, 0.0], [None, 1.0], [None, 1.0]],
        completion_ids=[[1], [1, 2, 3], [1, 2], [1, 2], [1], [1]],
    )
    _, session = run(TaskRewardMonitor, [batch])
    m = {k.removeprefix("rl_guards_task/"): v for k, v in session.metrics.items()}
    assert m["math/reward_mean"] == [1.0] and m["math/reward_std"] == [0.0]  # the unscored row is left out
    assert m["math/rows"] == [2.0] and m["math/groups"] == [1.0] and m["math/completion_length"] == [2.0]
    assert m["math/reward/math_ok/mean"] == [1.0]
    assert "math/reward/code_ok/mean" not in m  # code_ok never scored a math row
    assert m["code/reward_mean"] == [0.625] and m["code/groups"] == [2.0]
    # One pass rate per task (the dead-groups guard's): no second, per-function one that disagrees with it.
    assert not any("pass_rate" in k for k in m)


# ----- dead groups -------------------------------------------------------------------------------------------
def _echo_all_pass(step: int) -> RolloutBatch:
    return make_batch(
        ["math"] * 4 + ["echo"] * 4,
        [[1.0], [0.0], [0.0], [1.0], [1.0], [1.0], [1.0], [1.0]],
        names=["ok"],
        step=step,
    )


def test_dead_task_fires_after_consecutive_batches_with_advice() -> None:
    config = {"dead_groups": {"warn_after_steps": 3}}
    _, session = run(DeadGroupGuard, [_echo_all_pass(s) for s in range(2)], config)
    assert "dead_task" not in kinds(session)
    assert session.metrics["rl_guards_task/echo/dead_all_pass"] == [1.0, 1.0]
    assert session.metrics["rl_guards_task/math/live_groups"] == [2.0, 2.0]
    assert session.metrics["rl_guards_task/echo/zero_adv_token_share"] == [1.0, 1.0]
    with pytest.raises(DeadGradientError, match="task 'echo' contributed no gradient for 3 consecutive"):
        run(DeadGroupGuard, [_echo_all_pass(s) for s in range(3)], config, mode="raise")
    _, session = run(DeadGroupGuard, [_echo_all_pass(s) for s in range(5)], config)
    (finding,) = [f for f in session.findings if f.kind == "dead_task"]  # once per streak
    assert "pass rate 1.00" in finding.message and "too easy" in finding.message
    assert session.metrics["rl_guards_task/echo/expected_dead_share"][-1] == 1.0
    assert session.metrics["rl_guards_task/math/expected_dead_share"][-1] == 0.5  # p = 0.5, G = 2


@pytest.mark.parametrize("rollouts_dir", [None, "/data/my run/dumps"])
def test_the_suggested_command_names_the_real_folder(rollouts_dir: str | None) -> None:
    """Issue 38 #8: e1b9f62's message said `rl-guards rollouts OUTPUT_DIR show ...`."""
    config = {"dead_groups": {"warn_after_steps": 2}, "rollouts": {"output_dir": rollouts_dir}}
    _, session = run(DeadGroupGuard, [_echo_all_pass(s) for s in range(2)], config, RunContext(output_dir="/runs/r1"))
    (finding,) = [f for f in session.findings if f.kind == "dead_task"]
    folder = "'/data/my run/dumps'" if rollouts_dir else "/runs/r1"  # quoted for a shell
    assert f"`rl-guards rollouts {folder} show --step 1 --task echo`" in finding.message
    assert "OUTPUT_DIR" not in finding.message


def test_dead_streak_survives_resume_and_resets_on_a_live_group() -> None:
    config = {"dead_groups": {"warn_after_steps": 3}}
    first, _ = run(DeadGroupGuard, [_echo_all_pass(s) for s in range(2)], config)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["streaks"] == {"echo": 2, "math": 0}
    resumed, session = run(DeadGroupGuard, [], config)
    resumed.load_state_dict(state)
    resumed.on_batch(_echo_all_pass(2), session.reporter("dead_groups", resumed.config, 2))
    assert kinds(session) == {"dead_task"}
    live = make_batch(["echo", "echo"], [[1.0], [0.0]], names=["ok"])
    resumed.on_batch(live, session.reporter("dead_groups", resumed.config, 3))
    assert resumed.streaks["echo"] == 0


def test_eval_batches_do_not_touch_dead_group_state() -> None:
    evals = [make_batch(["echo", "echo"], [[1.0], [1.0]], names=["ok"], mode="eval") for _ in range(4)]
    guard, session = run(DeadGroupGuard, evals, {"dead_groups": {"warn_after_steps": 2}})
    assert guard.streaks == {} and guard.ranges == {} and "dead_task" not in kinds(session)
    assert session.metrics["rl_guards_task/echo/dead_group_share"] == [1.0] * 4


def test_single_generation_batches_are_skipped() -> None:
    single = make_batch(["echo", "echo"], [[1.0], [1.0]], names=["ok"], g=1, mode="eval")
    guard, session = run(DeadGroupGuard, [single])
    assert session.metrics == {} and guard.streaks == {}


def test_group_size_advice_in_end_of_run_findings() -> None:
    guard, session = run(DeadGroupGuard, [_echo_all_pass(0)])
    guard.on_train_end(session.reporter(guard.name, guard.config, 1))
    assert not session.findings  # advice is a note, not a finding
    advice = session.notes[("dead_groups", "group_size_advice")]
    assert "task 'echo': pass rate 1.00" in advice and "task 'math': pass rate 0.50" in advice
    assert "num_generations=4" in advice  # p=0.5: G=4 gives 0.125 < 0.25
    text = session.summary_text(notes=True)
    assert "group_size_advice" in text and "rl_guards findings" not in text


# ----- slicing -----------------------------------------------------------------------------------------------
def test_watched_judge_input_cut_is_caught_and_raises_with_several_processes_too() -> None:
    drain_watched()
    judge = watch_inputs(lambda text: 1.0, name="judge")
    completions = [f"<think>\nstep {i} of a long derivation " + "with details " * 20 for i in range(2)]
    for c in completions:
        judge("Rate this answer:\n" + c[:128])  # the bug: a slice before the judge call
    batch = make_batch(["math", "math"], [[1.0], [0.0]], names=["ok"], completions=completions)
    _, session = run(SlicingGuard, [batch])
    assert "judge_input_cut" in kinds(session)
    message = next(f.message for f in session.findings if f.kind == "judge_input_cut")
    assert "input of judge" in message and "kept 128 of" in message
    assert session.metrics["rl_guards/slicing/cut_inputs"] == [2.0]
    for c in completions:
        judge("Rate this answer:\n" + c[:128])
    # Each rank's count is gathered, so every rank takes the same decision: raise mode stops all of them together
    # (0.1 only reported it with several processes, since one rank's watched inputs were not known to the others).
    with pytest.raises(TruncationError, match="kept 128 of"):
        run(SlicingGuard, [batch], ctx=RunContext(world_size=2), mode="raise")


def test_whole_judge_inputs_and_varied_lengths_are_silent() -> None:
    drain_watched()
    judge = watch_inputs(lambda text: 1.0, name="judge")
    completions = [f"answer {i} " + "because " * (10 + 7 * i) for i in range(4)]
    for c in completions:
        judge(f"Rate:\n{c}\nScore 0-10:")
    batch = make_batch(["math"] * 4, [[1.0], [0.0]] * 2, names=["ok"], completions=completions)
    _, session = run(SlicingGuard, [batch], ctx=_decode_ctx(), mode="raise")
    assert session.findings == []


# ----- reward sanity -----------------------------------------------------------------------------------------
def math_ok(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    return [
        None if t != "math" else float(a in c[0]["content"]) for c, a, t in zip(completions, answer, task, strict=True)
    ]


def lenient(completions: list[Any], task: list[str], **kwargs: Any) -> list[float | None]:
    return [None if t != "math" else 1.0 for t in task]  # a broken judge: everything passes


CASES = [
    {"task": "math", "prompt": [{"role": "user", "content": "2+2?"}], "answer": "4",
     "good": ["It is 4."], "bad": ["It is 5.", ""]},
    {"task": "code", "prompt": "write f", "answer": "", "good": ["def f(): pass"], "bad": ["f ="]},
]  # fmt: skip


def test_reward_sanity_table() -> None:
    report = check_reward_sanity([math_ok, lenient], CASES)
    by = {(r.case, r.func): r for r in report.results}
    assert by[(0, "math_ok")].status == "ok" and by[(0, "math_ok")].min_good == 1.0
    assert by[(0, "lenient")].status == "fail" and "'It is 4.'" in by[(0, "lenient")].detail
    assert by[(1, "math_ok")].status == "not_served"
    assert report.unserved_tasks == ["code"] and not report.ok
    with pytest.raises(RewardSanityError, match="lenient") as err:
        assert_reward_sanity([math_ok, lenient], CASES)
    assert "tasks no reward function scores: ['code']" in str(err.value)
    assert assert_reward_sanity([math_ok], CASES[:1]).ok


def test_reward_sanity_guard_from_yaml(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": CASES[:1]}))
    assert load_reward_cases(path)[0].columns == {"answer": "4"}
    config = {"reward_sanity": {"cases_file": str(path)}}
    _, session = run(RewardSanityGuard, [], config, RunContext(reward_funcs=[math_ok]), mode="raise")
    assert kinds(session) == set() and ("reward_sanity", "reward_sanity_ok") in session.notes
    with pytest.raises(RewardSanityError, match="min good"):
        run(RewardSanityGuard, [], config, RunContext(reward_funcs=[math_ok, lenient]), mode="raise")
    _, session = run(RewardSanityGuard, [], {}, RunContext(reward_funcs=[lenient]), mode="raise")
    assert kinds(session) == set()  # no cases file, no dataset: a note said once, never a finding or a stop
    assert ("reward_sanity", "skipped") in session.notes
    missing = {"reward_sanity": {"cases_file": str(tmp_path / "nope.yaml")}}
    with pytest.raises(RewardSanityError, match=r"nope\.yaml"):
        run(RewardSanityGuard, [], missing, RunContext(reward_funcs=[math_ok]), mode="raise")


def shorter_is_better(completions: list[Any], **kwargs: Any) -> list[float]:
    return [-0.01 * len(c[0]["content"]) if isinstance(c, list) else -0.01 * len(c) for c in completions]


def test_reward_sanity_shaping_terms_and_weighted_total() -> None:
    # The length penalty prefers the empty bad answer: a per-function failure unless declared a shaping term.
    strict = check_reward_sanity([math_ok, shorter_is_better], CASES[:1])
    by = {r.func: r for r in strict.results}
    assert by["shorter_is_better"].status == "fail" and not strict.ok
    assert by["(total)"].status == "ok"  # 1 - 0.08 for the good answer still beats 0 for the empty one
    shaped = check_reward_sanity([math_ok, shorter_is_better], CASES[:1], shaping=["shorter_is_better"])
    assert {r.func: r.status for r in shaped.results} == {
        "math_ok": "ok",
        "shorter_is_better": "shaping",
        "(total)": "ok",
    }
    assert shaped.ok
    # A weight that lets the shaping term dominate breaks the total: that is a real failure.
    heavy = check_reward_sanity(
        [math_ok, shorter_is_better], CASES[:1], shaping=["shorter_is_better"], weights=[1, 200]
    )
    assert {r.func: r.status for r in heavy.results}["(total)"] == "fail" and not heavy.ok
    with pytest.raises(ConfigError, match="weights"):
        check_reward_sanity([math_ok], CASES[:1], weights=[1.0, 2.0])


def test_slicing_decodes_only_the_longest_rows_and_still_finds_the_cut() -> None:
    from rl_guards.core.batch import RolloutBatch

    decoded_calls: list[int] = []

    def decode(ids: list[int]) -> str:
        decoded_calls.append(len(ids))
        return "x" * len(ids)

    # 8 rows; row 5 is the longest and reached the reward cut to 100 of 300 characters.
    lengths = [10, 20, 30, 40, 50, 300, 60, 70]
    completions = ["x" * n for n in lengths]
    completions[5] = "x" * 100
    batch = RolloutBatch(
        step=0, mode="train", num_generations=4, reward_names=["r"], reward_weights=[1.0],
        rewards=[[0.0]] * 8, advantages=[0.0] * 8, tasks=["t"] * 8, completions=completions,
        completion_ids=[[1] * n for n in lengths], prompt_ids=[[1]] * 8, truncated=[False] * 8,
        thinking=[None] * 8,
    )  # fmt: skip
    config = GuardsConfig.from_dict({"slicing": {"mode": "log", "decode_rows": 2}})
    guard = SlicingGuard(config)
    guard.setup(RunContext(decode_text=decode))
    session = GuardSession()
    guard.on_batch(batch, session.reporter("slicing", guard.config, 0))
    assert sorted(decoded_calls) == [70, 300]  # only the two longest rows were decoded
    assert session.counts[("slicing", "completion_cut")] == 1
    assert "row 5" in session.findings[0].message


def test_slicing_clears_whole_rows_from_token_lengths_and_decodes_only_the_rest() -> None:
    """Issue 25: with the tokenizer's per-token length bounds, a row whose text is as long as its tokens can decode
    to is not decoded; a cut row still is."""
    from rl_guards.testing import build_tokenizer

    tok = build_tokenizer(2048, "qwen3")
    texts = [f"The answer to question {i} is {i * 7}, because {i} times 7 is {i * 7}." for i in range(8)]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")] for t in texts]
    completions = list(texts)
    completions[2] = texts[2][:20]  # the planted cut: completion[:20]
    batch = RolloutBatch(
        step=0, mode="train", num_generations=4, reward_names=["r"], reward_weights=[1.0],
        rewards=[[0.0]] * 8, advantages=[0.0] * 8, tasks=["t"] * 8, completions=completions,
        completion_ids=ids, prompt_ids=[[1]] * 8, truncated=[False] * 8, thinking=[None] * 8,
    )  # fmt: skip
    decoded: list[int] = []

    def decode_text(row: list[int]) -> str:
        decoded.append(len(row))
        return tok.decode(row, skip_special_tokens=True)

    guard = SlicingGuard(GuardsConfig.from_dict({"slicing": {"mode": "log"}}))
    guard.setup(RunContext(tokenizer=tok, decode_text=decode_text))
    decoded.clear()  # setup checked its bounds against the decoder on sample sequences
    session = GuardSession()
    guard.on_batch(batch, session.reporter("slicing", guard.config, 0))
    assert session.counts[("slicing", "completion_cut")] == 1
    assert "row 2" in session.findings[0].message and "kept 20 of" in session.findings[0].message
    assert decoded == [len(ids[2])]  # only the cut row was decoded

    # A decoder the tokenizer's lengths do not bound (here: one token per word) gets no bounds: every row decoded.
    other = SlicingGuard(GuardsConfig.from_dict({"slicing": {"mode": "log"}}))
    other.setup(RunContext(tokenizer=tok, decode_text=lambda row: " ".join(f"token{i}" for i in row)))
    assert other._bounds is None


def test_every_finding_shows_its_severity_and_notes_stand_apart() -> None:
    """Issue 20 #2: the end-of-run table has a severity column, most severe first; a note is not a finding."""
    session = GuardSession()
    config = GuardsConfig().think_tags
    session.reporter("think_tags", config, 3).notice("anomaly_rate", "too many stray tags")
    config.mode = "log"
    session.reporter("think_tags", config, 4).violation("nested", "nested think blocks")
    session.reporter("reward_sanity", config, 0).note("reward_sanity_ok", "rewards rank right above wrong")
    rows = session.summary_rows()
    assert [(r["kind"], r["severity"]) for r in rows] == [("anomaly_rate", "warning"), ("nested", "info")]
    assert "notes" not in session.summary_text()  # said once at the time; in the table only in verbose mode
    text = session.summary_text(notes=True)
    assert "severity  guard/kind" in text and "warning   think_tags/anomaly_rate" in text
    assert "info      think_tags/nested" in text
    assert "notes (said once, not findings)" in text and "reward_sanity/reward_sanity_ok" in text
    assert ("reward_sanity", "reward_sanity_ok") not in session.counts
    restored = GuardSession()
    restored.load_state_dict(session.state_dict())
    assert restored.notes == session.notes  # a resumed run does not say it again
    assert not restored.reporter("reward_sanity", config, 5).note("reward_sanity_ok", "again")
