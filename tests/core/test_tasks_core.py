"""Pure parts of the task guards: group-size advisor, group outcomes, routing tables, lengths, slicing."""

from __future__ import annotations

import pickle

import pytest

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.group_size import advise_group_size, expected_dead_share, smallest_group_size
from rl_guards.core.groups import (
    group_outcomes,
    outcome,
    outcome_passes,
    trl_totals,
    update_outcome_values,
    update_ranges,
)
from rl_guards.core.lengths import percentile, round_up, summarize_lengths
from rl_guards.core.routing import check_routing, table_from_funcs, table_from_names
from rl_guards.core.slicing import find_cut_completions, find_cut_inside, find_length_caps, is_round_length
from rl_guards.core.task_stats import mean_std, task_stats
from rl_guards.errors import ConfigError
from rl_guards.rewards.routing import AsyncRoutedReward, RoutedReward, route
from rl_guards.rewards.slicing import drain_watched, watch_inputs


def _batch(tasks: list[str], rewards: list[list[float | None]], g: int = 2, **kw: object) -> RolloutBatch:
    n = len(tasks)
    names = kw.pop("names", [f"f{i}" for i in range(len(rewards[0]))])
    return RolloutBatch(
        step=0,
        mode="train",
        num_generations=g,
        reward_names=list(names),  # type: ignore[arg-type]
        reward_weights=list(kw.pop("weights", [1.0] * len(names))),  # type: ignore[arg-type]
        rewards=rewards,
        advantages=list(kw.pop("advantages", [0.0] * n)),  # type: ignore[arg-type]
        tasks=tasks,
        completions=list(kw.pop("completions", ["c"] * n)),  # type: ignore[arg-type]
        completion_ids=list(kw.pop("completion_ids", [[1, 2]] * n)),  # type: ignore[arg-type]
        prompt_ids=[[1]] * n,
        truncated=[False] * n,
        thinking=[None] * n,
    )


# ----- advisor ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("p", "g", "expected"),
    [
        (0.5, 2, 0.5),
        (0.5, 4, 0.125),
        (0.9, 4, 0.9**4 + 0.1**4),
        (0.0, 8, 1.0),
        (1.0, 8, 1.0),
        (0.25, 1, 1.0),
    ],
)
def test_expected_dead_share(p: float, g: int, expected: float) -> None:
    assert expected_dead_share(p, g) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("p", "target", "expected"),
    [
        (0.5, 0.25, 4),  # G=3 gives exactly 0.25, not below
        (0.5, 0.6, 2),
        (0.9, 0.25, 14),  # 0.9**13 = 0.254, 0.9**14 = 0.229
        (0.1, 0.25, 14),  # symmetric in p
        (0.99, 0.25, None),  # 0.99**64 = 0.53: too easy for any G <= 64
        (0.0, 0.25, None),
        (1.0, 0.9, None),
    ],
)
def test_smallest_group_size(p: float, target: float, expected: int | None) -> None:
    got = smallest_group_size(p, target)
    assert got == expected
    if got is not None:
        assert expected_dead_share(p, got) < target
        assert got == 2 or expected_dead_share(p, got - 1) >= target


def test_advice_messages_say_what_to_do() -> None:
    fine = advise_group_size("a", 0.5, 8, 0.25)
    assert fine.ok and "fine" in fine.message()
    more = advise_group_size("a", 0.9, 4, 0.25)
    assert not more.ok and more.recommended == 14 and "num_generations=14" in more.message()
    easy = advise_group_size("a", 0.995, 4, 0.25)
    assert easy.recommended is None and "too easy" in easy.message() and "change the data" in easy.message()
    hard = advise_group_size("a", 0.0, 4, 0.25)
    assert "too hard" in hard.message()
    with pytest.raises(ValueError, match="pass_rate"):
        expected_dead_share(1.5, 4)


# ----- group outcomes --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "low", "high", "expected"),
    [(1.0, 0.0, 1.0, "pass"), (0.0, 0.0, 1.0, "fail"), (0.5, 0.0, 1.0, "other"), (1.0, 1.0, 1.0, "pass"),
     (0.0, 0.0, 0.0, "fail"), (-1.0, -1.0, -1.0, "fail")],
)  # fmt: skip
def test_outcome(value: float, low: float, high: float, expected: str) -> None:
    assert outcome(value, low, high) == expected


def test_group_outcomes_split_dead_groups_and_count_tokens() -> None:
    # task a: group 0 all pass, group 1 all fail, group 2 live; task b: one group all 0.5 (dead, other)
    rewards = [[1.0], [1.0], [0.0], [0.0], [1.0], [0.0], [0.5], [0.5], [0.0], [1.0]]
    tasks = ["a"] * 6 + ["b"] * 4
    ids = [[1]] * 4 + [[1, 2, 3], [1]] + [[1, 2]] * 4
    adv = [0, 0, 0, 0, 0.7, -0.7, 0, 0, -1.0, 1.0]
    batch = _batch(tasks, rewards, g=2, completion_ids=ids, advantages=adv)
    totals = trl_totals(batch)
    ranges: dict[str, list[float]] = {}
    update_ranges(ranges, batch, totals)
    assert ranges == {"a": [0.0, 1.0], "b": [0.0, 1.0]}
    stats = group_outcomes(batch, ranges, totals)
    a, b = stats["a"], stats["b"]
    assert (a.groups, a.dead, a.dead_all_pass, a.dead_all_fail, a.live) == (3, 2, 1, 1, 1)
    assert (b.groups, b.dead, b.dead_all_pass, b.dead_all_fail, b.dead_other, b.live) == (2, 1, 0, 0, 1, 1)
    assert a.zero_adv_tokens == 4 and a.tokens == 8 and a.zero_adv_token_share == 0.5
    assert a.pass_rate is None  # group_outcomes does not judge passes: the pass/fail functions do
    values: dict[str, dict[str, list[float]]] = {}
    update_outcome_values(values, batch)
    # the one function gave 1, 0 and 0.5 (on b): a shaped score, not pass/fail, so no task's pass rate is known
    assert outcome_passes(batch, values) == {"a": (0, 0), "b": (0, 0)}


def test_pass_rate_follows_the_pass_fail_function_not_the_best_total() -> None:
    """Issue 20 #7: a length-shaped total whose best value rises as right answers appear must not pull the pass
    rate down; a task always solved is judged by the function's scores on the other task."""
    names = ["correct", "length"]
    first = _batch(["a"] * 4, [[0.0, -0.1], [0.0, -0.2], [1.0, -0.3], [0.0, -0.1]], g=2, names=names)
    later = _batch(["a"] * 4, [[1.0, -0.05], [1.0, -0.3], [1.0, -0.2], [0.0, -0.1]], g=2, names=names)
    values: dict[str, dict[str, list[float]]] = {}
    update_outcome_values(values, first)
    update_outcome_values(values, later)
    assert outcome_passes(first, values)["a"] == (1, 4) and outcome_passes(later, values)["a"] == (3, 4)
    solved = _batch(["a", "a", "b", "b"], [[0.0, -0.1], [1.0, -0.3], [1.0, -0.2], [1.0, -0.1]], g=2, names=names)
    values = {}
    update_outcome_values(values, solved)
    assert outcome_passes(solved, values) == {"a": (1, 2), "b": (2, 2)}


def test_trl_totals_count_none_as_zero_and_apply_weights() -> None:
    batch = _batch(["a", "a"], [[1.0, None], [None, None]], weights=[2.0, 0.5])
    assert trl_totals(batch) == [2.0, 0.0]


# ----- task stats ------------------------------------------------------------------------------------------
def test_task_stats_exclude_unscored_rows_and_functions_that_skipped() -> None:
    batch = _batch(["m", "m", "c", "c"], [[1.0, None], [None, None], [None, 0.5], [None, 0.0]])
    stats = task_stats(batch)
    m, c = stats["m"], stats["c"]
    assert (m.rows, m.scored_rows, m.groups, m.reward_mean, m.reward_std) == (2, 1, 1, 1.0, 0.0)
    assert m.func_values == {"f0": [1.0]} and c.func_values == {"f1": [0.5, 0.0]}
    assert c.reward_mean == 0.25 and c.reward_std == pytest.approx(0.25)
    assert mean_std([]) == (None, None)


# ----- routing ---------------------------------------------------------------------------------------------
def test_routing_table_from_names_and_report() -> None:
    names = ["math_ok", "code_ok", "fmt"]
    table = table_from_names({"math": ["math_ok"], "code": ["code_ok"], "chat": [], "x": ["nope"]}, names)
    assert table.unknown_names == ["nope"] and table.required("math") == [0] and table.required("chat") == []
    rows = [
        [1.0, None, 0.0],  # math ok
        [None, None, 0.0],  # math: math_ok skipped -> unscored
        [None, 1.0, 0.0],  # code ok
        [0.0, 1.0, 0.0],  # code: math_ok scored -> misrouted
        [None, None, None],  # chat: nothing scored -> all skipped
        [None, None, None],  # chat
        [None, None, 1.0],  # poetry: unrouted
        [None, None, 1.0],
    ]
    batch = _batch(["math", "math", "code", "code", "chat", "chat", "poetry", "poetry"], rows, names=names)
    report = check_routing(batch, table)
    assert report.unscored == {("math", "math_ok"): 1}
    assert report.misrouted == {("code", "math_ok"): 1}
    assert report.all_skipped == {"chat": 2}
    assert report.unrouted == {"poetry": 2}
    assert (report.unscored_rows, report.misrouted_rows) == (3, 1)
    assert report.examples[("misrouted", "code")] == 3
    # no routes: only rows nobody scored count
    bare = check_routing(batch, None)
    assert bare.all_skipped == {"chat": 2} and not bare.misrouted and not bare.unrouted


def _math(completions: list[str], **kwargs: object) -> list[float]:
    return [1.0 if "4" in c else 0.0 for c in completions]


def _code(completions: list[str], **kwargs: object) -> list[float]:
    return [float(len(c)) for c in completions]


async def _judge(completions: list[str], **kwargs: object) -> list[float]:
    return [0.5 for _ in completions]


def test_route_wrappers_only_call_their_rows_and_keep_names() -> None:
    seen: list[list[str]] = []

    def spy(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
        seen.append(list(completions))
        assert len(answer) == len(completions)
        kwargs["log_extra"]("why", ["r"] * len(completions))  # type: ignore[operator]
        return [1.0] * len(completions)

    logged: list[tuple[str, list[object]]] = []
    math_w, spy_w = route({"math": [_math, spy], "code": [spy]})
    assert isinstance(math_w, RoutedReward) and math_w.__name__ == "_math" and spy_w.__name__ == "spy"
    assert math_w.tasks == ("math",) and spy_w.tasks == ("math", "code")
    assert math_w.rl_guards_routes == {"math": ["_math", "spy"], "code": ["spy"]}
    kwargs = {
        "prompts": ["p"] * 4,
        "completions": ["2+2=4", "5", "x", "yy"],
        "task": ["math", "math", "code", "chat"],
        "answer": ["4", "4", "", ""],
        "trainer_state": None,
        "log_extra": lambda col, vals: logged.append((col, vals)),
    }
    assert math_w(**kwargs) == [1.0, 0.0, None, None]
    assert spy_w(**kwargs) == [1.0, 1.0, 1.0, None]
    assert seen == [["2+2=4", "5", "x"]]
    assert logged == [("why", ["r", "r", "r", None])]
    # picklable (TRL / accelerate may pickle reward functions)
    clone = pickle.loads(pickle.dumps(math_w))
    assert clone(**{**kwargs, "log_extra": None}) == [1.0, 0.0, None, None]
    with pytest.raises(KeyError, match="'task' column"):
        math_w(completions=["a"], answer=["1"])


def test_route_async_and_errors() -> None:
    import asyncio

    from rl_guards.rewards.callables import trl_awaits_async_objects

    if trl_awaits_async_objects():
        (judge,) = route({"chat": [_judge]})
        assert isinstance(judge, AsyncRoutedReward)
        assert asyncio.run(judge(completions=["a", "b"], task=["chat", "x"])) == [0.5, None]
    else:  # TRL 1.13 would call the wrapper without awaiting it
        with pytest.raises(ConfigError, match=r"needs TRL >= 1\.14"):
            route({"chat": [_judge]})
    with pytest.raises(ConfigError):
        route({})
    with pytest.raises(ConfigError, match="not callable"):
        route({"a": ["fn"]})  # type: ignore[list-item]

    def clash(completions: list[str], **kwargs: object) -> list[float]:
        return []

    clash.__name__ = "_math"
    with pytest.raises(ConfigError, match="both named '_math'"):
        route({"a": [_math], "b": [clash]})


def test_routing_table_from_route_wrappers() -> None:
    funcs = [*route({"math": [_math], "code": [_code], "chat": []}), _math]
    table = table_from_funcs(funcs)
    assert table.declared_tasks == {"math", "code", "chat"}
    assert table.serves == {0: frozenset({"math"}), 1: frozenset({"code"})}  # the plain function is global


# ----- lengths ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 100, 4), ([5], 99, 5), (list(range(1, 101)), 90, 90)],
)
def test_percentile_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert percentile(values, q) == expected


def test_summarize_lengths_recommends_with_headroom_and_flags_censored_tails() -> None:
    lengths = list(range(10, 210))  # 200 samples, p99 = 208
    s = summarize_lengths(lengths, [False] * 200, cap=512)
    assert (s.p50, s.p90, s.p99, s.max) == (109, 189, 207, 209)
    assert s.recommended == round_up(207 * 1.25) == 320 and not s.lower_bound
    assert "recommended max_completion_length: 320" in s.text()
    capped = summarize_lengths([100] * 90 + [256] * 10, [False] * 90 + [True] * 10, cap=256)
    assert capped.lower_bound and capped.recommended == 512 and capped.hit_cap_share == 0.1
    assert "true p99 is unknown" in capped.text()
    one_hit = summarize_lengths([50] * 199 + [256], [False] * 199 + [True], cap=256)
    assert not one_hit.lower_bound and "still hit the cap" in one_hit.text()


# ----- slicing ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "expected"), [(3000, True), (2048, True), (512, True), (750, True), (1234, False), (0, False)]
)
def test_round_lengths(n: int, expected: bool) -> None:
    assert is_round_length(n) is expected


def test_find_length_caps_needs_repeats_round_length_and_nothing_longer() -> None:
    cut = [f"{i} " + "x" * 3000 for i in range(5)]
    texts = [t[:3000] for t in cut] + ["short text " * 3]
    (cap,) = find_length_caps(texts, "input of judge", min_repeats=3)
    assert (cap.length, cap.count, cap.total, cap.where) == (3000, 5, 6, "input of judge")
    assert find_length_caps(texts[:2], "x", min_repeats=3) == []  # too few
    assert find_length_caps([*texts, "y" * 3100], "x") == []  # a longer text: 3000 is no cap
    assert find_length_caps([t[:2999] for t in cut], "x") == []  # not round
    assert find_length_caps([t[:3000] for t in cut[:1]] * 5, "x") == []  # one distinct text repeated
    assert find_length_caps([t[:50] for t in cut], "x", min_length=64) == []  # too short


def test_find_cut_completions() -> None:
    full = ["The answer is 42 because of many reasons", "fine", "abc  "]
    seen = ["The answer is 42 bec", "fine", "abc"]  # whitespace-only loss is no cut
    (cut,) = find_cut_completions(seen, full)
    assert (cut.row, cut.seen, cut.full) == (0, 20, 40) and cut.lost_head.startswith("ause")


def test_find_cut_inside_picks_the_cut_copy_not_similar_completions() -> None:
    opening = "<think>\nLet me think about this problem carefully. "
    completions = [opening + "A" * 200 + " final A", opening + "B" * 200 + " final B", "short"]
    judge_input = "Question: q\nAnswer: " + completions[0][:150] + "\nScore:"
    cut = find_cut_inside(judge_input, completions, where="input of judge", min_length=64)
    assert cut is not None and cut.row == 0 and cut.seen == 150 and cut.full == len(completions[0])
    whole = "Answer: " + completions[1] + "\nScore:"
    assert find_cut_inside(whole, completions, where="j") is None  # held whole: no cut
    assert find_cut_inside("Answer: final A", completions, where="j") is None  # no opening found


def test_watch_inputs_records_strings_and_drains() -> None:
    drain_watched()

    def judge(prompt: str, *, system: str = "") -> float:
        return 1.0

    watched = watch_inputs(judge, name="judge")
    assert watched("hello", system="sys") == 1.0 and watched.__name__ == "judge"
    watched([{"role": "user", "content": "msg"}])  # type: ignore[arg-type]
    assert drain_watched() == {"judge": ["hello", "sys", "msg"]}
    assert drain_watched() == {}
    clone = pickle.loads(pickle.dumps(watch_inputs(_math)))
    assert clone(["4"]) == [1.0] and drain_watched() == {"_math": ["4"]}
