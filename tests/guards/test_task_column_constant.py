"""Issue 21, class 5: a task column that exists but says one task while another column holds the real task labels.

The core rule on hand-built columns (caught by the values, whatever the look-alike's name; silent on a genuinely
single-task dataset, on answer-like columns with few values, on toy datasets whose columns the prompts do not follow),
then a real GRPOTrainer run that warns once with the column, its value counts and the fix, and its single-task twin
that stays silent. Issue 40, class 4: a debug run's dataset of tens of rows is judged from the prompts' evidence.
"""

from __future__ import annotations

from typing import Any

import pytest

import rl_guards
from rl_guards.core.task_labels import constant_task_column, labels_follow_prompts, prompt_words
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.testing import make_dataset
from rl_guards.testing.logs import shows
from rl_guards.testing.rewards import arith_correct, echo_match

SOURCES = ("gsm8k", "math", "code_contests")


def _rows(n: int, **columns: Any) -> list[dict[str, Any]]:
    """``n`` rows; each column a function of the row index."""
    return [{"prompt": f"question {i}", **{k: f(i) for k, f in columns.items()}} for i in range(n)]


@pytest.mark.parametrize(
    ("rows", "column"),
    [
        (_rows(400, task=lambda i: "default", data_source=lambda i: SOURCES[i % 3]), "data_source"),
        # judged by the values: an unusual name
        (_rows(400, task=lambda i: "default", origin=lambda i: SOURCES[i % 3]), "origin"),
        # nearly constant (one stray value) with several hundred rows
        (_rows(400, task=lambda i: "math" if i == 7 else "default", subset=lambda i: SOURCES[i % 2]), "subset"),
        # a missing value counts as the default task
        (_rows(300, task=lambda i: None, category=lambda i: ("qa", "code")[i % 2]), "category"),
        # an uneven mix, a small source still on a fair share of the rows
        (_rows(500, task=lambda i: "default", dataset=lambda i: "big" if i % 10 else "small"), "dataset"),
    ],
)
def test_a_constant_task_column_names_the_look_alike(rows: list[dict[str, Any]], column: str) -> None:
    found = constant_task_column(rows, "task", list(rows[0]), default="default")
    assert found is not None
    counts, candidates = found
    assert next(iter(counts)) in ("default", "math") and candidates[0][0] == column
    assert sum(candidates[0][1].values()) >= 0.95 * len(rows)


@pytest.mark.parametrize(
    "rows",
    [
        # genuinely single-task: numbers, multiple-choice letters, a yes/no answer under the usual name
        _rows(400, task=lambda i: "arith", answer=lambda i: str(i % 5), choice=lambda i: "ABCD"[i % 4]),
        _rows(400, task=lambda i: "qa", answer=lambda i: ("yes", "no")[i % 2], final_answer=lambda i: "ab"[i % 2]),
        # a grading of one task's rows, not another task
        _rows(400, task=lambda i: "math", difficulty=lambda i: ("easy", "medium", "hard")[i % 3]),
        # ids, free text, a constant column, a column with one value on nearly every row
        _rows(400, task=lambda i: "math", problem_id=lambda i: f"p{i}", note=lambda i: f"seen {i % 97} times"),
        _rows(400, task=lambda i: "math", split=lambda i: "train", source=lambda i: "rare" if i % 50 == 0 else "web"),
        # the task column varies: real tasks
        _rows(400, task=lambda i: ("math", "code")[i % 2], source=lambda i: SOURCES[i % 3]),
        # too few rows to judge (a toy dataset)
        _rows(40, task=lambda i: "default", source=lambda i: SOURCES[i % 3]),
        # nearly constant on too few rows
        _rows(100, task=lambda i: "math" if i == 7 else "default", source=lambda i: SOURCES[i % 3]),
    ],
)
def test_silent_on_single_task_datasets_and_answer_columns(rows: list[dict[str, Any]]) -> None:
    assert constant_task_column(rows, "task", list(rows[0]), default="default") is None


def _relabelled(n_per_task: int) -> Any:
    """The two-task fixture with its task names moved to ``data_source`` and ``task`` left at one value."""
    data = make_dataset(n_per_task=n_per_task)
    return data.rename_column("task", "data_source").add_column("task", ["default"] * len(data))


@pytest.mark.slow
def test_grpo_run_warns_once_with_the_column_and_its_counts(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(train_dataset=_relabelled(40), max_steps=1, reward_funcs=[arith_correct, echo_match])
    run = rl_guards.install(trainer, guards=[TaskRewardMonitor])
    with shows("tasks.task_column: data_source"):
        trainer.train()
    assert [f.kind for f in run.findings] == ["task_column_constant"]
    message = run.findings[0].message
    assert "'default' on 100% of 80 rows" in message and "'arith' 40, 'echo' 40" in message


@pytest.mark.slow
def test_grpo_run_on_one_task_with_a_constant_column_is_silent(make_grpo_trainer: Any) -> None:
    data = make_dataset(n_per_task=80, tasks=("arith",))  # task 'arith' on every row; answers are numbers
    trainer = make_grpo_trainer(train_dataset=data, max_steps=1, reward_funcs=[arith_correct])
    run = rl_guards.install(trainer, guards=[TaskRewardMonitor])
    trainer.train()
    assert run.findings == []


@pytest.mark.slow
@pytest.mark.parametrize("drop_task", [False, True])
def test_label_like_metadata_under_other_names_is_a_note_not_a_warning(make_grpo_trainer: Any, drop_task: bool) -> None:
    """A single-task dataset's metadata (a language, a license) has few values on a fair share of the rows, as task
    labels do; without a task-like column name that is no evidence of lost tasks: a note, no finding, no warning."""
    data = make_dataset(n_per_task=80, tasks=("arith",))
    data = data.add_column("language", [("en", "zh", "fr")[i % 3] for i in range(len(data))])
    data = data.add_column("license", [("mit", "apache-2.0")[i % 2] for i in range(len(data))])
    if drop_task:  # no task column at all: the same columns would have been suggested as the task column
        data = data.remove_columns("task")
    trainer = make_grpo_trainer(train_dataset=data, max_steps=1, reward_funcs=[arith_correct])
    run = rl_guards.install(trainer, guards=[TaskRewardMonitor])
    with shows(None) as nothing_said:
        trainer.train()
    assert not nothing_said.messages
    assert run.findings == []
    kind = "task_column_missing" if drop_task else "task_column_constant"
    note = run.session.notes[("tasks", kind)]
    assert "'language'" in note or "'license'" in note


# ----- issue 40, class 4: few rows, judged by whether the prompts tell the look-alike's values apart ---------------
ARITH = "What is {}+{}? Answer with the number."
ECHO = "Repeat the word: {}"
WORDS = ("apple", "river", "stone", "house", "light", "water")


def _two_tasks(n: int, **columns: Any) -> list[dict[str, Any]]:
    """``n`` rows alternating an arithmetic and an echo prompt (chat messages), plus ``columns`` (functions of i)."""
    prompts = [
        [{"role": "user", "content": ARITH.format(i % 10, i % 7) if i % 2 == 0 else ECHO.format(WORDS[i % 6])}]
        for i in range(n)
    ]
    return [{"prompt": p, **{k: f(i) for k, f in columns.items()}} for i, p in enumerate(prompts)]


def test_prompt_words_read_strings_and_messages() -> None:
    assert prompt_words("What is 3+4? Answer.") == {"what", "is", "answer"}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    assert prompt_words(messages) == {"be", "brief", "hi"}
    assert prompt_words(None) == frozenset()


@pytest.mark.parametrize(
    ("prompts", "labels", "significant"),
    [
        # two kinds of prompts, the labels following them
        ([ARITH.format(i, i) if i % 2 else ECHO.format(WORDS[i % 6]) for i in range(24)],
         ["arith" if i % 2 else "echo" for i in range(24)], True),
        # the same prompts, labels in blocks unrelated to their kind
        ([ARITH.format(i, i) if i % 2 else ECHO.format(WORDS[i % 6]) for i in range(24)],
         ["a" if i < 12 else "b" for i in range(24)], False),
        # one template: every prompt ties with every other, so no vote says anything
        ([f"question {i}" for i in range(40)], [("x", "y", "z")[i % 3] for i in range(40)], False),
        # few rows, perfectly split: 10 rows of two kinds (p = 0.44**10)
        ([ARITH.format(i, i) if i % 2 else ECHO.format(WORDS[i % 6]) for i in range(10)],
         ["arith" if i % 2 else "echo" for i in range(10)], True),
    ],
)  # fmt: skip
def test_labels_follow_prompts(prompts: list[str], labels: list[str], significant: bool) -> None:
    agreement, chance, p = labels_follow_prompts(prompts, labels)
    assert (p < 1e-3) is significant, (agreement, chance, p)
    assert 0 <= chance <= agreement or not significant


@pytest.mark.parametrize(
    ("rows", "column"),
    [
        # the form: a 24-row debug dataset, task 'default', 'source' holding the two tasks
        (_two_tasks(24, task=lambda i: "default", source=lambda i: ("gsm8k", "wordle")[i % 2]), "source"),
        # 12 rows, an unusual name
        (_two_tasks(12, task=lambda i: "default", origin=lambda i: ("math", "echo")[i % 2]), "origin"),
        # nearly constant on 100 rows
        (_two_tasks(100, task=lambda i: "math" if i == 8 else "default", domain=lambda i: ("m", "e")[i % 2] * 3),
         "domain"),
    ],
)  # fmt: skip
def test_a_small_dataset_is_judged_with_its_prompts(rows: list[dict[str, Any]], column: str) -> None:
    found = constant_task_column(rows, "task", list(rows[0]), default="default")
    assert found is not None
    assert found[1][0][0] == column


@pytest.mark.parametrize(
    "rows",
    [
        # the look-alike does not follow the prompts: labels in blocks across both kinds
        _two_tasks(24, task=lambda i: "default", source=lambda i: "a1" if i < 12 else "b2"),
        # one kind of prompt: the values cannot follow it
        [{"prompt": ARITH.format(i, i), "task": "default", "source": ("web", "book")[i % 2]} for i in range(24)],
        # too few rows on each value (4 + 4)
        _two_tasks(8, task=lambda i: "default", source=lambda i: ("gsm8k", "wordle")[i % 2]),
        # the task column varies: real tasks
        _two_tasks(24, task=lambda i: ("math", "echo")[i % 2], source=lambda i: ("gsm8k", "wordle")[i % 2]),
        # answers and gradings, however well the prompts tell them apart
        _two_tasks(24, task=lambda i: "default", answer=lambda i: ("yes", "no")[i % 2],
                   difficulty=lambda i: ("easy", "hard")[i % 2]),
        # no prompts to judge with
        [{"task": "default", "source": ("gsm8k", "wordle")[i % 2]} for i in range(24)],
    ],
)  # fmt: skip
def test_a_small_dataset_without_the_evidence_is_silent(rows: list[dict[str, Any]]) -> None:
    assert constant_task_column(rows, "task", list(rows[0]), default="default") is None


@pytest.mark.slow
def test_grpo_run_on_a_24_row_dataset_warns_and_its_twin_is_silent(make_grpo_trainer: Any) -> None:
    trainer = make_grpo_trainer(train_dataset=_relabelled(12), max_steps=1, reward_funcs=[arith_correct, echo_match])
    run = rl_guards.install(trainer, guards=[TaskRewardMonitor])
    with shows("tasks.task_column: data_source"):
        trainer.train()
    assert [f.kind for f in run.findings] == ["task_column_constant"]
    assert "'default' on 100% of 24 rows" in run.findings[0].message
    data = make_dataset(n_per_task=12)
    twin = make_grpo_trainer(
        train_dataset=data.add_column("data_source", list(data["task"])),
        max_steps=1,
        reward_funcs=[arith_correct, echo_match],
    )
    run = rl_guards.install(twin, guards=[TaskRewardMonitor])
    twin.train()
    assert run.findings == []
