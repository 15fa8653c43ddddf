"""Issue 40, class 5: a reward function that never pays on a task while the task's total still moves.

The core rule on hand-built windows (table), then the guard on hand-built batches whose reward functions it really
calls (TRL's calling convention, bounded): a grader that reads only ``\\boxed{}`` while the policy answers bare numbers
is reported with the rows and the form it reads; a penalty that never triggers, a function returning 0.0 on another
task's rows, a reward that pays now and then, and a dead task stay silent.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.completions import completion_text
from rl_guards.core.unpaid import FunctionEntry, function_entries, judge, varied
from rl_guards.errors import UnpaidRewardError
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.unpaid_rewards import UnpaidRewardGuard
from rl_guards.reward_calls.trl import TrlCaller
from rl_guards.rewards.checked_calls import CheckedCalls


def _e(scored: int, low: float | None, high: float | None, groups: int = 4, live: int = 2) -> FunctionEntry:
    return FunctionEntry(scored, low, high, groups, live)


@pytest.mark.parametrize(
    ("name", "window", "stuck_at"),
    [
        ("zero on 8 groups over 2 batches, live", [_e(8, 0, 0), _e(8, 0, 0)], 0.0),
        ("a constant that is not zero", [_e(8, 0.5, 0.5), _e(8, 0.5, 0.5), _e(8, 0.5, 0.5)], 0.5),
        ("one batch", [_e(32, 0, 0, groups=8)], None),
        ("7 groups", [_e(8, 0, 0), _e(6, 0, 0, groups=3)], None),
        ("paid once", [_e(8, 0, 0), _e(8, 0, 1)], None),
        ("no live group: the dead-groups guard's", [_e(8, 0, 0, live=0), _e(8, 0, 0, live=0)], None),
        ("None on every row (not its task)", [_e(0, None, None), _e(0, None, None), _e(0, None, None)], None),
        ("batches without a score do not count", [_e(8, 0, 0), _e(0, None, None), _e(8, 0, 0)], 0.0),
        ("a non-finite score", [_e(8, None, None), _e(8, 0, 0)], None),
    ],
)
def test_judge(name: str, window: list[FunctionEntry], stuck_at: float | None) -> None:
    stuck = judge(window, min_groups=8, min_steps=2)
    assert (None if stuck is None else stuck.value) == stuck_at, name
    assert varied(window) is (name == "paid once")


# ----- reward functions, as users write them ---------------------------------------------------------------------
def boxed_accuracy(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """Reads only \\boxed{X}."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        found = re.findall(r"\\boxed\{([^}]*)\}", completion_text(c))
        out.append(1.0 if found and found[-1].strip() == str(a) else 0.0)
    return out


def think_format(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A format term that varies: 1 for a closed think block."""
    return [1.0 if "</think>" in completion_text(c) else 0.0 for c in completions]


def stray_penalty(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A penalty that never triggers on healthy rows: -1 for a second think block."""
    return [-1.0 if completion_text(c).count("<think>") > 1 else 0.0 for c in completions]


def echo_or_zero(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    """The echo grader, returning 0.0 (not None) on every other task's rows."""
    return [
        (1.0 if completion_text(c).strip().endswith(a) else 0.0) if t == "echo" else 0.0
        for c, a, t in zip(completions, answer, task, strict=True)
    ]


FUNCS = [boxed_accuracy, think_format, stray_penalty, echo_or_zero]
NAMES = [f.__name__ for f in FUNCS]


def _batch(step: int, completions: list[str], *, g: int = 2, answers: list[str] | None = None) -> RolloutBatch:
    """One task 'math'; rows scored by every function in FUNCS, as TRL would (called here, not made up)."""
    n = len(completions)
    answers = answers or [str(4 + i // g) for i in range(n)]
    prompts = [[{"role": "user", "content": f"What is 2+{2 + i // g}?"}] for i in range(n)]
    messages = [[{"role": "assistant", "content": c}] for c in completions]
    tasks = ["math"] * n
    rewards = list(
        zip(*(f(messages, answer=answers, task=tasks) for f in FUNCS), strict=True)  # type: ignore[operator]
    )
    totals = [sum(r) for r in rewards]
    advantages = [t - sum(totals[i - i % g : i - i % g + g]) / g for i, t in enumerate(totals)]
    return RolloutBatch(
        step=step,
        mode="train",
        num_generations=g,
        reward_names=list(NAMES),
        reward_weights=[1.0] * len(FUNCS),
        rewards=[list(r) for r in rewards],
        advantages=advantages,
        tasks=tasks,
        completions=messages,
        completion_ids=[[1, 2, 99]] * n,
        prompt_ids=[[1, 2]] * n,
        truncated=[False] * n,
        thinking=[True] * n,
        prompts=prompts,
        columns={"answer": answers, "task": tasks},
    )


def _bare(n: int = 8, g: int = 2, boxed: bool = False) -> list[str]:
    """Right answers, bare (or boxed); every other row without its think block, so the format term varies."""
    out = []
    for i in range(n):
        answer = str(4 + i // g)
        body = f"\\boxed{{{answer}}}" if boxed else answer
        out.append(f"<think>\n2+{2 + i // g}={answer}\n</think>\n\n{body}" if i % 2 == 0 else body)
    return out


class Counting:
    """A caller that counts the texts each function was asked to score."""

    def __init__(self) -> None:
        self.texts: dict[str, int] = {}
        self.callers = [TrlCaller(f) for f in FUNCS]

    def wrap(self) -> list[Any]:
        def make(caller: TrlCaller) -> Any:
            def call(rows: Any, texts: Any, *, tracked: Any = None) -> list[Any]:
                self.texts[caller.__name__] = self.texts.get(caller.__name__, 0) + len(texts)
                return caller(rows, texts, tracked=tracked)

            return call

        return [make(c) for c in self.callers]


def _run(batches: list[RolloutBatch], mode: str = "log", counting: Counting | None = None) -> tuple[Any, Any]:
    config = GuardsConfig.from_dict({"unpaid_rewards": {"mode": mode}})
    guard = UnpaidRewardGuard(config)
    counting = counting or Counting()
    guard.setup(RunContext(reward_funcs=list(FUNCS), checked_calls=CheckedCalls(counting.wrap())))
    session = GuardSession()
    for batch in batches:
        guard.on_batch(batch, session.reporter(guard.name, guard.config, batch.step))
        stop = session.settle()
        if stop is not None:
            raise stop
    return guard, session


def test_a_grader_of_boxed_answers_on_bare_numbers_is_reported_with_its_rows() -> None:
    counting = Counting()
    guard, session = _run([_batch(k, _bare()) for k in (1, 2, 3)], counting=counting)
    assert [f.kind for f in session.findings] == ["unpaid:boxed_accuracy"]
    finding = session.findings[0]
    assert finding.step == 3  # stuck after 2 batches (8 groups), asked and reported on the third
    message = finding.message
    for words in (
        "'boxed_accuracy' paid 0 on all 24 rows of task 'math' it scored over its last 3 batches (12 groups",
        "when the reference answer (column 'answer') is written in a form it reads: boxed (1)",
        "not written bare (0)",
        "In this batch 8 of the task's 8 completions state the reference answer, and it paid 0 on each.",
        "row 0: the completion ends '4' -> 0; 'answer' reads '4' (the completion states it)",
        "the policy answers in a form the function does not read",
        "(the answer written like '\\\\boxed{4}')",
    ):
        assert words in message, f"{words!r} not in:\n{message}"
    # asked once, on a few rows: the penalty and the off-task function too (constant), and never again
    assert set(counting.texts) == {"boxed_accuracy", "stray_penalty", "echo_or_zero"}
    before = dict(counting.texts)
    for k in (4, 5):
        guard.on_batch(_batch(k, _bare()), session.reporter(guard.name, guard.config, k))
    assert counting.texts == before and len(session.findings) == 1
    assert guard.state_dict()["reported"] == [["math", 0]]


def test_raise_mode_stops_with_the_message() -> None:
    with pytest.raises(UnpaidRewardError, match="boxed_accuracy"):
        _run([_batch(k, _bare()) for k in (1, 2, 3)], mode="raise")


@pytest.mark.parametrize(
    ("name", "batches"),
    [
        ("the policy answers in the form it reads", [_batch(k, _bare(boxed=True)) for k in (1, 2, 3)]),
        ("two batches: asked, not judged yet", [_batch(k, _bare()) for k in (1, 2)]),
        # wrong boxed answers in the first batch, right ones later: it paid
        ("it pays later", [_batch(1, _bare()), _batch(2, _bare()), _batch(3, _bare(boxed=True)),
                           _batch(4, _bare())]),
        # every completion the same: each group dead, the dead-groups guard's to say
        ("a dead task", [_batch(k, ["4"] * 8) for k in (1, 2, 3, 4)]),
    ],
)  # fmt: skip
def test_silent(name: str, batches: list[RolloutBatch]) -> None:
    _, session = _run(batches)
    assert session.findings == [], name


def test_state_round_trip_keeps_the_episode() -> None:
    guard, session = _run([_batch(k, _bare()) for k in (1, 2, 3)])
    assert len(session.findings) == 1
    counting = Counting()
    restored = UnpaidRewardGuard(guard.guards_config)
    restored.setup(RunContext(reward_funcs=list(FUNCS), checked_calls=CheckedCalls(counting.wrap())))
    restored.load_state_dict(guard.state_dict())
    assert restored.state_dict() == guard.state_dict()
    session = GuardSession()
    restored.on_batch(_batch(4, _bare()), session.reporter(guard.name, guard.config, 4))
    assert session.findings == [] and counting.texts == {}  # reported once per episode, verdicts kept


def test_function_entries_count_live_groups_per_task() -> None:
    batch = _batch(1, _bare())
    [entries] = function_entries(batch).values()
    boxed, fmt = entries[0], entries[1]
    assert (boxed.scored, boxed.low, boxed.high, boxed.groups, boxed.live) == (8, 0.0, 0.0, 4, 4)
    assert (fmt.low, fmt.high) == (0.0, 1.0)


# ----- a real GRPOTrainer: open-r1's mix on the tiny policy, which answers bare numbers -----------------------------
def accuracy_reward(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """Reads only \\boxed{} (open-r1's parse), against the solution's \\boxed{}."""
    out: list[float | None] = []
    for c, s in zip(completions, solution, strict=True):
        got, want = re.findall(r"\\boxed\{([^}]*)\}", completion_text(c)), re.findall(r"\\boxed\{([^}]*)\}", s)
        out.append(1.0 if got and want and got[-1].strip() == want[-1].strip() else 0.0)
    return out


def accuracy_bare_too(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """The same grader reading a bare final answer too."""
    from rl_guards.testing.rewards import final_answer

    out: list[float | None] = []
    for c, s in zip(completions, solution, strict=True):
        text = final_answer(completion_text(c)).strip()
        boxed = re.findall(r"\\boxed\{([^}]*)\}", text)
        out.append(1.0 if (boxed[-1] if boxed else text) == re.findall(r"\\boxed\{([^}]*)\}", s)[-1] else 0.0)
    return out


accuracy_bare_too.__name__ = "accuracy_reward"


def tag_count_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """open-r1's tag count: 0.25 for each of its four tags written once."""
    tags = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
    return [sum(0.25 for tag in tags if completion_text(c).count(tag) == 1) for c in completions]


@pytest.mark.slow
@pytest.mark.parametrize("planted", [True, False])
def test_grpo_run_reports_a_grader_that_never_parses_the_policy(make_grpo_trainer: Any, planted: bool) -> None:
    import rl_guards
    from rl_guards.testing import make_dataset

    data = make_dataset(32, tasks=("arith",), thinking=True)
    data = data.map(lambda row: {"solution": f"\\boxed{{{row['answer']}}}"})
    trainer = make_grpo_trainer(
        train_dataset=data,
        reward_funcs=[accuracy_reward if planted else accuracy_bare_too, tag_count_reward],
        per_device_train_batch_size=32,
        max_completion_length=48,
        chat_template_kwargs={"enable_thinking": True},
        max_steps=3,
    )
    run = rl_guards.install(trainer, {"unpaid_rewards": {"mode": "log"}}, guards=[UnpaidRewardGuard])
    trainer.train()
    if not planted:
        assert run.findings == [], run.summary()
        return
    assert [f.kind for f in run.findings] == ["unpaid:accuracy_reward"], run.summary()
    message = run.findings[0].message
    assert "'accuracy_reward' paid 0 on all 96 rows of task 'arith'" in message
    assert "column 'solution') is written in a form it reads: boxed (1)" in message
    assert "not written bare (0)" in message
    logged = [row.get("rl_guards/unpaid_rewards/unpaid") for row in trainer.state.log_history]
    assert 1.0 in logged
