"""Planted failures in cookbook form, each caught with the right kind by the cookbook's own loop, each clean twin
silent (no warning, no error). The plants are recipe-side only (``rl_guards.testing.tinker_envs``): a dataset
field, a renderer, an env's prefill, a group builder; nothing of the cookbook is patched."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

pytestmark = pytest.mark.slow

THINK_PREFILL = "rl_guards/tiny_think_prefill"  # rl_guards.testing.tinker_envs.THINK_PREFILL_RENDERER


@dataclass
class Case:
    name: str
    plant: dict[str, Any]
    twin: dict[str, Any]
    expect: tuple[str, str]  # (guard, kind)
    raises: str | None = None  # the error class name that ends a raise-mode run
    common: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("max_tokens too small", {"max_tokens": 2}, {"max_tokens": 24}, ("truncation", "truncation_rate")),
    Case(
        "a dead tag",
        {"grader": "never"},
        {"grader": "right"},
        ("dead_groups", "dead_task"),
        common={
            "steps": 3,
            "tasks": ("echo",),
            "tags": ("echo", "echo_dead"),
            "planted_tasks": ("echo_dead",),
            # "never" pays no answer at all, right ones included: reward sanity rightly stops that at the first
            # batch (below); off here, where it stands for a task the model cannot solve yet
            "guards_set": ["dead_groups.warn_after_steps=2", "reward_sanity.enabled=false"],
            "renderer": "qwen3_disable_thinking",
        },
    ),
    Case(
        "a grader that pays wrong answers and never the right one (a sign error)",
        {"grader": "inverted"},
        {"grader": "right"},
        ("reward_sanity", "reference_pairs"),
        raises="RewardSanityError",
        common={"steps": 1, "tasks": ("echo",), "tags": ("echo", "echo_b"), "planted_tasks": ("echo_b",)},
    ),
    Case(
        "stray think tags",
        {"prefill": "<think>\n"},
        {},
        ("think_tags", "anomaly_rate"),
        common={"steps": 1, "tasks": ("echo",)},
    ),
    Case(
        "double think: an R1-style renderer and the env's own prefill",
        {"renderer": THINK_PREFILL, "prefill": "<think>\n"},
        {"renderer": "qwen3", "prefill": "<think>\n"},
        ("template", "double_open"),
        raises="TemplateError",
        common={"steps": 1, "max_tokens": 16},
    ),
    Case(
        "a Qwen3 renderer that drops the template's closed think block",
        {"renderer": "qwen3_instruct"},
        {"renderer": "qwen3_disable_thinking"},
        ("template", "renderer_mismatch"),
        raises="TemplateError",
        common={"steps": 1, "max_tokens": 16},
    ),
    Case(
        "a group holding different problems",
        {"mixed_groups": True},
        {},
        ("groups", "mixed_group"),
        raises="GroupIntegrityError",
        common={"steps": 1, "renderer": "qwen3", "max_tokens": 16},
    ),
    Case(
        "a datum with loss on the observation (the datums as sent)",
        {"move_header": 3},
        {},
        ("masking", "observation_loss"),
        raises="MaskingError",
        common={"steps": 1, "max_tokens": 16},
    ),
    Case(
        "a datum with loss on the observation (rebuilt, as against the real service)",
        {"move_header": 3},
        {},
        ("masking", "observation_loss"),
        raises="MaskingError",
        common={"steps": 1, "max_tokens": 16, "attach": False},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planted_is_caught_and_its_twin_is_silent(case: Case, cookbook_run: Any) -> None:
    planted = cookbook_run(**{**case.common, **case.plant})
    kinds = planted.kinds()
    assert case.expect in kinds, (case.name, kinds, planted.error, planted.run.summary())
    if case.raises is not None:
        assert type(planted.error).__name__ == case.raises, planted.error
        assert str(planted.error).startswith(f"[rl_guards/{case.expect[0]}]")  # the guard's own message
    else:
        assert planted.error is None, planted.error
    twin = cookbook_run(**{**case.common, **case.twin})
    assert twin.error is None, twin.error
    assert twin.kinds() == set(), (case.name, twin.run.summary())


def test_the_observation_loss_stop_trains_nothing(cookbook_run: Any, tiny: Any) -> None:
    import torch

    from rl_guards.tinker.backend.trainer import load_model

    result = cookbook_run(steps=1, max_tokens=16, move_header=3)
    assert type(result.error).__name__ == "MaskingError"
    assert "checked on the datums sent to forward_backward" in str(result.error)
    (trained,) = result.backend.service._trained.values()
    before = torch.cat([p.detach().flatten() for p in load_model(tiny.model_dir).parameters()])
    after = torch.cat([p.detach().flatten() for p in trained.model.parameters()])
    assert torch.equal(before, after)  # the request failed before it ran: no gradient, the optim_step moved nothing
