"""StrayThinkPenalty: table of rows, config, pickling, log_metric, token ids, and a real GRPOTrainer run."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

from rl_guards.config import GuardsConfig, StrayThinkPenaltyConfig
from rl_guards.console import capture
from rl_guards.core.completions import completion_text
from rl_guards.core.think_markup import ALL_CODES, GEMMA4
from rl_guards.errors import ConfigError
from rl_guards.rewards.stray_think import StrayThinkPenalty

OK = "<think>reason</think>\n\n4"


def conv(text: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": text, **extra}]


# (id, completion, row thinking (None = no column value), penalty kwargs, expected reward)
CASES = [
    ("clean_thinking", OK, True, {}, 0.0),
    ("plain_nonthinking", "4", False, {}, 0.0),
    ("plain_thinking_no_block", "4", True, {}, 0.0),
    ("tags_in_nonthinking", OK, False, {}, -1.0),
    ("empty_block_in_nonthinking", "<think>\n\n</think>\n\n4", False, {}, -1.0),
    ("unclosed_thinking", "<think>never ends", True, {}, -1.0),
    ("stray_close_thinking", "4</think>5", True, {}, -1.0),
    ("partial_nonthinking", "4 <thi", False, {}, -1.0),
    ("upper_nonthinking", "<THINK>x</THINK>4", False, {}, -1.0),
    ("empty_thinking_not_malformed", "<think></think>4", True, {}, 0.0),
    ("weight", OK, False, {"weight": 0.25}, -0.25),
    ("weight_zero", OK, False, {"weight": 0.0}, -0.0),
    ("disabled", OK, False, {"enabled": False}, 0.0),
    ("filter_excludes", OK, False, {"anomalies": ["stray_close"]}, 0.0),
    ("filter_includes", "4</think>5", True, {"anomalies": ["stray_close"]}, -1.0),
    ("filter_informational", "<think></think>4", True, {"anomalies": ["empty_thinking"]}, -1.0),
    ("default_mode_thinking", OK, None, {"thinking": True}, 0.0),
    ("default_mode_nonthinking", OK, None, {"thinking": False}, -1.0),
    ("default_mode_unset_is_thinking", OK, None, {}, 0.0),
    ("prompt_opened_ok", "reason</think>4", True, {"prompt_opened_thinking": True}, 0.0),
    ("prompt_opened_double", OK, True, {"prompt_opened_thinking": True}, -1.0),
    ("prompt_opened_unclosed", "reason", True, {"prompt_opened_thinking": True}, -1.0),
    ("not_prompt_opened_stray", "reason</think>4", True, {}, -1.0),
    ("conversational_ok", conv(OK), True, {}, 0.0),
    ("conversational_stray", conv("<think>a"), True, {}, -1.0),
    ("conversational_reasoning_field_nonthinking", conv("4", reasoning_content="r"), False, {}, -1.0),
    ("conversational_reasoning_field_thinking", conv("4", reasoning_content="r"), True, {}, 0.0),
    ("conversational_parts", [{"role": "assistant", "content": [{"type": "text", "text": OK}]}], False, {}, -1.0),
    ("gemma_markup", "<|channel>thought\nr<channel|>4", False, {"markup": "gemma4"}, -1.0),
    ("gemma_markup_ignores_think", OK, False, {"markup": GEMMA4}, 0.0),
    ("none_completion", None, True, {}, 0.0),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_penalty_table(case: tuple) -> None:
    _, completion, thinking, kwargs, expected = case
    penalty = StrayThinkPenalty(**kwargs)
    rewards = penalty([completion], enable_thinking=[thinking])
    assert rewards == [expected]
    assert all(isinstance(r, float) for r in rewards)


def test_batch_and_log_metric() -> None:
    logged: dict[str, list[float]] = {}
    penalty = StrayThinkPenalty(log_rates=True)  # metrics.level full; by default they repeat TRL's reward mean
    completions = [OK, OK, "4", "<think>a"]
    rewards = penalty(
        completions,
        enable_thinking=[True, False, False, True],
        log_metric=lambda k, v: logged.setdefault(k, []).append(v),
    )
    assert rewards == [0.0, -1.0, 0.0, -1.0]
    prefix = "rl_guards/stray_think_penalty/"
    assert logged[prefix + "penalised_rate"] == [0.5]
    assert logged[prefix + "tag_in_nonthinking_rate"] == [0.25]
    assert logged[prefix + "unclosed_open_rate"] == [0.25]
    assert set(logged) == {prefix + "penalised_rate"} | {f"{prefix}{c}_rate" for c in ALL_CODES}  # fixed keys
    filtered: dict[str, float] = {}
    StrayThinkPenalty(anomalies=["unclosed_open"], log_rates=True)(completions, log_metric=filtered.__setitem__)
    assert set(filtered) == {prefix + "penalised_rate", prefix + "unclosed_open_rate"}
    quiet: dict[str, float] = {}
    assert StrayThinkPenalty()(completions, log_metric=quiet.__setitem__) == [0.0, 0.0, 0.0, -1.0] and not quiet
    assert StrayThinkPenalty(enabled=False)(completions, log_metric=filtered.__setitem__) == [0.0] * 4


def test_column_name_and_missing_column() -> None:
    penalty = StrayThinkPenalty(thinking_column="think_mode", thinking=False)
    assert penalty([OK, OK], think_mode=[True, None]) == [0.0, -1.0]
    assert penalty([OK], enable_thinking=[True]) == [-1.0]  # not its column: the default mode (False)
    assert penalty([OK], think_mode=[True, True]) == [-1.0]  # wrong length: ignored
    assert penalty([]) == []


def test_token_ids_count_when_text_lost_tags() -> None:
    penalty = StrayThinkPenalty(open_id=1, close_id=2)
    assert penalty(["4"], completion_ids=[[1, 5, 2, 7]], enable_thinking=[False]) == [-1.0]
    assert penalty(["4"], completion_ids=[[1, 5, 7]], enable_thinking=[True]) == [-1.0]
    assert penalty(["4"], completion_ids=[[1, 5, 2, 7]], enable_thinking=[True]) == [0.0]
    assert StrayThinkPenalty()(["4"], completion_ids=[[1, 5, 2, 7]], enable_thinking=[False]) == [0.0]  # no ids


def test_set_prompt_opened() -> None:
    penalty = StrayThinkPenalty()
    assert penalty(["r</think>4"], enable_thinking=[True]) == [-1.0]
    penalty.set_prompt_opened(True, False)
    assert penalty(["r</think>4", "4"], enable_thinking=[True, False]) == [0.0, 0.0]


def test_from_config_and_guards_config() -> None:
    cfg = StrayThinkPenaltyConfig(weight=0.5, anomalies=["stray_close"], thinking=False, enabled=True)
    penalty = StrayThinkPenalty.from_config(cfg, thinking_column="mode_col")
    assert (penalty.weight, penalty.anomalies, penalty.thinking, penalty.thinking_column) == (
        0.5,
        ("stray_close",),
        False,
        "mode_col",
    )
    assert penalty(["a</think>b"]) == [-0.5]
    off = StrayThinkPenalty.from_config(StrayThinkPenaltyConfig(enabled=False))
    assert off(["<think>"]) == [0.0]
    guards = GuardsConfig.from_dict(
        {"think_tags": {"thinking_column": "th"}, "stray_think_penalty": {"weight": 2.0, "mode": "warn"}}
    )
    penalty = StrayThinkPenalty.from_guards_config(guards, chat_template_kwargs={"enable_thinking": False})
    assert penalty.thinking_column == "th" and penalty.default_thinking is False and penalty.mode == "warn"
    assert penalty([OK]) == [-2.0]


def test_constructor_errors() -> None:
    with pytest.raises(ConfigError, match="weight"):
        StrayThinkPenalty(weight=-1)
    with pytest.raises(ConfigError, match="unknown code"):
        StrayThinkPenalty(anomalies=["stray"])
    with pytest.raises(ConfigError, match="unknown markup"):
        StrayThinkPenalty(markup="nope")
    with pytest.raises(ConfigError, match=r"stray_think_penalty\.anomalies"):
        GuardsConfig.from_dict({"stray_think_penalty": {"anomalies": ["nope"]}})


def test_warn_mode_warns_once() -> None:
    with capture() as caught:
        penalty = StrayThinkPenalty(mode="warn")
        penalty([OK], enable_thinking=[False])
        penalty([OK], enable_thinking=[False])
        StrayThinkPenalty(mode="log")([OK], enable_thinking=[False])
    ours = caught.messages
    assert len(ours) == 1 and "tag_in_nonthinking" in ours[0]


def test_pickle_round_trip() -> None:
    penalty = StrayThinkPenalty(weight=0.5, anomalies=["stray_close"], markup="gemma4", open_id=3, close_id=4)
    penalty.set_prompt_opened(True, False)
    clone = pickle.loads(pickle.dumps(penalty))
    assert clone.__name__ == "stray_think_penalty" and vars(clone) == vars(penalty)
    assert clone(["r<channel|>4"], enable_thinking=[True]) == penalty(["r<channel|>4"], enable_thinking=[True])


def test_completion_text() -> None:
    assert completion_text("x") == "x"
    assert completion_text(None) == ""
    assert completion_text(conv("4", reasoning_content="r")) == "<think>r</think>4"
    assert completion_text(conv("4", reasoning_content="r"), prompt_opened=True) == "r</think>4"
    assert completion_text(conv("<think>r</think>4", reasoning_content="r")) == "<think>r</think>4"


# ----- a real GRPOTrainer run -----------------------------------------------------------------------------------
testing = pytest.importorskip("rl_guards.testing")


@pytest.mark.slow
def test_penalty_in_real_grpo_run(make_grpo_trainer: Any, tiny: Any) -> None:
    penalty = StrayThinkPenalty.from_guards_config(GuardsConfig(), tokenizer=tiny.tokenizer)
    penalty.log_rates = True  # its own rates (metrics.level full) are read below next to TRL's mean
    assert penalty.open_id == tiny.tokenizer.convert_tokens_to_ids("<think>")
    trainer = make_grpo_trainer(
        reward_funcs=[testing.arith_correct, testing.echo_match, penalty],
        train_dataset=testing.make_dataset(thinking="mixed"),
        max_steps=2,
    )
    assert "stray_think_penalty" in trainer.reward_func_names
    trainer.train()
    rows = [row for row in trainer.state.log_history if "rewards/stray_think_penalty/mean" in row]
    assert len(rows) == 2
    for row in rows:
        mean = row["rewards/stray_think_penalty/mean"]
        assert -1.0 <= mean <= 0.0
        # Every penalised row gets -1, so the mean reward is minus the penalised share logged alongside.
        assert math.isclose(mean, -row["rl_guards/stray_think_penalty/penalised_rate"], abs_tol=1e-6)
    # TRL renders every prompt with one global enable_thinking, so the tiny model thinks in the rows the dataset
    # marks non-thinking: the penalty fires.
    assert any(row["rewards/stray_think_penalty/mean"] < 0 for row in rows)
