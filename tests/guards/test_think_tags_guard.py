"""ThinkTagsGuard on hand-built batches (table), with a real tokenizer, and on a real GRPOTrainer."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rl_guards.chat.markup import markup_from_config, tag_token_ids, tags_are_special
from rl_guards.config import GuardsConfig
from rl_guards.console import capture
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.think_markup import ALL_CODES, GEMMA4, GPTOSS, THINK, ThinkMarkup
from rl_guards.errors import ThinkMarkupError
from rl_guards.guards.base import GuardSession, RunContext
from rl_guards.guards.think_tags import ThinkTagsGuard, display_text

OK = "<think>reason</think>\n\n4"
PLAIN = "4"


def make_batch(rows: list[tuple[str, bool | None, bool, str]], **extra: Any) -> RolloutBatch:
    """rows: (completion, thinking, prompt_opened, task)."""
    n = len(rows)
    fields: dict[str, Any] = {
        "step": 3,
        "mode": "train",
        "num_generations": 1,
        "reward_names": ["r"],
        "reward_weights": [1.0],
        "rewards": [[0.0]] * n,
        "advantages": [0.0] * n,
        "tasks": [r[3] for r in rows],
        "completions": [r[0] for r in rows],
        "completion_ids": [[] for _ in rows],
        "prompt_ids": [[] for _ in rows],
        "truncated": [False] * n,
        "thinking": [r[1] for r in rows],
        "prompt_opened": [r[2] for r in rows],
    }
    fields.update(extra)
    return RolloutBatch(**fields)


def run_guard(batch: RolloutBatch, config: GuardsConfig | None = None, ctx: RunContext | None = None):
    config = config or GuardsConfig.from_dict({"think_tags": {"mode": "log"}})
    guard = ThinkTagsGuard(config)
    guard.setup(ctx or RunContext())
    session = GuardSession()
    guard.on_batch(batch, session.reporter(guard.name, guard.config, batch.step))
    metrics = {k: v[-1] for k, v in session.pop_metrics().items()}
    return metrics, session


def m(name: str) -> str:
    return f"rl_guards/think_tags/{name}"


def t(task: str, name: str) -> str:
    return f"rl_guards_task/{task}/think/{name}"


# (id, rows, expected metrics (subset), absent metric keys)
CASES = [
    (
        "all_clean",
        [(OK, True, False, "a"), (PLAIN, False, False, "a"), (OK, True, False, "b"), (PLAIN, False, False, "b")],
        {m("anomalous_rate"): 0.0, m("thinking_share"): 0.5, t("a", "anomalous_rate"): 0.0, m("no_block_rate"): 0.0},
        [t("a", "tag_in_nonthinking_rate")],
    ),
    (
        "tags_in_nonthinking",
        [(OK, False, False, "a"), (PLAIN, False, False, "a"), (OK, True, False, "b"), (OK, True, False, "b")],
        {
            m("anomalous_rate"): 0.25,
            m("rate/tag_in_nonthinking"): 0.25,
            m("thinking_share"): 0.5,
            t("a", "anomalous_rate"): 0.5,
            t("a", "tag_in_nonthinking_rate"): 0.5,
            t("a", "thinking_share"): 0.0,
            t("b", "thinking_share"): 1.0,
            t("b", "anomalous_rate"): 0.0,
        },
        [t("b", "tag_in_nonthinking_rate")],
    ),
    (
        "malformed_thinking",
        [("<think>a", True, False, "a"), ("a</think>b</think>c", True, True, "a"), (OK, True, False, "a")],
        {
            m("anomalous_rate"): 2 / 3,
            m("rate/unclosed_open"): 1 / 3,
            m("rate/stray_close"): 1 / 3,
            m("rate/tag_in_answer"): 1 / 3,
            m("rate/tag_in_nonthinking"): 0.0,
            t("a", "unclosed_open_rate"): 1 / 3,
        },
        [],
    ),
    (
        "double_open_prompt_opened",
        [("<think>r</think>x", True, True, "a"), ("r</think>x", True, True, "a")],
        {m("anomalous_rate"): 0.5, m("rate/double_open"): 0.5},
        [],
    ),
    (
        "thinking_without_block_is_not_anomalous",
        [(PLAIN, True, False, "a"), (OK, True, False, "a")],
        {m("anomalous_rate"): 0.0, m("no_block_rate"): 0.5},
        [],
    ),
    (
        "empty_thinking_informational",
        [("<think></think>4", True, False, "a")],
        {m("anomalous_rate"): 0.0, m("rate/empty_thinking"): 1.0, t("a", "empty_thinking_rate"): 1.0},
        [],
    ),
    (
        "no_thinking_rows",
        [(PLAIN, False, False, "a")],
        {m("anomalous_rate"): 0.0, m("thinking_share"): 0.0},
        [m("no_block_rate")],
    ),
    (
        "partial_in_nonthinking",
        [("4 <thi", False, False, "a")],
        {m("rate/partial_tag"): 1.0, m("rate/tag_in_nonthinking"): 1.0, m("anomalous_rate"): 1.0},
        [],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_metrics_table(case: tuple) -> None:
    _, rows, expected, absent = case
    metrics, _ = run_guard(make_batch(rows))
    for key, value in expected.items():
        assert math.isclose(metrics[key], value), (key, metrics.get(key))
    for key in absent:
        assert key not in metrics
    for code in ALL_CODES:  # a fixed batch-level key set, so W&B curves do not have holes
        assert m(f"rate/{code}") in metrics


def test_thinking_none_uses_chat_template_kwargs() -> None:
    batch = make_batch([(OK, None, False, "a")])
    metrics, _ = run_guard(batch, ctx=RunContext(chat_template_kwargs={"enable_thinking": False}))
    assert metrics[m("anomalous_rate")] == 1.0 and metrics[m("thinking_share")] == 0.0
    metrics, _ = run_guard(batch, ctx=RunContext(chat_template_kwargs={}))
    assert metrics[m("anomalous_rate")] == 0.0 and metrics[m("thinking_share")] == 1.0


@pytest.mark.parametrize(
    ("mode", "outcome"), [("raise", "raises"), ("warn", "warns"), ("log", "silent")], ids=["raise", "warn", "log"]
)
def test_violation_modes(mode: str, outcome: str) -> None:
    config = GuardsConfig.from_dict({"think_tags": {"mode": mode, "max_anomaly_rate": 0.25}})
    long_thinking = "<think>" + "step " * 400 + "</think>x</think>y"
    batch = make_batch([(long_thinking, True, False, "math"), (OK, False, False, "chat"), (OK, True, False, "math")])
    with capture() as caught:
        if outcome == "raises":
            with pytest.raises(ThinkMarkupError) as info:
                run_guard(batch, config)
            message = str(info.value)
        else:
            _, session = run_guard(batch, config)
            message = session.findings[-1].message
            assert session.counts[("think_tags", "anomaly_rate")] == 1
    ours = caught.messages
    assert len(ours) == (1 if outcome == "warns" else 0)
    assert "2/3 completions" in message and "max_anomaly_rate=0.25" in message
    assert "row 0 (task 'math', thinking)" in message and "stray_close, tag_in_answer" in message
    assert "row 1 (task 'chat', non-thinking)" in message and "tag_in_nonthinking" in message
    assert "cut for display only" in message and "chars not shown" in message
    assert "StrayThinkPenalty" in message  # the fix for tags in non-thinking rows


def test_below_threshold_no_violation() -> None:
    config = GuardsConfig.from_dict({"think_tags": {"mode": "raise", "max_anomaly_rate": 0.5}})
    metrics, session = run_guard(make_batch([("<think>a", True, False, "a"), (OK, True, False, "a")]), config)
    assert metrics[m("anomalous_rate")] == 0.5 and not session.findings


def test_display_text() -> None:
    assert display_text("short") == "'short'"
    shown = display_text("a" * 1000, chars=10)
    assert shown.startswith("'aaaaaaaaaa'") and "[980 chars not shown]" in shown


def test_markup_from_config() -> None:
    cfg = GuardsConfig().think_tags
    assert markup_from_config(cfg, None) is THINK
    assert markup_from_config(cfg, "{{ '<|channel>thought' }}{{ '<channel|>' }}") is GEMMA4
    assert markup_from_config(cfg, "{{ '<|channel|>analysis<|message|>' }}") is GPTOSS
    custom = GuardsConfig.from_dict({"think_tags": {"open_tag": "<reasoning>", "close_tag": "</reasoning>"}})
    markup = markup_from_config(custom.think_tags, "{{ '<|channel|>analysis' }}")
    assert (markup.open_tag, markup.close_tag) == ("<reasoning>", "</reasoning>")


# ----- with the real Qwen-vocabulary tokenizer -----------------------------------------------------------------
testing = pytest.importorskip("rl_guards.testing")


@pytest.fixture(scope="module")
def tokenizer():
    return testing.build_tokenizer(vocab_size=2048, chat_template="qwen3_5_think")


def _ctx(tokenizer: Any, **kwargs: Any) -> RunContext:
    return RunContext(
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        **kwargs,
    )


def test_tag_token_ids(tokenizer: Any) -> None:
    assert tag_token_ids(tokenizer, THINK) == (
        tokenizer.convert_tokens_to_ids("<think>"),
        tokenizer.convert_tokens_to_ids("</think>"),
    )
    assert tag_token_ids(tokenizer, GPTOSS) == (None, None)  # multi-token tags
    assert tag_token_ids(None, THINK) == (None, None)
    assert not tags_are_special(tokenizer, THINK)  # Qwen3: <think> survives skip_special_tokens
    assert tags_are_special(tokenizer, ThinkMarkup("<|im_start|>", "<|im_end|>"))
    assert not tags_are_special(None, THINK)


def test_prompt_opened_read_from_prompt_ids(tokenizer: Any) -> None:
    """Without batch.prompt_opened, the guard decodes the prompt tail: qwen3_5_think prefills <think>."""
    rows, prompts, thinking = [], [], []
    for enable in (True, False):
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True, enable_thinking=enable
        )
        prompts.append(tokenizer.encode(prompt, add_special_tokens=False))
        thinking.append(enable)
    # The model writes its own <think> although the prompt opened one: double open in thinking mode.
    completions = ["<think>r</think>4", "4"]
    ids = [tokenizer.encode(c, add_special_tokens=False) for c in completions]
    for i, c in enumerate(completions):
        rows.append((c, thinking[i], False, "a"))
    batch = make_batch(rows, prompt_ids=prompts, completion_ids=ids, prompt_opened=[])
    metrics, _ = run_guard(batch, ctx=_ctx(tokenizer))
    assert metrics[m("rate/double_open")] == 0.5
    assert metrics[m("anomalous_rate")] == 0.5


def test_ids_show_thinking_the_text_lost(tokenizer: Any) -> None:
    """TRL's tool parsing moves thinking out of the text: the ids still carry the tags."""
    full = "<think>r</think>4"
    ids = tokenizer.encode(full, add_special_tokens=False)
    batch = make_batch([("4", False, False, "a"), ("4", True, False, "a")], completion_ids=[ids, ids])
    metrics, _ = run_guard(batch, ctx=_ctx(tokenizer))
    assert metrics[m("rate/ids_text_mismatch")] == 1.0
    assert metrics[m("rate/tag_in_nonthinking")] == 0.5  # the non-thinking row thought, per its ids
    assert metrics[m("anomalous_rate")] == 0.5


# ----- on a real GRPOTrainer -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_monitor_on_real_grpo_run(make_grpo_trainer: Any, tiny: Any) -> None:
    import rl_guards

    trainer = make_grpo_trainer(max_steps=2, train_dataset=testing.make_dataset(thinking="mixed"))
    config = GuardsConfig.from_dict({"think_tags": {"mode": "log"}, "metrics": "full"})  # every rate is checked
    run = rl_guards.install(trainer, config, guards=[ThinkTagsGuard])
    trainer.train()
    keys = {k for row in trainer.state.log_history for k in row}
    for key in ("anomalous_rate", "thinking_share", "rate/unclosed_open"):
        assert m(key) in keys, sorted(keys)
    assert {t("arith", "thinking_share"), t("echo", "anomalous_rate")} <= keys
    shares = [row[m("thinking_share")] for row in trainer.state.log_history if m("thinking_share") in row]
    batch = run.last_batch  # the enable_thinking column of the last batch, as the hook read it
    assert batch is not None and None not in batch.thinking
    assert math.isclose(shares[-1], sum(batch.thinking) / len(batch))
    assert run.guard("think_tags").open_id == tiny.tokenizer.convert_tokens_to_ids("<think>")


def test_special_token_tags_scanned_on_decoded_ids(tokenizer: Any) -> None:
    """Tags that are special tokens vanish from TRL's text; the guard decodes the ids with specials kept."""
    config = GuardsConfig.from_dict(
        {"think_tags": {"mode": "log", "open_tag": "<|box_start|>", "close_tag": "<|box_end|>"}}
    )
    ids = tokenizer.encode("<|box_start|>reason<|box_end|>4", add_special_tokens=False)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert text == "reason4"  # what a reward function would see
    batch = make_batch([(text, True, False, "a"), (text, False, False, "a")], completion_ids=[ids, ids])
    metrics, _ = run_guard(batch, config, ctx=_ctx(tokenizer))
    assert metrics[m("rate/ids_text_mismatch")] == 0.0  # the decoded text has the tags
    assert metrics[m("rate/tag_in_nonthinking")] == 0.5 and metrics[m("anomalous_rate")] == 0.5


def test_markup_family_comes_from_the_tokenizer_template() -> None:
    from rl_guards.guards.base import RunContext
    from rl_guards.testing import build_tokenizer

    for template, family in [("gemma4", "gemma4"), ("gptoss", "gptoss"), ("qwen3", "think")]:
        guard = ThinkTagsGuard(GuardsConfig())
        guard.setup(RunContext(tokenizer=build_tokenizer(chat_template=template)))  # no trainer override
        assert guard.markup.name == family, template


def test_tag_ids_found_on_the_padded_tensor_give_the_same_verdicts(tokenizer: Any) -> None:
    """check_tensors hands over TRL's right-padded completion ids: scan reads the tag ids from them in one pass and
    reaches the verdicts a search of each row's list reaches; a tensor that is not these rows is not used."""
    import torch

    texts = [
        "<think>r</think>4",
        "<think>a<think>b</think>4",  # double open
        "<think>never closed",
        "4</think>",  # stray close
        "4",
        "",
    ]
    ids = [tokenizer.encode(c, add_special_tokens=False) for c in texts]
    ids.append(tokenizer.encode("<think>r</think>4", add_special_tokens=False))  # tags on the ids, lost in the text
    texts.append("4")
    rows = [(c, i % 2 == 0, False, "a") for i, c in enumerate(texts)]
    batch = make_batch(rows, completion_ids=ids)
    pad = tokenizer.pad_token_id
    padded = torch.full((len(ids), max(map(len, ids)) + 2), pad, dtype=torch.long)
    for i, row in enumerate(ids):
        padded[i, : len(row)] = torch.tensor(row)
    guard = ThinkTagsGuard(GuardsConfig.from_dict({"think_tags": {"mode": "log"}}))
    guard.setup(_ctx(tokenizer))
    session = GuardSession()
    searched = guard.scan(batch)
    guard.check_tensors({"completion_ids": padded}, session.reporter(guard.name, guard.config, 3))
    assert guard._id_tags(batch, batch.held_rows) is not None  # the tensor is these rows: used
    guard.check_tensors({"completion_ids": padded}, session.reporter(guard.name, guard.config, 3))
    assert guard.scan(batch) == searched
    assert guard._padded_ids is None  # released by the scan
    assert searched["codes"][-1] != 0  # the ids-only row is flagged (ids_text_mismatch)
    guard.check_tensors({"completion_ids": padded.flip(1)}, session.reporter(guard.name, guard.config, 3))
    assert guard._id_tags(batch, batch.held_rows) is None  # not these rows: the lists are searched
    guard.check_tensors({"completion_ids": padded.flip(1)}, session.reporter(guard.name, guard.config, 3))
    assert guard.scan(batch) == searched
