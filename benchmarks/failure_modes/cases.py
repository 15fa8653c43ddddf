"""The failure modes of the practical-failure-modes notes, each as a planted bug and the same run clean.

Every case builds one spec from ``planted: bool``: the clean run is the planted run with the bug taken out and
nothing else changed (both runs share seed, data, config and thresholds). ``expect`` lists the (guard, kind)
pairs that count as catching it; ``stated`` cases (choices to make deliberately) count as caught when the
preflight report states the choice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.failure_modes.harness import N_PER_TASK, GrpoSpec, SftSpec
from rl_guards.rewards.slicing import watch_inputs

# ----- reward functions (module level: picklable, fixed names = TRL's metric keys) ---------------------------


def _text(completion: Any) -> str:
    from rl_guards.testing.rewards import completion_text

    return completion_text(completion)


def arith_correct_every_row(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The arith reward with its task filter lost: it scores every row, echo rows included."""
    from rl_guards.testing.rewards import arith_correct

    return arith_correct(completions, answer)  # no task= : nothing is None


arith_correct_every_row.__name__ = "arith_correct"


def echo_match_wrong_column(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """An echo reward that reads a column the dataset does not have: ``"" in text`` is always true -> 1.0."""
    expected = kwargs.get("solution") or [""] * len(completions)
    return [1.0 if str(e) in _text(c) else 0.0 for c, e in zip(completions, expected, strict=True)]


echo_match_wrong_column.__name__ = "echo_match"


def arith_any_number(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A 'correctness' reward that only checks the format: 1.0 when the final answer holds any number."""
    from rl_guards.testing.rewards import final_answer

    return [1.0 if re.search(r"\d", final_answer(_text(c))) else 0.0 for c in completions]


arith_any_number.__name__ = "arith_correct"

# ----- reward functions the user did not wrap (issue 15: probes, sanity, exceptions) -------------------------


def judge_first_chars(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A plain judge that reads ``completion[:20]`` (no watch_inputs: only the probes can see the slice)."""
    return [_judge_score(_text(c)[:20], a) for c, a in zip(completions, answer, strict=True)]


judge_first_chars.__name__ = "judge"


def judge_final_answer(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge of the final answer only (after the think block), whole: it must be the expected answer."""
    from rl_guards.testing.rewards import final_answer

    def score(text: str, expected: str) -> float:
        return float(final_answer(text).strip().rstrip(".!").lower() == str(expected).lower())

    return [score(_text(c), a) for c, a in zip(completions, answer, strict=True)]


judge_final_answer.__name__ = "judge"


def judge_whole_completion(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A plain outcome judge handed the whole completion, thinking included."""
    return [_judge_score(_text(c), a) for c, a in zip(completions, answer, strict=True)]


judge_whole_completion.__name__ = "judge"


def quality_by_length(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A 'quality' reward that is really a length reward (longer scores higher, capped at 2)."""
    return [min(len(_text(c)) / 100.0, 2.0) for c in completions]


quality_by_length.__name__ = "quality"


def quality_exact(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The same slot with a real check: the final answer is the expected one."""
    from rl_guards.testing.rewards import final_answer

    return [
        float(final_answer(_text(c)).strip().lower() == str(a).lower())
        for c, a in zip(completions, answer, strict=True)
    ]


quality_exact.__name__ = "quality"


def arith_inverted(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    """The arith reward with its sign flipped (1 - correct)."""
    from rl_guards.testing.rewards import arith_correct

    return [None if v is None else 1.0 - v for v in arith_correct(completions, answer, task)]


arith_inverted.__name__ = "arith_correct"


def echo_parses_numbers(
    completions: list[Any], answer: list[str], task: list[str], **kwargs: Any
) -> list[float | None]:
    """An echo reward that calls int() on its answer column (a copy-paste from arith): raises on every echo row."""
    from rl_guards.testing.rewards import echo_match

    for t, a in zip(task, answer, strict=True):
        if t == "echo":
            int(a)
    return echo_match(completions, answer, task)


echo_parses_numbers.__name__ = "echo_match"


JUDGE_SLICE = 32  # characters of a completion the sliced judge keeps (the tiny model writes ~10-60)


def _judge_score(text: str, answer: str) -> float:
    """A stand-in LLM judge: 1.0 when the expected answer appears in what it reads."""
    return 1.0 if answer.lower() in text.lower() else 0.0


def _judge_call(judge_prompt: str, answer: str) -> float:
    """The judge model's API call (watched: the slicing guard sees every prompt it is sent)."""
    return _judge_score(judge_prompt, answer)


JUDGE_CALL = watch_inputs(_judge_call, name="judge_call")


def judge_sliced(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge reward that builds its prompt from ``completion[:JUDGE_SLICE]`` ("to save tokens")."""
    call = JUDGE_CALL
    return [call(f"Grade this answer:\n{_text(c)[:JUDGE_SLICE]}", a) for c, a in zip(completions, answer, strict=True)]


judge_sliced.__name__ = "judge"


def judge_full(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The same judge reward reading the whole completion."""
    call = JUDGE_CALL
    return [call(f"Grade this answer:\n{_text(c)}", a) for c, a in zip(completions, answer, strict=True)]


judge_full.__name__ = "judge"


def outcome_judge(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """An outcome judge: scores whatever text it is handed (the full completion unless wrapped)."""
    return [_judge_score(_text(c), a) for c, a in zip(completions, answer, strict=True)]


outcome_judge.__name__ = "outcome_judge"


# ----- shared pieces -------------------------------------------------------------------------------------------


def routed_rewards(echo: Any = None, *, echo_length: bool = True) -> list[Any]:
    """``route()`` of the two tasks, each with a per-token length term so that its groups rarely tie."""
    from rl_guards.rewards.routing import route
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    echo_funcs = [echo if echo is not None else echo_match] + ([length_penalty] if echo_length else [])
    return list(route({"arith": [arith_correct, length_penalty], "echo": echo_funcs}))


def dataset(**kwargs: Any) -> Any:
    from rl_guards.testing import make_dataset

    return make_dataset(N_PER_TASK, **{"thinking": True, **kwargs})


def prefill_dataset() -> Any:
    """Thinking prompts with an assistant prefill message ``<think>\\n`` (meant to make the model think)."""
    ds = dataset()
    return ds.map(lambda row: {"prompt": [*row["prompt"], {"role": "assistant", "content": "<think>\n"}]})


def corrupt_masks(kind: str, n_prompt: int | None = 3) -> Callable[[Any], None]:
    """Plant: wrap ``trainer._generate_and_score_completions`` BEFORE install, so the guard sees bad tensors.

    ``post_eos``: completion_mask set to 1 everywhere (loss on the padding after each EOS).
    ``prompt``: the last ``n_prompt`` prompt tokens prepended to completion_ids with mask 1 (a rollout path that
    slices the generated sequence that many tokens too early): 3 is the assistant header ``<|im_start|>assistant\\n``
    (the model could write it: a warning); None reaches back to the user turn's ``<|im_end|>`` (it could not: a stop).
    """

    def plant(trainer: Any) -> None:
        import torch

        original = trainer._generate_and_score_completions

        def corrupted(inputs: Any) -> Any:
            out = original(inputs)
            mask = out["completion_mask"]
            if kind == "post_eos":
                out["completion_mask"] = torch.ones_like(mask)
            else:
                n = n_prompt
                if n is None:  # from the prompt's last end of turn on
                    end = trainer.processing_class.convert_tokens_to_ids("<|im_end|>")
                    row = out["prompt_ids"][0].tolist()
                    n = len(row) - max(i for i, t in enumerate(row) if t == end)
                head = out["prompt_ids"][:, -n:]
                out["completion_ids"] = torch.cat([head, out["completion_ids"]], dim=1)
                out["completion_mask"] = torch.cat([torch.ones_like(head, dtype=mask.dtype), mask], dim=1)
            return out

        trainer._generate_and_score_completions = corrupted

    return plant


SANITY_CASES = [
    {
        "task": "arith",
        "prompt": [{"role": "user", "content": "What is 3+4? Answer with the number."}],
        "answer": "7",
        "good": ["<think>\n3+4=7\n</think>\n\n7", "7"],
        "bad": ["<think>\n3+4=8\n</think>\n\n8", "<think>\n3+4=7\n</think>\n\n", "12"],
    },
    {
        "task": "echo",
        "prompt": [{"role": "user", "content": "Repeat the word: apple"}],
        "answer": "apple",
        "good": ["<think>\nThe word is apple.\n</think>\n\napple", "apple"],
        "bad": ["<think>\nThe word is apple.\n</think>\n\nriver", ""],
    },
]


def sanity_file(workdir: Path) -> str:
    path = workdir / "reward_sanity_cases.json"
    path.write_text(json.dumps(SANITY_CASES))
    return str(path)


SFT_MESSAGES = [
    [
        {"role": "user", "content": f"What is {a}+{b}? Answer with the number."},
        {"role": "assistant", "content": str(a + b)},
    ]
    for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (6, 3), (4, 4), (7, 1), (0, 5)]
]


def sft_dataset(non_thinking: bool = False) -> Any:
    from datasets import Dataset

    data: dict[str, Any] = {"messages": SFT_MESSAGES}
    if non_thinking:  # SFTTrainer renders each row with its own chat_template_kwargs
        data["chat_template_kwargs"] = [{"enable_thinking": False}] * len(SFT_MESSAGES)
    return Dataset.from_dict(data)


def mask_checker(collator: Any, tok: Any) -> tuple[Any, list[Any]]:
    from rl_guards.collators.sft_masks import MaskCheckingCollator

    checker = MaskCheckingCollator(collator, tok, expect="assistant_only")
    return checker, [checker]


def empty_think_wrap(masked: bool) -> Callable[[Any, Any], tuple[Any, list[Any]]]:
    def wrap(collator: Any, tok: Any) -> tuple[Any, list[Any]]:
        from rl_guards.collators.empty_think import EmptyThinkMasker

        kwargs = {"enable_thinking": False}
        inner = EmptyThinkMasker(collator, tok, kwargs) if masked else collator
        audit = EmptyThinkMasker(inner, tok, kwargs, check_only=True)
        return audit, [audit]

    return wrap


# ----- the cases -------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One failure mode: its plant, how to build either run, and what counts as catching it."""

    name: str
    failure: str  # the failure mode, in the notes' words (short)
    plant: str  # what the planted run does differently, honestly
    build: Callable[[bool, Path], GrpoSpec | SftSpec]  # (planted, workdir) -> spec
    expect: tuple[tuple[str, str], ...] = ()  # (guard, kind): any of these catches it
    stated: tuple[tuple[str, str], ...] = ()  # (preflight code, text the planted report must state)
    note: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


def _misrouted(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    routes = {"arith": ["arith_correct", "length_penalty"], "echo": ["echo_match", "length_penalty"]}
    return GrpoSpec(
        reward_funcs=[arith_correct_every_row if planted else arith_correct, echo_match, length_penalty],
        guards={"routing": {"routes": routes}},
    )


def _unrouted(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.routing import route
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    routes: dict[str, list[Any]] = {"arith": [arith_correct, length_penalty]}
    if not planted:
        routes["echo"] = [echo_match, length_penalty]
    return GrpoSpec(reward_funcs=list(route(routes)))


def _post_eos(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=routed_rewards(), before_install=corrupt_masks("post_eos") if planted else None)


def _prompt_in_loss(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=routed_rewards(), before_install=corrupt_masks("prompt") if planted else None)


def _prompt_past_eos_in_loss(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=routed_rewards(), before_install=corrupt_masks("prompt", None) if planted else None)


def _sft_prompt(planted: bool, workdir: Path) -> SftSpec:
    return SftSpec(sft_dataset(), args={"assistant_only_loss": not planted}, wrap=mask_checker)


def _sft_empty_think(planted: bool, workdir: Path) -> SftSpec:
    return SftSpec(
        sft_dataset(non_thinking=True), args={"assistant_only_loss": True}, wrap=empty_think_wrap(masked=not planted)
    )


def _double_think(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=routed_rewards(), dataset=prefill_dataset() if planted else dataset())


DAMAGE_STEPS = 25  # SFT steps that teach the tiny model to open a think block after the empty one
_DAMAGED: dict[str, str] = {}


def damaged_model_dir() -> str:
    """The warmed tiny model after a short, careless SFT: non-thinking prompts (ending with the template's empty
    think block) answered with a think block, so it writes think tags where it should just answer.

    Built once per process (a few seconds) into a temporary folder removed at exit.
    """
    import atexit
    import shutil
    import tempfile

    import torch

    from benchmarks.failure_modes.harness import quiet, tiny
    from rl_guards.testing.data import make_examples

    setup = tiny()
    if setup.model_dir in _DAMAGED:
        return _DAMAGED[setup.model_dir]
    out = Path(tempfile.mkdtemp(prefix="fm-damaged-model-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    tok = setup.load_tokenizer()
    model = setup.load_model()
    rows = []
    for ex in make_examples(16, seed=7):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": ex.question}],
            add_generation_prompt=True,
            enable_thinking=False,
            tokenize=False,
        )
        target = f"<think>\n{ex.reasoning}\n</think>\n\n{ex.answer}<|im_end|>"
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        t_ids = tok(target, add_special_tokens=False)["input_ids"]
        rows.append((p_ids + t_ids, [-100] * len(p_ids) + t_ids))
    width = max(len(ids) for ids, _ in rows)
    pad = tok.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only spin on a busy machine
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            for _ in range(DAMAGE_STEPS):
                loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    with quiet():
        model.save_pretrained(out)
        tok.save_pretrained(out)
    _DAMAGED[setup.model_dir] = str(out)
    return str(out)


def _stray_tags(planted: bool, workdir: Path) -> GrpoSpec:
    # Non-thinking run in both (enable_thinking=False, column and kwargs agree). Planted: the model had a careless
    # extra SFT (damaged_model_dir) and writes think blocks in non-thinking rollouts; clean: the warmed model.
    return GrpoSpec(
        reward_funcs=routed_rewards(),
        dataset=dataset(thinking=False),
        args={"chat_template_kwargs": {"enable_thinking": False}},
        model=damaged_model_dir() if planted else None,
    )


def _dead_task(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(
        reward_funcs=routed_rewards(echo=echo_match_wrong_column if planted else None, echo_length=False),
        guards={"dead_groups": {"warn_after_steps": 3}},
    )


def _max_tokens(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=routed_rewards(), args={"max_completion_length": 4 if planted else 48})


def _sliced(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.routing import route
    from rl_guards.testing.rewards import length_penalty

    judge = judge_sliced if planted else judge_full
    return GrpoSpec(
        reward_funcs=list(route({"arith": [judge, length_penalty], "echo": [judge, length_penalty]})),
        # Both judges read the whole completion, thinking included (not what this case is about): declared a
        # process reward so that the probes do not report it in either run.
        guards={"slicing": {"min_length": 24}, "probes": {"process_rewards": ["judge"]}},
    )


def _judge_leak(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.blind_judge import blind_judge
    from rl_guards.rewards.routing import route
    from rl_guards.testing.rewards import length_penalty

    judge = blind_judge(outcome_judge, check_only=planted)
    return GrpoSpec(reward_funcs=list(route({"arith": [judge, length_penalty], "echo": [judge, length_penalty]})))


def _bad_reward(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.routing import route
    from rl_guards.testing.rewards import arith_correct, echo_match

    # No length penalty here: reward_sanity requires every function serving a task to rank each good completion
    # above each bad one, which a length penalty cannot do on these cases (see the case note).
    arith = arith_any_number if planted else arith_correct
    return GrpoSpec(
        reward_funcs=list(route({"arith": [arith], "echo": [echo_match]})),
        guards={"reward_sanity": {"cases_file": sanity_file(workdir)}},
    )


def _eval_template(planted: bool, workdir: Path) -> GrpoSpec:
    # An external eval renders with its own chat_template_kwargs; training thinks, the planted eval does not.
    return GrpoSpec(
        reward_funcs=routed_rewards(),
        args={"max_steps": 1},
        guards={"preflight": {"eval_chat_template_kwargs": {"enable_thinking": not planted}}},
    )


def _lr_schedule(planted: bool, workdir: Path) -> GrpoSpec:
    args = (
        {"lr_scheduler_type": "linear"} if planted else {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 1}
    )
    return GrpoSpec(reward_funcs=routed_rewards(), args={"max_steps": 1, **args})


def _dr_grpo(planted: bool, workdir: Path) -> GrpoSpec:
    args = (
        {"loss_type": "grpo", "scale_rewards": "group"}
        if planted
        else {"loss_type": "dr_grpo", "scale_rewards": "none"}
    )
    return GrpoSpec(reward_funcs=routed_rewards(), args={"max_steps": 1, **args})


def _judge_prefix(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.routing import route

    judge = judge_first_chars if planted else judge_final_answer
    return GrpoSpec(
        reward_funcs=list(route({"arith": [judge], "echo": [judge]})),
        dataset=dataset(thinking=False),
        args={"chat_template_kwargs": {"enable_thinking": False}},
    )


def _judge_thinking(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.rewards.routing import route

    judge = judge_whole_completion if planted else judge_final_answer
    return GrpoSpec(reward_funcs=list(route({"arith": [judge], "echo": [judge]})))


def _hackable(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=[quality_by_length if planted else quality_exact])


def _inverted(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import arith_correct, echo_match

    return GrpoSpec(reward_funcs=[arith_inverted if planted else arith_correct, echo_match])


def _reward_raises(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import arith_correct, echo_match

    return GrpoSpec(reward_funcs=[arith_correct, echo_parses_numbers if planted else echo_match])


def _task_column(planted: bool, workdir: Path) -> GrpoSpec:
    data = dataset()
    return GrpoSpec(reward_funcs=routed_rewards(), dataset=data.rename_column("task", "category") if planted else data)


def _thinking_mix(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.trl.thinking_mix import honour_thinking_column

    return GrpoSpec(
        reward_funcs=routed_rewards(),
        dataset=dataset(thinking=True if planted else "mixed"),
        guards={"think_tags": {"target_thinking_share": 0.5}},
        before_install=honour_thinking_column,
    )


CASES: list[Case] = [
    Case(
        "misrouted_reward",
        "a task's output goes to the wrong reward model",
        "arith_correct lost its task filter and scores echo rows too (plain functions, routes declared in "
        "routing.routes)",
        _misrouted,
        expect=(("routing", "misrouted_score"),),
        tags=("grpo",),
    ),
    Case(
        "unrouted_task",
        "a task no reward function scores",
        "route() lists only arith; the dataset's echo rows get no reward",
        _unrouted,
        expect=(("routing", "unscored_rows"), ("routing", "unrouted_task")),
        tags=("grpo",),
    ),
    Case(
        "loss_after_eos",
        "loss after EOS (completion-only objective not masked)",
        "_generate_and_score_completions wrapped before install: completion_mask set to 1 on every position, "
        "padding after EOS included",
        _post_eos,
        expect=(("masking", "post_eos"), ("masking", "padding")),
        tags=("grpo",),
    ),
    Case(
        "prompt_in_loss",
        "prompt tokens not masked (GRPO), as the model could also write them",
        "_generate_and_score_completions wrapped before install: the last 3 prompt tokens (<|im_start|>assistant\\n) "
        "prepended to completion_ids with mask 1 on every row (a rollout path slicing 3 tokens too early); a "
        "collapsing policy could write the header itself, so a warning (prompt_overlap), not a stop",
        _prompt_in_loss,
        expect=(("masking", "prompt_overlap"), ("masking", "prompt_leak")),
        tags=("grpo",),
    ),
    Case(
        "prompt_past_eos_in_loss",
        "prompt tokens not masked (GRPO), beyond what generation can produce",
        "as prompt_in_loss from the prompt's last <|im_end|> on: the user turn's end of turn ends "
        "generation, so the model cannot have written them: a stop (prompt_leak)",
        _prompt_past_eos_in_loss,
        expect=(("masking", "prompt_leak"),),
        tags=("grpo",),
    ),
    Case(
        "sft_prompt_trained",
        "SFT without assistant-only loss (prompt tokens trained)",
        "SFTTrainer on a messages dataset with assistant_only_loss=False (clean: True); "
        "MaskCheckingCollator(expect='assistant_only') wraps the collator in both",
        _sft_prompt,
        expect=(("masking", "prompt_trained"),),
        tags=("sft",),
    ),
    Case(
        "sft_empty_think_trained",
        "non-thinking SFT without the empty think block masked",
        "non-thinking SFT (per-row enable_thinking=False, assistant_only_loss) without EmptyThinkMasker (clean: "
        "with it); EmptyThinkMasker(check_only=True) audits the final labels in both",
        _sft_empty_think,
        expect=(("masking", "empty_think_trained"),),
        tags=("sft",),
    ),
    Case(
        "double_think_prefill",
        "<think> prefill on a template that already opens one (<think><think>)",
        "every prompt ends with an assistant prefill message '<think>\\n' (TRL closes it as its own turn, then "
        "opens a new assistant turn)",
        _double_think,
        expect=(("template", "prefill_duplicates_template"), ("template", "double_open")),
        tags=("grpo",),
    ),
    Case(
        "stray_think_tags",
        "stray think tags in non-thinking rollouts",
        f"non-thinking run (enable_thinking=False) on the tiny model after a careless {DAMAGE_STEPS}-step SFT on "
        "non-thinking prompts answered with a think block (clean: the warmed model); the tags are the model's own "
        "output, no rewriting",
        _stray_tags,
        expect=(("think_tags", "anomaly_rate"),),
        tags=("grpo",),
    ),
    Case(
        "dead_task",
        "a task that contributes no gradient",
        "the echo reward reads a missing column ('solution'): '' in text is always true, every echo row gets 1.0",
        _dead_task,
        expect=(("dead_groups", "dead_task"),),
        note="dead_groups.warn_after_steps=3 in both runs (default 10 > the 3-step run)",
        tags=("grpo",),
    ),
    Case(
        "max_tokens_too_small",
        "max_tokens too small for rollouts to complete",
        "max_completion_length=4 (clean: 48)",
        _max_tokens,
        expect=(("preflight", "completion_length"), ("truncation", "truncation_rate")),
        tags=("grpo",),
    ),
    Case(
        "sliced_judge_input",
        "strings silently sliced (text[:N]) before scoring",
        f"the judge reward builds its prompt from completion[:{JUDGE_SLICE}]; the judge call is wrapped with "
        "watch_inputs in both runs",
        _sliced,
        expect=(("slicing", "judge_input_cut"), ("slicing", "completion_cut")),
        note="slicing.min_length=24 in both runs (the tiny model's completions are ~10-60 characters)",
        tags=("grpo",),
    ),
    Case(
        "judge_sees_thinking",
        "outcome judge reads the thinking trace",
        "the judge gets full completions, audited by blind_judge(check_only=True) (clean: blind_judge(judge), "
        "which hands it the answer only)",
        _judge_leak,
        expect=(("blind_judge", "judge_input_markup"),),
        note="caught by the reward wrapper (its warning + rl_guards/blind_judge/leak_rate), not a session guard",
        tags=("grpo",),
    ),
    Case(
        "bad_reward_model",
        "reward model ranks bad completions above good ones",
        "the arith reward only checks that the answer holds a number; reward_sanity.cases_file has known "
        "good/bad completions in both runs",
        _bad_reward,
        expect=(("reward_sanity", "reward_sanity"),),
        note="no length penalty in either run: reward_sanity fails every function that does not rank each good "
        "above each bad completion, so a shaping reward (length penalty, format reward) fails it by design",
        tags=("grpo",),
    ),
    Case(
        "eval_template_differs",
        "eval renders prompts differently from training",
        "preflight.eval_chat_template_kwargs={'enable_thinking': False} while training thinks (clean: True)",
        _eval_template,
        expect=(("preflight", "eval_external_template_mismatch"),),
        tags=("grpo", "preflight"),
    ),
    Case(
        "lr_schedule_default",
        "learning-rate schedule left at the framework default",
        "lr_scheduler_type='linear' (transformers' default; clean: constant_with_warmup)",
        _lr_schedule,
        stated=(("lr_schedule", "decays"),),
        note="a choice, not a bug: caught when the preflight report states it (info)",
        tags=("grpo", "preflight"),
    ),
    Case(
        "grpo_normalisation_default",
        "standard GRPO normalisations taken as neutral (vs Dr. GRPO)",
        "loss_type='grpo', scale_rewards='group' (clean: dr_grpo, none)",
        _dr_grpo,
        stated=(("length_normalisation", "biases length"), ("std_normalisation", "standard GRPO")),
        note="a choice, not a bug: caught when the preflight report states it",
        tags=("grpo", "preflight"),
    ),
    Case(
        "judge_reads_prefix",
        "silent string slicing inside a reward function",
        "a plain (unwrapped) judge scores completion[:20] (clean: the final answer, whole); non-thinking rows",
        _judge_prefix,
        expect=(("probes", "reads_prefix:judge"),),
        tags=("grpo", "probes"),
    ),
    Case(
        "judge_reads_thinking",
        "outcome judge not blind to the thinking trace",
        "a plain outcome judge handed the whole completion (clean: the final answer after the think block)",
        _judge_thinking,
        expect=(("probes", "reads_thinking:judge"),),
        tags=("grpo", "probes"),
    ),
    Case(
        "hackable_reward",
        "reward goes up while behaviour gets worse (a reward the policy can earn without the task)",
        "the only reward, 'quality', is len(text)/100 (clean: the final answer equals the expected one)",
        _hackable,
        expect=(("probes", "hackable:quality"),),
        tags=("grpo", "probes"),
    ),
    Case(
        "inverted_reward_no_cases",
        "a reward model that ranks bad above good, no cases file",
        "arith_correct returns 1 - correct (clean: correct); no reward_sanity.cases_file",
        _inverted,
        expect=(("reward_sanity", "reference_pairs"),),
        tags=("grpo", "sanity"),
    ),
    Case(
        "reward_raises_on_rows",
        "a reward function that raises on malformed rows",
        "echo_match calls int() on its answer column and raises on every echo row (clean: it does not)",
        _reward_raises,
        # Caught before step 0 by the reference-pair sanity check (the function raises on every echo answer); with
        # reward_sanity off, reward_errors shows the rows at the first batch.
        expect=(("reward_errors", "raised:echo_match"), ("reward_sanity", "reference_pairs")),
        tags=("grpo",),
    ),
    Case(
        "task_column_renamed",
        "per-task curves silently collapsed into one task",
        "the dataset's task column is named 'category' (clean: 'task'); tasks.task_column left at 'task'",
        _task_column,
        expect=(("tasks", "task_column_missing"),),
        tags=("grpo",),
    ),
    Case(
        "thinking_mix_off_target",
        "thinking / non-thinking mix off what the run aims at",
        "think_tags.target_thinking_share 0.5 with every row thinking (clean: the column alternates per task)",
        _thinking_mix,
        expect=(("think_tags", "thinking_mix"),),
        tags=("grpo",),
    ),
]


# ----- issue 21: the reward-function probes, one case per class (tags "probes:<class>": recall per class) --------


def echo_judge_first_chars(
    completions: list[Any], answer: list[str], task: list[str], **kwargs: Any
) -> list[float | None]:
    """The echo task's judge (None off its task) reading ``completion[:20]``."""
    return [
        None if t != "echo" else _judge_score(_text(c)[:20], a)
        for c, a, t in zip(completions, answer, task, strict=True)
    ]


echo_judge_first_chars.__name__ = "echo_judge"


def echo_judge_final(completions: list[Any], answer: list[str], task: list[str], **kwargs: Any) -> list[float | None]:
    """The same, on the final answer, whole."""
    scores = judge_final_answer(completions, answer)
    return [None if t != "echo" else s for s, t in zip(scores, task, strict=True)]


echo_judge_final.__name__ = "echo_judge"


class ExactAnswer:
    """One of many small reward functions (a picklable class with a fixed name): the final answer is the answer."""

    def __init__(self, index: int) -> None:
        self.__name__ = f"exact_{index:02d}"

    def __call__(self, completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
        return judge_final_answer(completions, answer)


def judge_first_72(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge reading ``completion[:72]`` (a cut between the usual probe lengths, below the longest completion)."""
    return [_judge_score(_text(c)[:72], a) for c, a in zip(completions, answer, strict=True)]


judge_first_72.__name__ = "judge"


def judge_last_30(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge reading ``completion[-30:]``."""
    return [_judge_score(_text(c)[-30:], a) for c, a in zip(completions, answer, strict=True)]


judge_last_30.__name__ = "judge"


def _boxed(text: str) -> str | None:
    match = re.search(r"\\boxed\{([^}]*)\}", text)
    return match.group(1).strip().lower() if match else None


def boxed_whole(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A \\boxed{} grader over the whole completion, thinking included."""
    return [float(_boxed(_text(c)) == str(a).lower()) for c, a in zip(completions, answer, strict=True)]


boxed_whole.__name__ = "judge"


def boxed_answer(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The same grader on the answer after the think block."""
    from rl_guards.testing.rewards import final_answer

    return [float(_boxed(final_answer(_text(c))) == str(a).lower()) for c, a in zip(completions, answer, strict=True)]


boxed_answer.__name__ = "judge"


def thinking_judge(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge handed only the thinking (``split("</think>")[0]``)."""
    return [_judge_score(_text(c).split("</think>")[0], a) for c, a in zip(completions, answer, strict=True)]


thinking_judge.__name__ = "judge"


def substring_judge(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """Pays the answer anywhere in the final answer ("5" in "15", a list of candidates)."""
    from rl_guards.testing.rewards import final_answer

    return [float(str(a).lower() in final_answer(_text(c)).lower()) for c, a in zip(completions, answer, strict=True)]


substring_judge.__name__ = "judge"


def diversity_uncapped(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A distinct-word bonus without a cap: varied filler earns more than a right answer."""
    return [len(set(_text(c).split())) / 20 for c in completions]


diversity_uncapped.__name__ = "diversity"


def diversity_capped(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """The same bonus capped at 0.1."""
    return [min(len(set(_text(c).split())) / 20, 0.1) for c in completions]


diversity_capped.__name__ = "diversity"

_NON_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def _probe_other_task(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import arith_correct

    return GrpoSpec(
        reward_funcs=[arith_correct, echo_judge_first_chars if planted else echo_judge_final],
        dataset=dataset(thinking=False),
        args=_NON_THINKING,
    )


def _probe_capacity(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(
        reward_funcs=[ExactAnswer(i) for i in range(19)] + [judge_first_chars if planted else judge_final_answer],
        dataset=dataset(thinking=False),
        args=_NON_THINKING,
    )


def _probe_cut(planted: bool, workdir: Path) -> GrpoSpec:
    # The tiny model's own non-thinking completions stay under ~20 characters, where a cut at 72 cannot matter:
    # at least 40 tokens are forced (the cap well above, so that they still end). Forced text carries stray think
    # tags, which the think_tags guard rightly reports: it is off in both runs.
    return GrpoSpec(
        reward_funcs=[judge_first_72 if planted else judge_final_answer],
        dataset=dataset(thinking=False),
        args={**_NON_THINKING, "max_completion_length": 128, "generation_kwargs": {"min_new_tokens": 40}},
        guards={"think_tags": {"enabled": False}},
    )


def _probe_suffix(planted: bool, workdir: Path) -> GrpoSpec:
    # thinking rows: the tiny model's completions reach ~50 characters, past the 30 the judge reads
    return GrpoSpec(reward_funcs=[judge_last_30 if planted else judge_final_answer])


def _probe_thinking(judge: Any, clean: Any) -> Callable[[bool, Path], GrpoSpec]:
    def build(planted: bool, workdir: Path) -> GrpoSpec:
        return GrpoSpec(reward_funcs=[judge if planted else clean])

    return build


def _probe_substring(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(reward_funcs=[substring_judge if planted else judge_final_answer])


def _probe_diversity(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import arith_correct, echo_match

    return GrpoSpec(reward_funcs=[arith_correct, echo_match, diversity_uncapped if planted else diversity_capped])


CASES += [
    Case(
        "probe_other_task_judge",
        "a task's judge never probed (coverage)",
        "the echo task's judge returns None off its task and reads completion[:20] (clean: the final answer)",
        _probe_other_task,
        expect=(("probes", "reads_prefix:echo_judge"),),
        tags=("grpo", "probes", "probes:coverage"),
    ),
    Case(
        "probe_twentieth_function",
        "reward functions past the 17th not probed (capacity)",
        "19 exact-answer functions, then a judge reading completion[:20] (clean: the final answer)",
        _probe_capacity,
        expect=(("probes", "reads_prefix:judge"),),
        tags=("grpo", "probes", "probes:capacity"),
    ),
    Case(
        "probe_cut_between_lengths",
        "a prefix cut between the probed lengths",
        "the judge reads completion[:72] (clean: the final answer); non-thinking rows of 40 tokens or more",
        _probe_cut,
        expect=(("probes", "reads_prefix:judge"),),
        tags=("grpo", "probes", "probes:part"),
    ),
    Case(
        "probe_suffix_read",
        "a judge that reads only the end",
        "the judge reads completion[-30:] (clean: the final answer); thinking rows of up to ~50 characters",
        _probe_suffix,
        expect=(("probes", "reads_suffix:judge"),),
        tags=("grpo", "probes", "probes:part"),
    ),
    Case(
        "probe_boxed_reads_thinking",
        "a \\boxed{} grader that reads the thinking",
        "the first \\boxed{} of the whole completion (clean: of the answer after the think block)",
        _probe_thinking(boxed_whole, boxed_answer),
        expect=(("probes", "reads_thinking:judge"),),
        tags=("grpo", "probes", "probes:thinking"),
    ),
    Case(
        "probe_judge_of_the_thinking",
        "a judge that reads only the thinking",
        "the judge is handed split('</think>')[0] (clean: the final answer)",
        _probe_thinking(thinking_judge, judge_final_answer),
        expect=(("probes", "reads_thinking:judge"),),
        tags=("grpo", "probes", "probes:thinking"),
    ),
    Case(
        "probe_substring_match",
        "a reward paid by a list of candidates or a longer token",
        "the answer anywhere in the final answer (clean: the final answer equals it)",
        _probe_substring,
        expect=(("probes", "hackable:judge"),),
        tags=("grpo", "probes", "probes:hackable"),
    ),
    Case(
        "probe_diversity_bonus",
        "a distinct-word bonus worth more than a right answer",
        "diversity = distinct words / 20, uncapped, next to the task rewards (clean: capped at 0.1)",
        _probe_diversity,
        expect=(("probes", "hackable:diversity"),),
        tags=("grpo", "probes", "probes:hackable"),
    ),
]


# ----- issue 21: task labels (class 5), tag "class:5" ---------------------------------------------------------------


def _constant_task(planted: bool, workdir: Path) -> GrpoSpec:
    # 80 rows (a constant task column is judged from 64 rows on); both runs carry the labels in 'data_source', the
    # planted run's 'task' says 'default' on every row (clean: the labels)
    from rl_guards.testing import make_dataset

    data = make_dataset(40, thinking=True)
    data = data.add_column("data_source", list(data["task"]))
    if planted:
        data = data.remove_columns("task").add_column("task", ["default"] * len(data))
    return GrpoSpec(reward_funcs=[judge_final_answer], dataset=data)


CASES += [
    Case(
        "task_column_constant",
        "per-task curves collapsed: the task column says one task",
        "'task' is 'default' on all 80 rows while 'data_source' holds the two tasks (clean: 'task' holds them too)",
        _constant_task,
        expect=(("tasks", "task_column_constant"),),
        tags=("grpo", "class:5"),
    ),
]


# ----- issue 40: partial reads wherever the answer sits (class 2), shaping terms a policy can max (class 3) ----------


def _first_number(text: str) -> str | None:
    found = re.findall(r"-?\d+", text)
    return found[0] if found else None


def answer_first_tail(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """A judge handed ``text[-40:]``: an answer followed by its explanation ("Answer: 7. Because ...") is not read."""
    return [float(_first_number(_text(c)[-40:]) == a) for c, a in zip(completions, answer, strict=True)]


answer_first_tail.__name__ = "judge"


def answer_first_number(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """Clean twin: the first number of the final answer, wherever the answer sits in it."""
    from rl_guards.testing.rewards import final_answer

    return [float(_first_number(final_answer(_text(c))) == a) for c, a in zip(completions, answer, strict=True)]


answer_first_number.__name__ = "judge"


def answer_part_tail(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The first number of the answer's last 60 characters (after the think block)."""
    from rl_guards.testing.rewards import final_answer

    return [float(_first_number(final_answer(_text(c))[-60:]) == a) for c, a in zip(completions, answer,
                                                                                   strict=True)]  # fmt: skip


answer_part_tail.__name__ = "judge"


def _thinking_of(text: str) -> str:
    return text.split("</think>")[0] if "</think>" in text else ""


def thinking_length_bonus(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A bonus for the thinking's length, uncapped: padding the thinking pays more than being right."""
    return [len(_thinking_of(_text(c))) / 200 for c in completions]


def thinking_length_capped(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Clean twin: the same, capped at 0.1."""
    return [min(len(_thinking_of(_text(c))) / 200, 0.1) for c in completions]


thinking_length_bonus.__name__ = thinking_length_capped.__name__ = "thinking_bonus"
_REASONING_WORDS = re.compile(r"\b(because|since|therefore|first|then|thus)\b", re.I)


def reasoning_words_bonus(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """"Informativeness": 0.2 per reasoning keyword, uncapped."""
    return [0.2 * len(_REASONING_WORDS.findall(_text(c))) for c in completions]


def reasoning_words_capped(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Clean twin: at most 0.2."""
    return [min(0.2 * len(_REASONING_WORDS.findall(_text(c))), 0.2) for c in completions]


reasoning_words_bonus.__name__ = reasoning_words_capped.__name__ = "informativeness"


_FORMAT_ELEMENT = re.compile(r"</think>|<answer>|\\boxed\{")


def format_elements_bonus(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """0.3 per format element (a closed think block, an <answer> tag, \\boxed{}), uncapped: repeating them pays."""
    return [0.3 * len(_FORMAT_ELEMENT.findall(_text(c))) for c in completions]


def format_once(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Clean twin: 0.3 when the completion has the format at all (paid once; the policy's closed think blocks earn
    it, so it is no reward the run never pays)."""
    return [0.3 if _FORMAT_ELEMENT.search(_text(c)) else 0.0 for c in completions]


format_elements_bonus.__name__ = format_once.__name__ = "format"


# Completions of 64 tokens or more (a cut of 40 or 60 characters can only matter in a run of longer completions: the
# tiny model's own end within ~20); forced text carries stray think tags, which the think_tags guard rightly reports:
# it is off in both runs. Arithmetic only: the graders read numbers.
_LONG = {"max_completion_length": 128, "generation_kwargs": {"min_new_tokens": 64}}


def _answer_first_tail(planted: bool, workdir: Path) -> GrpoSpec:
    # non-thinking rows: the probes' answers come first and their explanation after (reference pairs in every form)
    return GrpoSpec(
        reward_funcs=[answer_first_tail if planted else answer_first_number],
        dataset=dataset(thinking=False, tasks=("arith",)),
        args={**_NON_THINKING, **_LONG},
        guards={"think_tags": {"enabled": False}},
    )


def _answer_part_tail(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(
        reward_funcs=[answer_part_tail if planted else answer_first_number],
        dataset=dataset(tasks=("arith",)),
        args=_LONG,
        guards={"think_tags": {"enabled": False}},
    )


def _shaping(planted_fn: Any, clean_fn: Any) -> Callable[[bool, Path], GrpoSpec]:
    def build(planted: bool, workdir: Path) -> GrpoSpec:
        from rl_guards.testing.rewards import arith_correct, echo_match

        return GrpoSpec(reward_funcs=[arith_correct, echo_match, planted_fn if planted else clean_fn])

    return build


CASES += [
    Case(
        "probe_answer_first_tail",
        "a grader that reads only the tail, answer first",
        "the judge takes the first number of completion[-40:], non-thinking (clean: of the final answer, wherever)",
        _answer_first_tail,
        expect=(("probes", "reads_suffix:judge"),),
        tags=("grpo", "probes", "class:2"),
    ),
    Case(
        "probe_answer_part_tail",
        "a grader that reads only the end of the answer",
        "the judge takes the first number of the answer's last 60 characters (clean: of all of it)",
        _answer_part_tail,
        expect=(("probes", "reads_suffix:judge"),),
        tags=("grpo", "probes", "class:2"),
    ),
    Case(
        "shaping_thinking_length",
        "a bonus for the thinking's length, worth more than a right answer",
        "thinking characters / 200, uncapped, next to the task rewards (clean: capped at 0.1)",
        _shaping(thinking_length_bonus, thinking_length_capped),
        expect=(("probes", "hackable:thinking_bonus"),),
        tags=("grpo", "probes", "class:3"),
    ),
    Case(
        "shaping_reasoning_words",
        "a keyword bonus (\"informativeness\") a policy can max without being right",
        "0.2 per 'because/since/therefore/first/then/thus', uncapped (clean: at most 0.2)",
        _shaping(reasoning_words_bonus, reasoning_words_capped),
        expect=(("probes", "hackable:informativeness"),),
        tags=("grpo", "probes", "class:3"),
    ),
    Case(
        "shaping_format_repeated",
        "a format element paid each time it is repeated",
        "0.3 per </think>, <answer> tag or \\boxed{}, uncapped (clean: 0.3 when there is one at all: paid once)",
        _shaping(format_elements_bonus, format_once),
        expect=(("probes", "hackable:format"),),
        tags=("grpo", "probes", "class:3"),
    ),
]


# ----- issue 40: recall in short runs and small datasets (classes 1, 4, 5), tags "issue:40", "class:<n>" -----------


def _one_task_thinks(planted: bool, workdir: Path) -> GrpoSpec:
    # A two-step debug run: arith rows think (a block of 6 tokens or more), echo rows do not (~3 tokens); the planted
    # cap (5) cuts every arith completion and few echo ones. No length probe (a debug run has none): the truncation
    # guard is the only one that can tell, and with ~16 arith rows in the run (8 prompts of 2) the window's 32 rows
    # never come.
    from rl_guards.trl.thinking_mix import honour_thinking_column

    data = dataset().map(lambda row: {"enable_thinking": row["task"] == "arith"})
    return GrpoSpec(
        reward_funcs=routed_rewards(),
        dataset=data,
        args={
            "max_steps": 2,
            "per_device_train_batch_size": 16,
            "num_generations": 2,
            "max_completion_length": 5 if planted else 48,
        },
        guards={"preflight": {"length_probe": None}},
        before_install=honour_thinking_column,
    )


def _small_constant_task(planted: bool, workdir: Path) -> GrpoSpec:
    # 24 rows (a debug subset), labels in 'source' in both runs; the planted 'task' says 'default' on every row
    from rl_guards.testing import make_dataset

    data = make_dataset(12, thinking=True)
    data = data.add_column("source", list(data["task"]))
    if planted:
        data = data.remove_columns("task").add_column("task", ["default"] * len(data))
    return GrpoSpec(reward_funcs=[judge_final_answer], dataset=data, args={"max_steps": 1})


def _boxed_value(text: str) -> str | None:
    found = re.findall(r"\\boxed\{([^}]*)\}", text)
    return found[-1].strip() if found else None


def accuracy_boxed_only(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """open-r1-style accuracy: the completion's \\boxed{} against the solution's; nothing else is parsed."""
    return [
        1.0 if (got := _boxed_value(_text(c))) is not None and got == _boxed_value(s) else 0.0
        for c, s in zip(completions, solution, strict=True)
    ]


accuracy_boxed_only.__name__ = "accuracy_reward"


def accuracy_boxed_or_bare(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """The same grader reading a bare final answer too (the form the policy writes)."""
    from rl_guards.testing.rewards import final_answer

    out: list[float | None] = []
    for c, s in zip(completions, solution, strict=True):
        text = final_answer(_text(c)).strip()
        got = _boxed_value(text) or text.rstrip(".")
        out.append(1.0 if got == _boxed_value(s) else 0.0)
    return out


accuracy_boxed_or_bare.__name__ = "accuracy_reward"


def tag_count_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """open-r1's tag count: 0.25 for each of <think>, </think>, <answer>, </answer> written once."""
    out: list[float | None] = []
    for c in completions:
        text = _text(c)
        out.append(
            0.25 * (text.count("<think>\n") == 1)
            + 0.25 * (text.count("\n</think>\n") == 1)
            + 0.25 * (text.count("\n<answer>\n") == 1)
            + 0.25 * (text.count("\n</answer>") == 1)
        )
    return out


def exact_solution(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """Exact match of the final answer against the raw 'solution' string ('$7$'), never its value."""
    from rl_guards.testing.rewards import final_answer

    return [float(final_answer(_text(c)).strip() == str(s).strip()) for c, s in zip(completions, solution, strict=True)]


exact_solution.__name__ = "exact_match"


def exact_answer(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
    """The same match against the bare 'answer' column."""
    from rl_guards.testing.rewards import final_answer

    return [float(final_answer(_text(c)).strip() == str(a).strip()) for c, a in zip(completions, answer, strict=True)]


exact_answer.__name__ = "exact_match"


def r1_format_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """open-r1's format reward: <think>...</think> then <answer>...</answer>, each on lines of their own."""
    pattern = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"
    return [1.0 if re.match(pattern, _text(c), re.DOTALL | re.MULTILINE) else 0.0 for c in completions]


r1_format_reward.__name__ = "format_reward"


def think_format_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """TRL's think format reward: one closed think block at the start (the form the policy writes)."""
    pattern = r"^<think>(?!.*<think>)(.*?)</think>.*$"
    return [1.0 if re.match(pattern, _text(c), re.DOTALL | re.MULTILINE) else 0.0 for c in completions]


think_format_reward.__name__ = "format_reward"


def _math_with_solutions(solution: str) -> Any:
    """The arithmetic rows (thinking), with a 'solution' column: ``solution`` formatted with the answer."""
    from rl_guards.testing import make_dataset

    data = make_dataset(2 * N_PER_TASK, tasks=("arith",), thinking=True)
    return data.map(lambda row: {"solution": solution.format(row["answer"])})


def _never_paid_boxed(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(
        reward_funcs=[accuracy_boxed_only if planted else accuracy_boxed_or_bare, tag_count_reward],
        dataset=_math_with_solutions("\\boxed{{{}}}"),
    )


def _never_paid_raw_column(planted: bool, workdir: Path) -> GrpoSpec:
    from rl_guards.testing.rewards import length_penalty

    return GrpoSpec(
        reward_funcs=[exact_solution if planted else exact_answer, length_penalty],
        dataset=_math_with_solutions("${}$"),
    )


def _never_paid_format(planted: bool, workdir: Path) -> GrpoSpec:
    return GrpoSpec(
        reward_funcs=[exact_answer, r1_format_reward if planted else think_format_reward],
        dataset=_math_with_solutions("${}$"),
    )


CASES += [
    Case(
        "truncated_task_short_run",
        "a task cut at the cap in every row of a short run",
        "two-step run (no length probe); arith rows think, echo rows do not; max_completion_length=5 cuts every "
        "arith completion (clean: 48)",
        _one_task_thinks,
        expect=(("truncation", "truncation_rate"),),
        note="~16 arith rows in the run, below truncation.min_rows=32: caught by the prompts cut whole",
        tags=("grpo", "issue:40", "class:1"),
    ),
    Case(
        "task_column_constant_small",
        "per-task curves collapsed on a debug dataset of tens of rows",
        "'task' is 'default' on all 24 rows while 'source' holds the two tasks (clean: 'task' holds them too)",
        _small_constant_task,
        expect=(("tasks", "task_column_constant"),),
        note="24 rows < 64: judged by the prompts telling the 'source' values apart",
        tags=("grpo", "issue:40", "class:4"),
    ),
    Case(
        "reward_never_paid_boxed",
        "a correctness reward that never pays while format terms move the total",
        "accuracy_reward reads only \\boxed{} (open-r1's parse) while the policy answers bare numbers, beside "
        "open-r1's tag count (clean: the grader reads a bare final answer too)",
        _never_paid_boxed,
        expect=(("unpaid_rewards", "unpaid:accuracy_reward"),),
        tags=("grpo", "issue:40", "class:5"),
    ),
    Case(
        "reward_never_paid_raw_column",
        "a correctness reward compared against the raw solution string",
        "exact_match compares the final answer with 'solution' ('$7$') while the policy writes '7', beside a length "
        "penalty (clean: against the bare 'answer' column)",
        _never_paid_raw_column,
        expect=(("unpaid_rewards", "unpaid:exact_match"),),
        tags=("grpo", "issue:40", "class:5"),
    ),
    Case(
        "format_never_paid",
        "a format reward stuck at 0 (the recipe's format never written)",
        "open-r1's format_reward (<think> then <answer> tags) next to a correctness reward that varies (clean: TRL's "
        "think_format_reward, which the policy's think blocks meet)",
        _never_paid_format,
        expect=(("unpaid_rewards", "unpaid:format_reward"),),
        tags=("grpo", "issue:40", "class:5"),
    ),
]
