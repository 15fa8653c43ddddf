"""``reward.rl_guards`` read into the driver's settings (plain dicts: no verl needed): precedence, validation, the run
folder. And the record's round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_guards.errors import ConfigError
from rl_guards.verl.records import MAX_EXTRA_INFO_CHARS, ScoreRecord
from rl_guards.verl.settings import VerlSettings, run_folder


def test_inline_sections_then_the_file_then_set(tmp_path: Path) -> None:
    yaml = tmp_path / "guards.yaml"
    yaml.write_text("routing: {mode: log}\ntruncation: {max_rate: 0.3, window: 2}\n")
    section = {
        "inner": "dapo",
        "config": str(yaml),
        "set": ["truncation.window=5"],
        "routing": {"mode": "warn"},
        "truncation": {"min_rows": 4, "window": 9},
        "score_terms": ["stray_think_penalty"],
    }
    settings = VerlSettings.from_config({"reward": {"rl_guards": section}})
    guards = settings.guards
    assert settings.inner == "dapo" and settings.score_terms == ["stray_think_penalty"]
    assert guards.routing.mode == "log"  # the file over the inline section
    assert (guards.truncation.min_rows, guards.truncation.max_rate, guards.truncation.window) == (4, 0.3, 5)


def test_defaults_without_a_section_and_errors_that_name_the_field() -> None:
    settings = VerlSettings.from_config({"reward": {}})
    assert settings.inner == "naive" and settings.guards.routing.mode == "raise" and settings.score_terms == []
    with pytest.raises(ConfigError, match=r"reward\.rl_guards\.set"):
        VerlSettings.from_config({"reward": {"rl_guards": {"set": [1]}}})
    with pytest.raises(ConfigError, match="routing"):
        VerlSettings.from_config({"reward": {"rl_guards": {"routing": {"mode": "loud"}}}})


def test_the_run_folder_follows_verls_default_local_dir() -> None:
    config = {"trainer": {"default_local_dir": "/ckpt/run1", "project_name": "p", "experiment_name": "e"}}
    assert run_folder(config, VerlSettings()) == "/ckpt/run1"
    assert run_folder(config, VerlSettings(output_dir="/elsewhere")) == "/elsewhere"
    assert run_folder({"trainer": {"project_name": "p", "experiment_name": "e"}}, VerlSettings()) == "checkpoints/p/e"


def test_the_record_round_trips_and_keeps_large_extra_info_out() -> None:
    record = ScoreRecord(scorer="f", valid_len=3, score=1.0, extra_info={"index": 1, "num_turns": 2})
    back = ScoreRecord.from_json(record.to_json())
    assert back == record
    big = ScoreRecord(extra_info={"text": "x" * MAX_EXTRA_INFO_CHARS})
    assert ScoreRecord.from_json(big.to_json()).extra_info is None  # type: ignore[union-attr]
    assert ScoreRecord.from_json("not json") is None and ScoreRecord.from_json('{"schema": 99}') is None
