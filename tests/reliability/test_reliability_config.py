"""Issue 11: a bad config is a ConfigError naming the field, however it arrives: assigned in code after
construction, edited in place before install(), or written in YAML (NaN, odd keys, null sections)."""

from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rl_guards
from rl_guards.cli.preflight import read_config
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


@pytest.mark.slow
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


# ----- issue 22 item 8: every malformed file is a ConfigError, quickly ------------------------------------------
BOMB = (  # about 600 bytes, 10**9 strings once expanded, under a field that takes any value
    "preflight:\n  eval_chat_template_kwargs:\n    a: &a [xxxxxxxx, xxxxxxxx, xxxxxxxx, xxxxxxxx, xxxxxxxx, xxxxxxxx]\n"
    + "".join(f"    {chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(9))
)
MALFORMED: dict[str, tuple[bytes, str]] = {  # name -> (file bytes, part of the message)
    "bad_syntax": (b"masking: {mode: raise\n", "not valid YAML"),
    "tab_indent": (b"masking:\n\tmode: raise\n", "not valid YAML"),
    "invalid_utf8": (b"masking: {mode: r\xe9ise}\n", "not UTF-8 text (byte 0xe9 at offset 17)"),
    "scalar_top": (b"42\n", "expected a mapping at the top level, got int"),
    "false_top": (b"false\n", "expected a mapping at the top level, got bool"),
    "list_top": (b"[masking, think_tags]\n", "expected a mapping at the top level, got list"),
    "duplicate_section": (b"masking: {mode: raise}\nmasking: {mode: log}\n", "key 'masking' is given twice"),
    "duplicate_field": (b"masking:\n  mode: raise\n  mode: log\n", "key 'mode' is given twice"),
    "duplicate_under_rl_guards": (b"rl_guards:\n  masking: {}\n  masking: {}\n", "key 'masking' is given twice"),
    "huge_int_weight": (b"stray_think_penalty: {weight: 1" + b"0" * 400 + b"}\n", "weight must be a finite number"),
    "huge_int_steps": (b"rollouts: {every_steps: 1" + b"0" * 30 + b"}\n", "rollouts.every_steps is out of range"),
    "int_over_4300_digits": (b"rollouts: {every_steps: 1" + b"0" * 5000 + b"}\n", "a value cannot be read"),
    "alias_bomb": (BOMB.encode(), "an alias bomb"),
    "recursive_alias": (b"routing: {routes: &r {a: *r}}\n", "(a recursive structure)"),
    "nested_too_deep": (b"masking: " + b"[" * 1000 + b"]" * 1000 + b"\n", "nested too deeply"),
    "control_character": (b"masking: {mode: raise}\x07\n", "not valid YAML"),
    "unhashable_key": (b"? [a, b]\n: 1\n", "not valid YAML"),
    "python_tag": (b"masking: !!python/object/apply:os.system [echo hi]\n", "not valid YAML"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_yaml_file_is_one_config_error(tmp_path: Path, name: str) -> None:
    raw, message = MALFORMED[name]
    path = tmp_path / "guards.yaml"
    path.write_bytes(raw)
    started = time.monotonic()
    with pytest.raises(ConfigError) as raised:  # 437f4ff: PyYAML / UnicodeDecodeError / OverflowError tracebacks
        GuardsConfig.from_yaml(path)
    assert time.monotonic() - started < 60  # a hang guard, not a speed target: 437f4ff ran to_dict() for over 90 s
    assert message in str(raised.value) and len(str(raised.value)) < 600
    if not name.startswith("huge_int"):  # the file itself is broken: the preflight / rl-guards grpo reader says so
        with pytest.raises(ConfigError):
            read_config(path)


def test_yaml_aliases_within_bounds_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "guards.yaml"
    path.write_text(
        "masking: &strict {mode: raise}\nthink_tags: *strict\n"
        "dead_groups:\n  <<: {mode: log, warn_after_steps: 3}\n  warn_after_steps: 5\n"
    )
    config = GuardsConfig.from_yaml(path)
    assert config.masking.mode == "raise" and config.think_tags.mode == "raise"
    assert config.dead_groups.mode == "log" and config.dead_groups.warn_after_steps == 5  # own key wins a merge


def test_guards_callback_takes_a_yaml_path_and_names_what_to_pass(tmp_path: Path) -> None:
    from rl_guards.trl.callback import GuardsCallback

    path = tmp_path / "x.yaml"
    path.write_text("think_tags: {mode: raise}\n")
    assert GuardsCallback(str(path)).config.think_tags.mode == "raise"  # 437f4ff: AttributeError
    assert GuardsCallback(path).config.think_tags.mode == "raise"
    with pytest.raises(ConfigError, match="a GuardsConfig, a dict or the path of a YAML file"):
        GuardsCallback(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no-such\.yaml"):
        GuardsCallback(str(tmp_path / "no-such.yaml"))


def _field_values() -> Any:
    scalar = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(["raise", "warn", "log", "full", "default", "arith", "yes", "~", ".inf"]),
    )
    return st.recursive(
        scalar,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8,
    )


def _config_dicts() -> Any:
    defaults = GuardsConfig()
    names = {
        f.name: [g.name for g in dataclasses.fields(getattr(defaults, f.name))] for f in dataclasses.fields(defaults)
    }
    sections = st.sampled_from(sorted(names)).flatmap(
        lambda s: st.tuples(
            st.just(s), st.dictionaries(st.sampled_from(names[s] + ["bogus"]), _field_values(), max_size=4)
        )
    )
    return st.lists(sections, max_size=4).map(dict)


YAML_SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _loads_or_config_error(raw: bytes, tmp: Path) -> None:
    path = tmp / "guards.yaml"
    path.write_bytes(raw)
    started = time.monotonic()
    try:
        config = GuardsConfig.from_yaml(path)
    except ConfigError:
        pass
    else:
        assert isinstance(config, GuardsConfig)
        config.validate()
        json.dumps(config.to_dict())  # constructor arguments stay JSON-serialisable
    assert time.monotonic() - started < 60  # a hang guard (an alias bomb), not a speed target


@YAML_SETTINGS
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_property_any_bytes_load_or_raise_config_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _loads_or_config_error(raw, Path(tmp))


@YAML_SETTINGS
@given(_config_dicts(), st.sampled_from(["block", "flow", "rl_guards", "mutated"]), st.integers(0, 10**6))
def test_property_any_config_shaped_yaml_loads_or_raises_config_error(
    data: dict[str, Any], style: str, cut: int
) -> None:
    import yaml

    if style == "rl_guards":
        data = {"rl_guards": data}
    text = yaml.safe_dump(data, default_flow_style=style == "flow", allow_unicode=True)
    if style == "mutated" and text:  # a truncated or spliced file: half a mapping, a stray indent
        at = cut % len(text)
        text = text[:at] + ("\t" if cut % 3 == 0 else "") + text[at + cut % 5 :]
    with tempfile.TemporaryDirectory() as tmp:
        _loads_or_config_error(text.encode("utf-8", "surrogatepass"), Path(tmp))
