"""GuardedRewardManager in verl's own reward worker (``RewardLoopWorker``, in this process: no Ray), over verl's own
managers (naive, dapo) and scorers (``default_compute_score``: gsm8k, math_dapo, its NotImplementedError), on rows
the tiny model generated, each built as verl's agent loop builds it."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("verl.protocol")  # "verl" alone would find this folder (tests/ is on sys.path)

from _verl_rows import SCORER, sample_row

from rl_guards.testing.verl_server import TinyRolloutServer
from rl_guards.verl.records import RECORD_KEY, ScoreRecord, text_digest

PROMPT = "What is 3+4? Answer with the number."


@pytest.fixture(scope="module")
def generated(tiny: Any) -> list[list[int]]:
    """Four responses of the tiny model to the prompt (sampled on CPU, EOS kept)."""
    server = TinyRolloutServer(tiny.model_dir, 24, seed=3)
    rendered = tiny.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    prompt_ids = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    return [server.reply(prompt_ids, 1.0, 1.0) for _ in range(4)]


def worker(config: Any) -> Any:
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    return RewardLoopWorker(config)  # verl's reward worker class, as its Ray actor runs it


def score(w: Any, data: Any) -> dict[str, Any]:
    return w.loop.run_until_complete(w.compute_score(data))


def record_of(out: dict[str, Any]) -> ScoreRecord:
    record = ScoreRecord.from_json(out["reward_extra_info"][RECORD_KEY])
    assert record is not None
    return record


def test_verl_resolves_and_builds_the_guarded_manager_in_its_reward_worker(verl_config: Any) -> None:
    w = worker(verl_config("+reward.rl_guards.inner=dapo", scorer="verl"))
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

    from rl_guards.verl.manager import GuardedRewardManager

    assert isinstance(w.reward_manager, GuardedRewardManager)
    assert isinstance(w.reward_manager.inner, DAPORewardManager)
    assert w.reward_manager.observer.name == "default_compute_score"


@pytest.mark.parametrize(
    ("data_source", "truth"), [("openai/gsm8k", "7"), ("math_dapo", "7"), ("tiny/arith", "7"), ("tiny/echo", "cat")]
)
def test_same_reward_and_extra_keys_as_verls_own_naive_manager_plus_one_record(
    verl_config: Any, tiny: Any, generated: list[list[int]], data_source: str, truth: str
) -> None:
    guarded = worker(verl_config())
    plain = worker(
        verl_config(
            "reward.reward_manager.source=register",
            "reward.reward_manager.name=naive",
            "reward.reward_manager.module.path=null",
        )
    )
    for ids in generated:
        ours = score(guarded, sample_row(tiny.tokenizer, PROMPT, ids, data_source=data_source, ground_truth=truth))
        theirs = score(plain, sample_row(tiny.tokenizer, PROMPT, ids, data_source=data_source, ground_truth=truth))
        assert ours["reward_score"] == theirs["reward_score"]
        extra = dict(ours["reward_extra_info"])
        record = ScoreRecord.from_json(extra.pop(RECORD_KEY))
        assert extra == theirs["reward_extra_info"]
        assert record is not None and record.error == "" and record.valid_len == len(ids)
        text = tiny.tokenizer.decode(ids, skip_special_tokens=True)  # what verl's naive manager hands the scorer
        assert (record.chars, record.digest) == (len(text), text_digest(text))
        assert record.given == record.total == theirs["reward_score"]
        assert record.extra_info["num_turns"] is not None  # extra_info as the scorer got it (naive adds num_turns)
        assert len(ours["reward_extra_info"][RECORD_KEY]) < 600


def test_dapo_inner_keeps_its_dict_keys_and_its_overlong_penalty(verl_config: Any, tiny: Any) -> None:
    w = worker(
        verl_config(
            "+reward.rl_guards.inner=dapo",
            "+reward.reward_kwargs.max_resp_len=8",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
            "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
            "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
            "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
            scorer="verl",
        )
    )
    ids = tiny.tokenizer("Let me think about it. Answer: 7", add_special_tokens=False)["input_ids"]
    out = score(w, sample_row(tiny.tokenizer, PROMPT, ids, data_source="math_dapo", ground_truth="7"))
    record = record_of(out)
    assert set(out["reward_extra_info"]) == {"score", "acc", "pred", RECORD_KEY}
    assert record.score == 1.0 and record.total == out["reward_score"] < 1.0  # dapo's overlong penalty on top


def test_unknown_data_source_gets_a_substitute_and_a_record_instead_of_verls_crash(
    verl_config: Any, tiny: Any, generated: list[list[int]]
) -> None:
    w = worker(verl_config(scorer="verl"))
    out = score(w, sample_row(tiny.tokenizer, PROMPT, generated[0], data_source="my_dataset/v2"))
    record = record_of(out)
    assert out["reward_score"] == 0.0 and set(out["reward_extra_info"]) == {"acc", RECORD_KEY}
    assert record.unrouted and record.score is None and "NotImplementedError" in record.error
    assert "my_dataset/v2" in record.error and "__init__.py" in record.error


def test_reward_errors_off_keeps_verls_own_behaviour(verl_config: Any, tiny: Any, generated: list[list[int]]) -> None:
    w = worker(verl_config("+reward.rl_guards.reward_errors.enabled=false", scorer="verl"))
    with pytest.raises(NotImplementedError, match="my_dataset/v2"):
        score(w, sample_row(tiny.tokenizer, PROMPT, generated[0], data_source="my_dataset/v2"))


def test_a_raising_row_gets_the_keys_of_the_rows_scored_before_it(verl_config: Any, tiny: Any) -> None:
    w = worker(verl_config(scorer=f"{SCORER}:dict_score"))
    ids = tiny.tokenizer("so 7", add_special_tokens=False)["input_ids"] + [tiny.tokenizer.eos_token_id]
    good = score(w, sample_row(tiny.tokenizer, PROMPT, ids, ground_truth="7"))
    bad = score(w, sample_row(tiny.tokenizer, PROMPT, ids, ground_truth="n/a"))
    assert good["reward_score"] == 1.0 and bad["reward_score"] == 0.0
    assert set(bad["reward_extra_info"]) == set(good["reward_extra_info"]) == {"score", "acc", "pred", RECORD_KEY}
    assert bad["reward_extra_info"]["acc"] is False and bad["reward_extra_info"]["pred"] == ""
    record = record_of(bad)
    assert record.error.startswith("ValueError: invalid literal for int()") and "planted_scorer.py" in record.error
    assert not record.unrouted and record.score is None and record.given == 0.0


def test_a_none_score_gets_a_substitute_and_is_recorded(
    verl_config: Any, tiny: Any, generated: list[list[int]]
) -> None:
    w = worker(verl_config())
    out = score(w, sample_row(tiny.tokenizer, PROMPT, generated[0], data_source="plant/none"))
    record = record_of(out)
    assert out["reward_score"] == 0.0 and record.returned_none and record.score is None and not record.error


def test_an_async_scorer_is_awaited_as_verl_awaits_it(verl_config: Any, tiny: Any) -> None:
    import inspect

    w = worker(verl_config(scorer=f"{SCORER}:async_score"))
    assert inspect.iscoroutinefunction(w.reward_manager.inner.compute_score)
    ids = tiny.tokenizer("7", add_special_tokens=False)["input_ids"] + [tiny.tokenizer.eos_token_id]
    out = score(w, sample_row(tiny.tokenizer, PROMPT, ids, ground_truth="7"))
    assert out["reward_score"] == 1.0 and record_of(out).score == 1.0


def test_stray_think_penalty_as_a_score_term_counts_tags_on_the_ids(verl_config: Any, tiny: Any) -> None:
    w = worker(
        verl_config(
            "+reward.rl_guards.score_terms=[stray_think_penalty]",
            "+reward.rl_guards.stray_think_penalty.weight=0.5",
            "+data.apply_chat_template_kwargs.enable_thinking=false",
        )
    )
    tok = tiny.tokenizer
    stray = tok("</think>\n\n7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    clean = tok("7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    out_stray = score(w, sample_row(tok, PROMPT, stray, ground_truth="7"))
    out_clean = score(w, sample_row(tok, PROMPT, clean, ground_truth="7"))
    assert out_clean["reward_score"] == 1.0 and out_clean["reward_extra_info"]["stray_think_penalty"] == 0.0
    assert out_stray["reward_score"] == 0.5 and out_stray["reward_extra_info"]["stray_think_penalty"] == -0.5
    assert record_of(out_stray).penalty == -0.5 and record_of(out_stray).score == 1.0


def test_the_record_is_a_string_verls_validation_metrics_skip(verl_config: Any, tiny: Any, generated: Any) -> None:
    """verl turns numeric extra keys into validation metrics; the record must not be one."""
    import numpy as np

    w = worker(verl_config())
    out = score(w, sample_row(tiny.tokenizer, PROMPT, generated[0]))
    value = np.array([out["reward_extra_info"][RECORD_KEY]])
    assert value.dtype.kind == "U" and json.loads(value[0])["schema"] == 1
