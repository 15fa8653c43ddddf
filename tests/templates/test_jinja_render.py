"""``rl-guards check-template`` renders with jinja2 alone (:mod:`rl_guards.chat.jinja_render`): the same text as the
tokenizer's own ``apply_chat_template`` for every template TRL ships, in every mode the checks render."""

from __future__ import annotations

from typing import Any

import pytest

from rl_guards.chat.jinja_render import TemplateRenderer, renderer_for
from rl_guards.chat.template_check import check_template, render_generation_prompts
from rl_guards.testing import available_chat_templates, build_tokenizer

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Solve it"}, {"role": "assistant", "content": "<think>\n"}],
    [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B", "reasoning_content": "why"},
     {"role": "user", "content": "C"}],
]  # fmt: skip


@pytest.mark.parametrize("name", available_chat_templates())
def test_same_text_as_the_tokenizer_for_every_trl_template(name: str) -> None:
    tokenizer = build_tokenizer(chat_template=name)
    renderer = renderer_for(name)
    assert isinstance(renderer, TemplateRenderer)
    for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
        for conversation in CONVERSATIONS:
            try:
                expected = render_generation_prompts(tokenizer, [conversation], kwargs)
            except Exception as exc:  # the template refuses this conversation: so must the renderer
                with pytest.raises(type(exc)):
                    render_generation_prompts(renderer, [conversation], kwargs)
                continue
            assert render_generation_prompts(renderer, [conversation], kwargs) == expected, (name, kwargs)
    assert check_template(renderer).kinds() == check_template(tokenizer).kinds()


def test_a_tokenizer_folder_is_read_from_its_files(tmp_path: Any) -> None:
    tokenizer = build_tokenizer(chat_template="qwen3")
    tokenizer.save_pretrained(tmp_path)
    renderer = renderer_for(str(tmp_path))
    assert renderer is not None and renderer.chat_template == tokenizer.chat_template
    assert renderer.eos_token == "<|im_end|>"
    conversation = CONVERSATIONS[0]
    assert render_generation_prompts(renderer, [conversation]) == render_generation_prompts(tokenizer, [conversation])
