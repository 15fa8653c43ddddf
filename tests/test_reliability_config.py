"""Issue 11: a bad config is a ConfigError naming the field, however it arrives: assigned in code after
construction, edited in place before install(), or written in YAML (NaN, odd keys, null sections)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.config import GuardsConfig, MaskingConfig
from rl_guards.errors import ConfigError

ASSIGNMENTS = [  # (section, field, value, the message's start)
    ("masking", "mode", "Raise", "masking.mode must be one of"),  # 0.1: accepted, and the guard only counted
    ("think_tags", "max_anomaly_rate", float("nan"), "think_tags.max_anomaly_rate must be a finite number"),
    ("stray_think_penalty", "weight", float("inf"), "stray_think_penalty.weight must be a finite number"),
    ("rollouts", "every_steps", "5", "rollouts.every_steps must be an integer"),
    ("rollouts", "every_steps", 0, "rollouts.every_steps must be > 0"),
    ("tasks", "max_tasks", 2.5, "tasks.max_tasks must be an integer"),
    ("routing", "routes", "math", "routing.routes must be a mapping"),
    ("dead_groups", "enabled", "yes", "dead_groups.enabled must be true or false"),
    ("masking", "modes", "raise", "unknown field masking.modes"),
    ("metrics", "level", "all", "metrics.level must be one of"),
]


@pytest.mark.parametrize(
    ("section", "name", "value", "message"), ASSIGNMENTS, ids=[f"{a[0]}.{a[1]}" for a in ASSIGNMENTS]
)
def test_an_assignment_after_construction_is_checked(section: str, name: str, value: Any, message: str) -> None:
    config = GuardsConfig()
    before = copy.deepcopy(getattr(config, section))
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        setattr(getattr(config, section), name, value)
    assert getattr(config, section) == before  # a refused value leaves the field as it was


def test_good_assignments_and_whole_sections() -> None:
    config = GuardsConfig()
    config.masking.mode = "warn"
    config.rollouts.every_steps = 5
    config.stray_think_penalty.weight = 2  # an int for a float field is fine
    config.metrics = "full"  # the YAML shorthand works in code too
    config.truncation = {"max_rate": 0.3}
    config.masking = MaskingConfig(mode="log")
    assert (config.masking.mode, config.rollouts.every_steps, config.metrics.level) == ("log", 5, "full")
    assert config.truncation.max_rate == 0.3 and config.stray_think_penalty.weight == 2.0
    with pytest.raises(ConfigError, match="masking must be a MaskingConfig"):
        config.masking = 3
    with pytest.raises(ConfigError, match="unknown guard section 'maskng'"):
        config.maskng = {}
    with pytest.raises(ConfigError, match=r"truncation\.max_rate must be within \[0, 1\]"):
        config.truncation = {"max_rate": 2.0}


def test_install_checks_a_config_edited_in_place(make_grpo_trainer: Any) -> None:
    config = GuardsConfig()
    config.routing.routes["arith"] = ["arith_correct"]
    config.routing.routes["echo"] = "echo_match"  # not a list: no assignment to catch it
    with pytest.raises(ConfigError, match=r"routing\.routes\['echo'\] must be a list"):
        rl_guards.install(make_grpo_trainer(max_steps=1), config)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stray_think_penalty: {weight: .nan}\n", "stray_think_penalty.weight must be a finite number"),
        ("truncation: {max_rate: .inf}\n", "truncation.max_rate must be a finite number"),
        ("masking:\n  1: raise\n  mode: warn\n", "masking has key(s) that are not names: [1]"),  # 0.1: TypeError
        ("1: {mode: raise}\nmasking: {mode: warn}\n", "config has key(s) that are not names: [1]"),
        ("- masking\n", "expected a mapping at the top level"),
        ("rl_guards: {masking: {mode: warn}}\nmasking: {mode: raise}\n", "both under rl_guards: and at the top"),
        ("dead_groups: {enabled: 'yes'}\n", "dead_groups.enabled must be true or false"),
    ],
)
def test_yaml_oddities_are_config_errors_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "guards.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        GuardsConfig.from_yaml(path)
    assert message in str(raised.value)


def test_yaml_null_sections_and_yes_no_booleans_have_a_clear_meaning(tmp_path: Path) -> None:
    path = tmp_path / "guards.yaml"
    path.write_text("masking:\ndead_groups: {enabled: no}\n")
    config = GuardsConfig.from_yaml(path)
    assert config.masking == MaskingConfig() and config.dead_groups.enabled is False  # YAML 1.1: no = false
    path.write_text("rl_guards:\n")
    assert GuardsConfig.from_yaml(path) == GuardsConfig()
