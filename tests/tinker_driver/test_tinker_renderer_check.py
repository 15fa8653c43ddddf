"""The cookbook's own renderers against the tiny tokenizer's chat template (chat.renderer_check), no loop."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("tinker_cookbook")

from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import parse_response_for_stop_token
from tinker_cookbook.renderers.qwen3 import Qwen3Renderer

from rl_guards.chat.renderer_check import compare_renderer, parse_round_trip, renderer_thinking


class KeepsThinkTags(Qwen3Renderer):
    """A renderer whose parse_response leaves the think block in the text (a parser that forgot it)."""

    def parse_response(self, response: list[int]) -> tuple[Any, Any]:
        return parse_response_for_stop_token(response, self.tokenizer, self._end_message_token)


def _kinds(renderer: Any, tokenizer: Any) -> set[str]:
    probe, findings = compare_renderer(renderer, tokenizer)
    findings += parse_round_trip(renderer, tokenizer, probe)
    return {f.kind for f in findings if f.severity == "blocking"}


@pytest.mark.parametrize(
    ("name", "thinking", "kinds"),
    [
        ("qwen3", True, set()),
        ("qwen3_disable_thinking", False, set()),
        ("qwen3_instruct", False, {"renderer_mismatch"}),  # drops the closed block this hybrid template adds
    ],
)
def test_the_cookbooks_qwen3_renderers(tiny: Any, name: str, thinking: bool, kinds: set[str]) -> None:
    tokenizer = tiny.load_tokenizer()
    renderer = renderers.get_renderer(name, tokenizer)
    assert renderer_thinking(renderer) is thinking
    assert _kinds(renderer, tokenizer) == kinds


def test_a_parser_that_leaves_the_think_block_in_the_answer_is_named(tiny: Any) -> None:
    tokenizer = tiny.load_tokenizer()
    probe, _ = compare_renderer(KeepsThinkTags(tokenizer), tokenizer)
    (finding,) = parse_round_trip(KeepsThinkTags(tokenizer), tokenizer, probe)
    assert finding.kind == "renderer_parse" and "leaves think tags in the answer text" in finding.message
