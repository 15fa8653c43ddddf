"""Every chat template TRL ships (``trl/chat_templates/*.jinja``, found by glob): no false alarm on a correct
setup, and a planted double prefill caught wherever the family's markup lets one reach the prompt.

Expectations come from an independent judge: the raw ``apply_chat_template(..., tokenize=False)`` string and
``think_markup.prompt_opens_block`` (another module's end-of-prompt test), never from the code under test.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trl

from rl_guards.chat.template_check import PROBE_TEXT, check_template, probe_conversation
from rl_guards.core.templates import (
    DOUBLE_OPEN,
    PREFILL_DUPLICATES_TEMPLATE,
    ROW_PREFILL,
    THINKING_FLAG_IGNORED,
)
from rl_guards.core.think_markup import GEMMA4, GPTOSS, THINK, ThinkMarkup, markup_for_template, prompt_opens_block
from rl_guards.testing import build_tokenizer

TEMPLATE_DIR = Path(trl.__file__).parent / "chat_templates"
TEMPLATES = sorted(p.stem for p in TEMPLATE_DIR.glob("*.jinja"))
PLANTS = {THINK.name: "<think>\n", GEMMA4.name: "<|channel>thought\n", GPTOSS.name: "<|channel|>analysis<|message|>"}
TOOL_CONVERSATION = [
    {"role": "user", "content": PROBE_TEXT},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}],
    },
    {"role": "tool", "name": "add", "content": "4"},
]


def _text(name: str) -> str:
    return (TEMPLATE_DIR / f"{name}.jinja").read_text(encoding="utf-8")


GEMMA_TEMPLATES = [n for n in TEMPLATES if markup_for_template(_text(n)) is GEMMA4]


@dataclass
class Setup:
    name: str
    tokenizer: Any
    kwargs: dict[str, Any]  # template kwargs the family needs (bos_token where the template reads it)
    shape: str  # "str" or "list": the content shape the template renders
    markup: ThinkMarkup
    uses_think_tags: bool  # the template itself writes <think> tags

    def message(self, role: str, text: str) -> dict[str, Any]:
        content: Any = text if self.shape == "str" else [{"type": "text", "text": text}]
        return {"role": role, "content": content}

    def raw(self, conversation: Any, **kwargs: Any) -> str:
        """The independent render: jinja straight to a string."""
        return self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, **{**self.kwargs, **kwargs}
        )

    @functools.cached_property
    def has_switch(self) -> bool:
        user = [self.message("user", PROBE_TEXT)]
        return self.raw(user, enable_thinking=True) != self.raw(user, enable_thinking=False)

    def modes(self) -> list[bool | None]:
        """The run's enable_thinking values a correct setup may use with this template."""
        return [None, True, False] if self.has_switch else [None]

    def kw(self, mode: bool | None) -> dict[str, Any]:
        return {**self.kwargs, **({} if mode is None else {"enable_thinking": mode})}


@functools.cache
def setup(name: str) -> Setup:
    text = _text(name)
    tokenizer = build_tokenizer(chat_template=name)
    kwargs = {"bos_token": "<|begin_of_text|>"} if "bos_token" in text else {}
    try:
        probe = probe_conversation(tokenizer, None, kwargs)
    except ValueError as exc:
        pytest.fail(f"{name}: could not render a simple conversation: {exc}")
    shape = "str" if isinstance(probe[0]["content"], str) else "list"
    return Setup(name, tokenizer, kwargs, shape, markup_for_template(text), "<think>" in text)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_templates_are_discovered() -> None:
    assert len(TEMPLATES) >= 20 and "qwen3" in TEMPLATES and "deepseek_r1_distill" in TEMPLATES
    assert GEMMA_TEMPLATES, "the gemma4 family should be found by its markup"


@pytest.mark.parametrize("name", TEMPLATES)
def test_correct_setup_raises_no_alarm(name: str) -> None:
    s = setup(name)
    user = [s.message("user", PROBE_TEXT)]
    for mode in s.modes():
        report = check_template(s.tokenizer, prompts=[user], chat_template_kwargs=s.kw(mode))
        if mode is False and prompt_opens_block(s.raw(user, enable_thinking=False), s.markup):
            continue  # the template ignores the flag: that alarm is right (next test)
        assert not report.blocking, f"{name} enable_thinking={mode}:\n{report.format()}"
        assert not (report.kinds() & {DOUBLE_OPEN, PREFILL_DUPLICATES_TEMPLATE, ROW_PREFILL}), report.format()


@pytest.mark.parametrize("name", TEMPLATES)
def test_ignored_non_thinking_flag_is_caught(name: str) -> None:
    s = setup(name)
    user = [s.message("user", PROBE_TEXT)]
    still_open = prompt_opens_block(s.raw(user, enable_thinking=False), s.markup)
    report = check_template(s.tokenizer, chat_template_kwargs=s.kw(False))
    ignored = [f for f in report.errors if f.kind == THINKING_FLAG_IGNORED]
    assert bool(ignored) is still_open, report.format()
    assert report.prompt_opened(False) is still_open
    assert report.prompt_opened(True) is prompt_opens_block(s.raw(user, enable_thinking=True), s.markup)


@pytest.mark.parametrize("name", TEMPLATES)
def test_assistant_prefill_message_is_caught(name: str) -> None:
    s = setup(name)
    plant = PLANTS[s.markup.name]
    user = s.message("user", PROBE_TEXT)
    conversation = [user, s.message("assistant", plant)]
    if s.markup is GPTOSS:
        with pytest.raises(Exception, match="<\\|channel\\|> tags"):
            s.raw(conversation)
        pytest.skip("not applicable: gptoss refuses channel tags in message content and closes every message")
    dropped = []
    for mode in s.modes():
        clean = s.raw([user], **s.kw(mode))
        planted = s.raw(conversation, **s.kw(mode))
        kept = planted.count(s.markup.open_tag) > clean.count(s.markup.open_tag)
        if s.uses_think_tags:
            assert kept, f"{name}: a <think> template dropped the prefill: {planted!r}"
        report = check_template(s.tokenizer, prompts=[conversation], chat_template_kwargs=s.kw(mode))
        row_errors = [f for f in report.errors if f.where == "dataset rows"]
        if not kept:
            assert not row_errors, report.format()
            dropped.append(mode)
            continue
        assert [f.kind for f in row_errors] == [PREFILL_DUPLICATES_TEMPLATE], f"{name} {mode}:\n{report.format()}"
        if prompt_opens_block(clean, s.markup):
            assert "the template already adds it" in row_errors[0].message
        else:
            assert "continue_final_message" in row_errors[0].message
    if dropped:
        pytest.skip(f"not applicable: the template strips {plant!r} from assistant content (checked: no alarm)")


@pytest.mark.parametrize("name", TEMPLATES)
def test_prefill_appended_to_a_string_prompt(name: str) -> None:
    s = setup(name)
    plant = PLANTS[s.markup.name]
    user = [s.message("user", PROBE_TEXT)]
    for mode in s.modes():
        clean = s.raw(user, **s.kw(mode))
        string_prompt = clean + plant
        report = check_template(s.tokenizer, prompts=[string_prompt], chat_template_kwargs=s.kw(mode))
        assert report.renders["dataset row 0"] == string_prompt  # decode(encode(s)) is exact
        if prompt_opens_block(clean, s.markup):
            assert DOUBLE_OPEN in {f.kind for f in report.errors}, f"{name} {mode}:\n{report.format()}"
            assert "the template already adds it" in report.format()
        else:
            assert not report.blocking, f"{name} {mode}:\n{report.format()}"
            assert ROW_PREFILL in report.kinds()


@pytest.mark.parametrize("name", GEMMA_TEMPLATES)
def test_gemma_thought_channel_after_tool_response(name: str) -> None:
    s = setup(name)
    clean = s.raw(TOOL_CONVERSATION, enable_thinking=True)
    report = check_template(s.tokenizer, prompts=[clean + PLANTS["gemma4"]], chat_template_kwargs=s.kw(True))
    if prompt_opens_block(clean, GEMMA4):  # this revision prefills the thought channel after a tool response
        assert DOUBLE_OPEN in {f.kind for f in report.errors}, report.format()
    else:
        assert not report.blocking and ROW_PREFILL in report.kinds(), report.format()


def test_content_list_templates_get_content_lists() -> None:
    # Templates that drop plain-string content are rendered with content lists, never silently empty.
    for name in TEMPLATES:
        s = setup(name)
        text = s.raw([{"role": "user", "content": PROBE_TEXT}]) if s.shape == "str" else None
        if text is not None:
            assert PROBE_TEXT in text, name
        else:
            assert PROBE_TEXT in s.raw([s.message("user", PROBE_TEXT)]), name
