"""GuardsConfig: defaults, dict/YAML round trip, field-naming errors, command-line parsing next to TRL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_guards.config import GuardsArguments, GuardsConfig
from rl_guards.errors import ConfigError


def test_defaults_every_guard_has_enabled_and_mode() -> None:
    cfg = GuardsConfig()
    data = cfg.to_dict()
    assert data, "no guards configured"
    for name, sub in data.items():
        if name == "metrics":  # not a guard: how much every guard logs
            assert sub == {"level": "default"}
            continue
        if name == "engine":  # not a guard: how the guards run beside the trainer
            assert sub == {"background": True}
            continue
        if name == "console":  # not a guard: what rl_guards prints
            assert sub == {"verbose": False, "status_every": 10}
            continue
        assert sub["enabled"] is True, name
        assert sub["mode"] in ("raise", "warn", "log"), name
    json.dumps(data)  # JSON-serialisable
    assert set(data) - set(cfg.guard_sections()) == {"metrics", "engine", "console"}


def test_dict_and_yaml_round_trip(tmp_path: Path) -> None:
    import yaml

    cfg = GuardsConfig.from_dict({"think_tags": {"mode": "raise"}, "rollouts": {"every_steps": 3}})
    assert cfg.think_tags.mode == "raise" and cfg.rollouts.every_steps == 3
    path = tmp_path / "guards.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert GuardsConfig.from_yaml(path) == cfg
    nested = tmp_path / "nested.yaml"
    nested.write_text(yaml.safe_dump({"rl_guards": {"masking": {"check_every": 4}}}))
    assert GuardsConfig.from_yaml(nested).masking.check_every == 4


@pytest.mark.parametrize(
    ("data", "field_named"),
    [
        ({"think_tags": {"mode": "explode"}}, "think_tags.mode"),
        ({"masking": {"check_every": 0}}, "masking.check_every"),
        ({"masking": {"check_every": "two"}}, "masking.check_every"),
        ({"truncation": {"max_rate": 1.5}}, "truncation.max_rate"),
        ({"rollouts": {"colour": "red"}}, "rollouts.colour"),
        ({"no_such_guard": {}}, "no_such_guard"),
        ({"think_tags": {"enabled": "yes"}}, "think_tags.enabled"),
        ({"routing": {"routes": {"math": "not-a-list"}}}, "routing.routes"),
        ({"think_tags": {"open_tag": "<think>", "close_tag": "<think>"}}, "think_tags.open_tag"),
    ],
)
def test_bad_values_name_the_field(data: dict, field_named: str) -> None:
    with pytest.raises(ConfigError, match=field_named.replace("[", r"\[").replace(".", r"\.")):
        GuardsConfig.from_dict(data)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        GuardsConfig.from_dict({"masking": {"mode": "nope"}})


def test_overrides() -> None:
    cfg = GuardsConfig().with_overrides(["think_tags.mode=raise", "dead_groups.warn_after_steps=3"])
    assert cfg.think_tags.mode == "raise" and cfg.dead_groups.warn_after_steps == 3
    with pytest.raises(ConfigError, match=r"think_tags\.colour"):
        GuardsConfig().with_overrides(["think_tags.colour=1"])


def test_parsed_from_the_command_line_next_to_grpo_config(tmp_path: Path) -> None:
    import yaml
    from trl import GRPOConfig, TrlParser

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"truncation": {"max_rate": 0.2}}))
    parser = TrlParser((GRPOConfig, GuardsArguments))
    grpo_args, guard_args = parser.parse_args_and_config(
        [
            "--output_dir",
            str(tmp_path),
            "--use_cpu",
            "true",
            "--bf16",
            "false",
            "--guards_config",
            str(path),
            "--guards_set",
            "think_tags.mode=raise",
            "rollouts.every_steps=5",
        ]
    )
    cfg = guard_args.to_config()
    assert grpo_args.output_dir == str(tmp_path)
    assert cfg.truncation.max_rate == 0.2
    assert cfg.think_tags.mode == "raise" and cfg.rollouts.every_steps == 5
