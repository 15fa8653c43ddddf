"""Reward-function probes on a real GRPOTrainer with plain, unwrapped reward functions: each planted flaw is found
and named, and the clean twins (the project's rewards, TRL's shipped rewards) stay silent."""

from __future__ import annotations

import re
from typing import Any

import pytest
from datasets import Dataset

import rl_guards
from rl_guards.guards.probes import RewardProbeGuard
from rl_guards.testing import make_dataset
from rl_guards.testing.healthy import count_xml
from rl_guards.testing.rewards import arith_correct, completion_text, echo_match, final_answer, length_penalty

pytestmark = pytest.mark.slow  # every test here builds a real GRPOTrainer on the tiny model

THINKING = make_dataset(thinking=True)
PLAIN = make_dataset(thinking=False)


def _answers(completions: list[Any]) -> list[str]:
    return [completion_text(c) for c in completions]


def sliced_judge(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: the judge sees text[:64] only."""
    return [float(a in final_answer(t[:64]).split()) for t, a in zip(_answers(completions), answer, strict=True)]


def sliced_judge_20(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: text[:20]."""
    return [float(a in t[:20].split()) for t, a in zip(_answers(completions), answer, strict=True)]


def whole_text_judge(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: an outcome judge that reads the thinking too (the answer anywhere in the completion)."""
    return [
        float(re.search(rf"\b{re.escape(a)}\b", t) is not None)
        for t, a in zip(_answers(completions), answer, strict=True)
    ]


def pays_length(completions: list[Any], **kwargs: Any) -> list[float]:
    """Planted hackable reward: longer is better."""
    return [min(len(t) / 200.0, 2.0) for t in _answers(completions)]


def pays_prompt_words(completions: list[Any], prompts: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted hackable judge: twice the share of the question's words the completion uses (an echo earns it all,
    more than a right answer in any form)."""
    out = []
    for c, p, a in zip(completions, prompts, answer, strict=True):
        words = set(re.findall(r"\w+", p[-1]["content"].lower()))
        text = set(re.findall(r"\w+", completion_text(c).lower()))
        out.append(2 * len(words & text) / max(len(words), 1) + float(final_answer(completion_text(c)).strip() == a))
    return out


def _run(
    make_grpo_trainer: Any, reward_funcs: list[Any], data: Any, steps: int = 1, trainer_args: Any = None, **config: Any
) -> Any:
    trainer = make_grpo_trainer(
        reward_funcs=reward_funcs,
        train_dataset=data,
        max_completion_length=48,
        max_steps=steps,
        **(trainer_args or {}),
        generation_kwargs={"min_new_tokens": 48},  # completions long enough for a text[:64] to matter
    )
    # the tiny model's steps take a fraction of a second where a real one takes tens: at the default budget (2 % of
    # the run's time) the probes would not fit into a one-step run (test_probes_keep_within_their_time_budget
    # checks the budget itself)
    config = {"budget": 100.0, **config}
    run = rl_guards.install(trainer, {"probes": {"mode": "log", **config}}, guards=[RewardProbeGuard])
    trainer.train()
    return run


def _kinds(run: Any) -> set[str]:
    return {f.kind for f in run.findings if f.guard == "probes"}


@pytest.mark.parametrize(
    ("planted", "data", "kind"),
    [
        ([sliced_judge, arith_correct], PLAIN, "reads_prefix:sliced_judge"),
        ([sliced_judge_20, arith_correct], PLAIN, "reads_prefix:sliced_judge_20"),
        ([whole_text_judge, arith_correct], THINKING, "reads_thinking:whole_text_judge"),
        ([pays_length], PLAIN, "hackable:pays_length"),
        ([pays_prompt_words], PLAIN, "hackable:pays_prompt_words"),
    ],
    ids=["text[:64]", "text[:20]", "judge-reads-thinking", "pays-length", "pays-an-echo"],
)
def test_probe_finds_the_planted_flaw(make_grpo_trainer: Any, planted: list[Any], data: Any, kind: str) -> None:
    run = _run(make_grpo_trainer, planted, data)
    assert kind in _kinds(run), run.summary()
    assert _kinds(run) <= {kind}, run.summary()  # the planted flaw only: the clean function is not blamed
    finding = next(f for f in run.findings if f.kind == kind)
    assert planted[0].__name__ in finding.message and "Fix:" in finding.message
    assert "prompt:" in finding.message  # a row it was probed on
    assert re.search(r"seen on \d+ of the \d+ rows probed", finding.message)  # a quorum of rows, not one


def test_declared_exceptions_are_not_flagged(make_grpo_trainer: Any) -> None:
    run = _run(
        make_grpo_trainer,
        [whole_text_judge, sliced_judge_20, arith_correct],
        THINKING,
        process_rewards=["whole_text_judge"],
        prefix_ok=["sliced_judge_20"],
    )
    assert not {k for k in _kinds(run) if k.startswith(("reads_thinking", "reads_prefix"))}, run.summary()


def _with_solution(data: Any) -> Any:
    return data.map(lambda row: {"solution": f"${row['answer']}$"})


def test_trl_rewards_non_thinking_are_silent(make_grpo_trainer: Any) -> None:
    from trl.rewards import accuracy_reward, get_soft_overlong_punishment

    data = _with_solution(make_dataset(tasks=("arith",), thinking=False))
    overlong = get_soft_overlong_punishment(max_completion_len=48, soft_punish_cache=16)
    run = _run(make_grpo_trainer, [accuracy_reward, overlong], data)
    assert run.guard("probes").rounds >= 1
    assert _kinds(run) == set(), run.summary()


def test_trl_rewards_thinking_are_silent(make_grpo_trainer: Any) -> None:
    from trl.rewards import reasoning_accuracy_reward, think_format_reward

    data = _with_solution(make_dataset(tasks=("arith",), thinking=True))
    run = _run(make_grpo_trainer, [reasoning_accuracy_reward, think_format_reward], data)
    assert _kinds(run) == set(), run.summary()


def test_example_rewards_are_silent(make_grpo_trainer: Any) -> None:
    run = _run(make_grpo_trainer, [arith_correct, echo_match, length_penalty], THINKING)
    assert run.guard("probes").rounds >= 1
    assert _kinds(run) == set(), run.summary()


@pytest.mark.parametrize("budget", [1.0, 0.02])
def test_probes_keep_within_their_time_budget(make_grpo_trainer: Any, budget: float) -> None:
    """The probes' wall time stays within ``budget`` of the run's time on this rank after every batch: at 1.0 they
    run every ``every_steps``; at 2 % of a tiny CPU run (steps of ~0.1 s) less often or not at all."""
    data = make_dataset(tasks=("arith",), thinking=False)  # one task: no first probe of a new task later
    trainer = make_grpo_trainer(reward_funcs=[arith_correct, echo_match], train_dataset=data, max_steps=16)
    config = {"probes": {"mode": "log", "every_steps": 2, "budget": budget, "rows": 3}}
    run = rl_guards.install(trainer, config, guards=[RewardProbeGuard])
    guard = run.guard("probes")
    shares = []
    original = guard.scan

    def scan(batch: Any) -> Any:
        out = original(batch)
        shares.append((guard.spent, guard.elapsed))
        return out

    guard.scan = scan  # type: ignore[method-assign]
    trainer.train()
    assert all(spent <= budget * elapsed + 0.05 for spent, elapsed in shares), shares  # one pass's estimate slack
    assert (guard.rounds >= 4) if budget == 1.0 else guard.rounds <= 4, guard.rounds
    restored = RewardProbeGuard(run.config)
    restored.load_state_dict(guard.state_dict())
    assert restored.state_dict() == guard.state_dict()


def test_later_probes_are_cheaper_and_still_find_the_flaw(make_grpo_trainer: Any) -> None:
    """A probe after the first keeps to fewer rows and each function's own answer forms: a fraction of the first
    probe's texts, and the planted slice is found again (counted twice); the forms survive a resume."""
    data = make_dataset(tasks=("arith",), thinking=False)  # one task: no first probe of a new task later
    run = _run(make_grpo_trainer, [sliced_judge_20, arith_correct], data, steps=6, every_steps=3)
    guard = run.guard("probes")
    assert guard.rounds == 2, run.summary()
    assert guard.texts[1] < 0.6 * guard.texts[0], guard.texts
    assert run.session.counts[("probes", "reads_prefix:sliced_judge_20")] == 2, run.summary()
    assert guard.forms["arith_correct"] and guard.forms["sliced_judge_20"]
    restored = RewardProbeGuard(run.config)
    restored.load_state_dict(guard.state_dict())
    assert restored.forms == guard.forms


def test_a_function_that_fails_on_variants_is_left_out(make_grpo_trainer: Any) -> None:
    calls = []

    def picky(completions: list[Any], **kwargs: Any) -> list[float]:
        calls.append(len(completions))
        if len(completions) != 8:
            raise RuntimeError("only scores batches of 8")
        return [0.0] * len(completions)

    run = _run(make_grpo_trainer, [picky, arith_correct], PLAIN, skip=["arith_correct"])
    assert run.guard("probes").rounds >= 1 and len(calls) >= 2
    assert not [f for f in run.findings if f.guard in ("probes", "hook")], run.summary()
    text = run.guard("probes").summary_text()
    assert "picky: raised on the variants of arith (not judged there)" in text and "of the run's time" in text
    assert "arith_correct: not probed (listed in probes.skip)" in text


def test_a_format_reward_is_not_blamed_while_nobody_is_right_yet(make_grpo_trainer: Any) -> None:
    # No reference column the probes know ('expected'), nobody right at step 0: the group's best completion earns
    # only the format reward, so an empty answer in the right format earning as much says nothing.
    from trl.rewards import think_format_reward

    def correct(completions: list[Any], expected: list[str], **kwargs: Any) -> list[float]:
        return [
            float(final_answer(completion_text(c)).strip() == e) for c, e in zip(completions, expected, strict=True)
        ]

    data = make_dataset(tasks=("arith",), thinking=True).rename_column("answer", "expected")
    run = _run(make_grpo_trainer, [correct, think_format_reward], data)
    assert run.guard("probes").rounds >= 1
    assert not [k for k in _kinds(run) if k.startswith("hackable")], run.summary()


def last_number_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """The usual GSM8K-style grader: the last number of the answer (after the thinking) against the reference."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        numbers = re.findall(r"-?\d+", completion[0]["content"].split("</think>")[-1])
        rewards.append(1.0 if numbers and float(numbers[-1]) == float(expected) else 0.0)
    return rewards


def test_a_last_number_grader_is_not_hackable_by_an_echo_of_a_prompt_that_ends_with_the_answer(
    make_grpo_trainer: Any,
) -> None:
    # Issue 20 item 5: "What is 0+1?" echoed ends with the right number; main called the grader hackable from it.
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"What is 0+{b}?"}] for b in range(1, 9)],
            "answer": [str(b) for b in range(1, 9)],
        }
    )
    run = _run(make_grpo_trainer, [last_number_reward], data)
    assert run.guard("probes").rounds >= 1
    assert _kinds(run) == set(), run.summary()


# The reward functions of the widely copied GRPO GSM8K example (XML reasoning/answer format), as users paste them.
XML_SYSTEM_PROMPT = "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"


def extract_xml_answer(text: str) -> str:
    answer = text.split("<answer>")[-1]
    answer = answer.split("</answer>")[0]
    return answer.strip()


def correctness_reward_func(
    prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any
) -> list[float]:
    responses = [completion[0]["content"] for completion in completions]
    extracted_responses = [extract_xml_answer(r) for r in responses]
    return [2.0 if r == a else 0.0 for r, a in zip(extracted_responses, answer, strict=True)]


def int_reward_func(completions: list[Any], **kwargs: Any) -> list[float]:
    responses = [completion[0]["content"] for completion in completions]
    extracted_responses = [extract_xml_answer(r) for r in responses]
    return [0.5 if r.isdigit() else 0.0 for r in extracted_responses]


def strict_format_reward_func(completions: list[Any], **kwargs: Any) -> list[float]:
    pattern = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
    responses = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, r) for r in responses]
    return [0.5 if match else 0.0 for match in matches]


def soft_format_reward_func(completions: list[Any], **kwargs: Any) -> list[float]:
    pattern = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
    responses = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, r) for r in responses]
    return [0.5 if match else 0.0 for match in matches]


def xmlcount_reward_func(completions: list[Any], **kwargs: Any) -> list[float]:
    contents = [completion[0]["content"] for completion in completions]
    return [count_xml(c) for c in contents]


XML_REWARDS = [xmlcount_reward_func, soft_format_reward_func, strict_format_reward_func, int_reward_func,
               correctness_reward_func]  # fmt: skip


def test_the_copied_xml_format_rewards_are_silent(make_grpo_trainer: Any) -> None:
    # Issue 20 item 6 (the pure rules' regression test: test_format_rewards_are_not_judged_as_outcome_rewards).
    # Non-thinking, as those scripts run (with think blocks: test_a_judge_of_the_answer_alone_is_silent).
    questions = [(a, b) for a in range(3) for b in range(3, 6)]
    data = Dataset.from_dict(
        {
            "prompt": [
                [{"role": "system", "content": XML_SYSTEM_PROMPT}, {"role": "user", "content": f"What is {a}+{b}?"}]
                for a, b in questions
            ],
            "answer": [str(a + b) for a, b in questions],
        }
    )
    run = _run(make_grpo_trainer, XML_REWARDS, data, trainer_args={"chat_template_kwargs": {"enable_thinking": False}})
    assert run.guard("probes").rounds >= 1
    assert _kinds(run) == set(), run.summary()


# ----- issue 21: every reward function on every task, any number of them -------------------------------------


def _make_exact(name: str) -> Any:
    def exact(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
        return [float(final_answer(completion_text(c)).strip() == a) for c, a in zip(completions, answer, strict=True)]

    exact.__name__ = name
    return exact


@pytest.mark.parametrize("planted", [True, False], ids=["planted", "clean"])
def test_a_twentieth_reward_function_is_probed(make_grpo_trainer: Any, planted: bool) -> None:
    # Issue 21 item 7: past the 17th function the verdict bits of one float ran out and it was silently skipped.
    funcs = [_make_exact(f"exact_{i:02d}") for i in range(19)] + [sliced_judge if planted else _make_exact("last")]
    run = _run(make_grpo_trainer, funcs, PLAIN)
    assert _kinds(run) == ({"reads_prefix:sliced_judge"} if planted else set()), run.summary()
    assert len(run.guard("probes").coverage["functions"]) == 20


def echo_judge_first_chars(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[Any]:
    """Planted: the echo task's judge reads text[:20] and returns None on other tasks' rows."""
    return [
        None if t != "echo" else float(a.lower() in completion_text(c)[:20].lower().split())
        for c, a, t in zip(completions, answer, task, strict=True)
    ]


def echo_judge(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[Any]:
    """Clean twin: the final answer, whole."""
    return [
        None if t != "echo" else float(final_answer(completion_text(c)).strip().lower() == a.lower())
        for c, a, t in zip(completions, answer, task, strict=True)
    ]


def arith_only(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[Any]:
    return arith_correct(completions, answer, task)


@pytest.mark.parametrize("planted", [True, False], ids=["planted", "clean"])
def test_a_task_gated_function_is_probed_on_its_own_task(make_grpo_trainer: Any, planted: bool) -> None:
    # Issue 21 item 1: each probe took the best row of one group per rank, so another task's judge never saw one.
    judge = echo_judge_first_chars if planted else echo_judge
    run = _run(make_grpo_trainer, [arith_only, judge], PLAIN, steps=3)  # the first batch holds arith rows only
    assert _kinds(run) == ({"reads_prefix:echo_judge_first_chars"} if planted else set()), run.summary()
    coverage = run.guard("probes").coverage["functions"]
    assert set(coverage[judge.__name__]["rows"]) == {"echo"} and coverage[judge.__name__]["not_its_task"] == ["arith"]
    assert set(coverage["arith_only"]["rows"]) == {"arith"}
    text = run.guard("probes").summary_text()
    assert f"{judge.__name__}: echo " in text and "None on arith (not its task)" in text


def judge_first_72(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: a cut between the usual lengths (the README's text[:3000] in a run of longer completions)."""
    return [float(a in c[0]["content"][:72].split()) for c, a in zip(completions, answer, strict=True)]


def judge_last_30(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: only the end of the completion is read."""
    return [float(a in c[0]["content"][-30:].split()) for c, a in zip(completions, answer, strict=True)]


def judge_whole_words(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Clean twin: the answer among the final answer's words, wherever it is."""
    return [float(a in final_answer(completion_text(c)).split()) for c, a in zip(completions, answer, strict=True)]


@pytest.mark.parametrize(
    ("judge", "kind"),
    [(judge_first_72, "reads_prefix:judge_first_72"), (judge_last_30, "reads_suffix:judge_last_30"),
     (judge_whole_words, None)],
    ids=["text[:72]", "text[-30:]", "clean"],
)  # fmt: skip
def test_a_cut_at_any_length_is_found(make_grpo_trainer: Any, judge: Any, kind: str | None) -> None:
    # Issue 21 item 2: cuts were tried at 20, 64, 256, ... only; a cut between them, or at the end, was missed.
    run = _run(make_grpo_trainer, [judge, arith_correct], PLAIN)
    assert _kinds(run) == ({kind} if kind else set()), run.summary()
    if judge is judge_first_72:  # the cut narrowed by bisection from the lengths tried (64 and the longest)
        message = next(f.message for f in run.findings if f.kind == kind)
        seen, blind = map(int, re.search(r"reads only the first (\d+)-(\d+) characters", message).groups())
        assert 60 <= seen < blind <= 72 and blind - seen <= 4, message


# ----- issue 21 item 3: reading the thinking, with the answer forms people grade --------------------------------


def _graded(forms: dict[str, Any], whole: bool) -> list[Any]:
    """One judge per answer form; ``whole``: it reads the whole completion (planted), else the answer after the
    thinking (the clean twin)."""
    judges = []
    for form, extract in forms.items():

        def judge(completions: list[Any], answer: list[str], extract: Any = extract, **kwargs: Any) -> list[float]:
            texts = [c[0]["content"] for c in completions]
            texts = texts if whole else [t.split("</think>")[-1] for t in texts]
            return [float(extract(t) == a) for t, a in zip(texts, answer, strict=True)]

        judge.__name__ = f"{form}_{'whole' if whole else 'answer'}"
        judges.append(judge)
    return judges


def _first(pattern: str) -> Any:
    def extract(text: str) -> str | None:
        match = re.search(pattern, text)
        return match.group(1).strip() if match else None

    return extract


def _last_line(text: str) -> str:
    lines = [line for line in re.sub(r"</?think>", "", text).strip().split("\n") if line.strip()]
    return lines[-1].strip() if lines else ""


ANSWER_FORMS: dict[str, Any] = {
    "bare": lambda t: (re.findall(r"\b\d+\b", t) or [None])[0],
    "stated": _first(r"[Tt]he answer is\s*([^\s.]+)"),
    "boxed": _first(r"\\boxed\{([^}]*)\}"),
    "tagged": _first(r"<answer>\s*(.*?)\s*</answer>"),
    "hash": _first(r"####\s*(-?\d+)"),
    "last_line": _last_line,
}
ARITH_THINKING = make_dataset(tasks=("arith",), thinking=True)


def thinking_only(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: grades only the thinking."""
    return [
        float(a in re.findall(r"\d+", c[0]["content"].split("</think>")[0]))
        for c, a in zip(completions, answer, strict=True)
    ]


WHOLE = {f.__name__: f for f in _graded(ANSWER_FORMS, whole=True)}


@pytest.mark.parametrize(
    "judge",
    [*(f for name, f in WHOLE.items() if name != "last_line_whole"), thinking_only],
    ids=lambda f: f.__name__,
)
def test_a_judge_that_reads_the_thinking_is_found(make_grpo_trainer: Any, judge: Any) -> None:
    # the first answer of the whole completion: the think block's, before the one the policy gives
    run = _run(make_grpo_trainer, [judge], ARITH_THINKING)
    assert f"reads_thinking:{judge.__name__}" in _kinds(run), run.summary()


@pytest.mark.parametrize(
    "judge",
    [*_graded(ANSWER_FORMS, whole=False), WHOLE["last_line_whole"], correctness_reward_func],
    ids=lambda f: f.__name__,
)
def test_a_judge_of_the_answer_alone_is_silent(make_grpo_trainer: Any, judge: Any) -> None:
    # The last two read the whole completion but take its last answer: the thinking's only where the answer is
    # missing or unformed (the precision corpus's whole-text graders); that is not taken for reading the thinking.
    run = _run(make_grpo_trainer, [judge], ARITH_THINKING)
    assert _kinds(run) == set(), run.summary()


# ----- issue 21 item 4: hackability, as a policy would find it -------------------------------------------------


def contains_answer(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Planted: the reference anywhere in the answer ("5" in "15", a list of candidates)."""
    return [float(a in final_answer(c[0]["content"])) for c, a in zip(completions, answer, strict=True)]


def diversity_bonus(completions: list[Any], **kwargs: Any) -> list[float]:
    """Planted: distinct words, uncapped: varied filler earns more than a right answer."""
    return [len(set(c[0]["content"].split())) / 20 for c in completions]


def small_diversity_bonus(completions: list[Any], **kwargs: Any) -> list[float]:
    """Clean twin: the same, capped well below a right answer."""
    return [min(len(set(c[0]["content"].split())) / 20, 0.1) for c in completions]


def thinking_bonus(completions: list[Any], **kwargs: Any) -> list[float]:
    """Planted: pays the thinking's length up to 2.0, more than a right answer."""
    return [min(len(c[0]["content"].split("</think>")[0]) / 500, 2.0) for c in completions]


def small_thinking_bonus(completions: list[Any], **kwargs: Any) -> list[float]:
    """Clean twin: capped at 0.2."""
    return [min(len(c[0]["content"].split("</think>")[0]) / 500, 0.2) for c in completions]


@pytest.mark.parametrize(
    ("funcs", "data", "kind"),
    [
        ([contains_answer], PLAIN, "hackable:contains_answer"),
        ([arith_correct, echo_match], PLAIN, None),
        ([arith_correct, diversity_bonus], ARITH_THINKING, "hackable:diversity_bonus"),
        ([arith_correct, small_diversity_bonus], ARITH_THINKING, None),
        ([arith_correct, thinking_bonus], ARITH_THINKING, "hackable:thinking_bonus"),
        ([arith_correct, small_thinking_bonus], ARITH_THINKING, None),
    ],
    ids=["substring", "substring-clean", "diversity", "diversity-clean", "thinking-length", "thinking-length-clean"],
)
def test_a_reward_a_policy_can_earn_without_the_task_is_found(
    make_grpo_trainer: Any, funcs: list[Any], data: Any, kind: str | None
) -> None:
    run = _run(make_grpo_trainer, funcs, data)
    assert _kinds(run) == ({kind} if kind else set()), run.summary()
    if kind:
        assert re.search(r"seen on \d+ of the \d+ rows probed", next(f for f in run.findings if f.kind == kind).message)


# ----- issue 41 item 1: a probe never hangs the run -----------------------------------------------------------------


def stalls_on_padding(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """Sleeps forever on a long text (a judge API that never answers, a sandbox that hangs): the run's own
    completions are short, only the probes' padded variants are long."""
    import time

    texts = _answers(completions)
    for text in texts:
        if len(text) > 600:
            time.sleep(3600)
    return [float(final_answer(t).strip() == a) for t, a in zip(texts, answer, strict=True)]


def test_a_function_that_stalls_on_a_probe_text_never_stops_the_run(make_grpo_trainer: Any) -> None:
    import time

    start = time.perf_counter()
    run = _run(make_grpo_trainer, [stalls_on_padding, arith_correct], PLAIN, steps=3, every_steps=1)
    spent = time.perf_counter() - start
    assert run.trainer.state.global_step == 3  # every step trained
    stalled = [f for f in run.findings if f.kind == "stalled:stalls_on_padding"]
    assert stalled and "the last text it read:" in stalled[0].message, run.summary()
    assert "left out after it stalled" in run.guard("probes").summary_text()
    assert run.guard("probes").rounds >= 2  # the other function was probed again; the stalled one left out
    assert spent < 120, spent  # one deadline waited for (FLOOR .. cap), not an hour
