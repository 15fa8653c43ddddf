"""Render chat templates the way GRPOTrainer does and check them for think-block mistakes.

GRPOTrainer renders prompts in ``_tokenize_prompts``::

    if conversational:
        apply_chat_template(conversation=prompts, tools=tools or None, chat_template=trainer.chat_template,
                            add_generation_prompt=True, tokenize=True, return_dict=True,
                            **trainer.chat_template_kwargs)["input_ids"]
    else:  # strings are not templated at all
        processing_class(text=prompts)["input_ids"]

:func:`tokenize_generation_prompts` repeats exactly that; :func:`render_generation_prompts` decodes the ids with
special tokens kept, which is what the model sees. The analysis itself is :mod:`rl_guards.core.templates`.

::

    report = check_template(tokenizer, prompts=[ds[0]["prompt"]], chat_template_kwargs={"enable_thinking": False})
    print(report.format())
    assert_template(tokenizer, chat_template_kwargs=args.chat_template_kwargs)   # raises TemplateError
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_guards.core.templates import (
    NO_CHAT_TEMPLATE,
    RENDER_FAILED,
    RenderedPrompt,
    TemplateFinding,
    TemplateReport,
    check_rendered_template,
    visible_tail,
)
from rl_guards.core.think_markup import ThinkMarkup, markup_for_template
from rl_guards.errors import TemplateError

PROBE_TEXT = "What is 2 + 2?"  # user turn of the probe conversation


def is_conversational_prompt(prompt: Any) -> bool:
    """TRL's test (``trl.data_utils.is_conversational``): a list of ``{"role": ...}`` messages; strings are not.

    Unlike TRL's, an empty list is False rather than an IndexError.
    """
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], Mapping) and "role" in prompt[0]


def tokenize_generation_prompts(
    tokenizer: Any,
    prompts: Sequence[Any],
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
    *,
    tools: list[Any] | None = None,
) -> list[list[int]]:
    """Prompt ids exactly as ``GRPOTrainer._tokenize_prompts`` makes them (no environments)."""
    prompts = list(prompts)
    if not prompts:
        return []
    if is_conversational_prompt(prompts[0]):
        out = tokenizer.apply_chat_template(
            conversation=prompts,
            tools=tools or None,
            chat_template=chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **(chat_template_kwargs or {}),
        )
        ids = out["input_ids"]
    else:
        ids = tokenizer(text=prompts)["input_ids"]
    return [[int(t) for t in row] for row in ids]


def render_generation_prompts(
    tokenizer: Any,
    prompts: Sequence[Any],
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
    *,
    tools: list[Any] | None = None,
) -> list[str]:
    """The generation prompts as the model sees them: GRPOTrainer's ids, decoded with special tokens kept."""
    ids = tokenize_generation_prompts(tokenizer, prompts, chat_template_kwargs, chat_template, tools=tools)
    return [tokenizer.decode(row, skip_special_tokens=False) for row in ids]


def render_histories(
    tokenizer: Any,
    prompts: Sequence[Any],
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
    *,
    tools: list[Any] | None = None,
) -> list[str | None]:
    """Each conversational prompt rendered without the generation prompt (None for strings or on failure).

    Only used to find where the generation prompt starts in the real render.
    """
    out: list[str | None] = []
    for prompt in prompts:
        if not is_conversational_prompt(prompt):
            out.append(None)
            continue
        try:
            ids = tokenizer.apply_chat_template(
                conversation=prompt,
                tools=tools or None,
                chat_template=chat_template,
                add_generation_prompt=False,
                tokenize=True,
                return_dict=True,
                **(chat_template_kwargs or {}),
            )["input_ids"]
            out.append(tokenizer.decode([int(t) for t in ids], skip_special_tokens=False))
        except Exception:  # a template that cannot end on a user turn: generation start unknown
            out.append(None)
    return out


def probe_conversation(
    tokenizer: Any, chat_template: str | None = None, chat_template_kwargs: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """A one-turn user conversation in the content shape the template renders.

    Plain-string content first; templates that drop it (some VLM templates only read content lists) or fail on
    it get ``[{"type": "text", "text": ...}]``. Raises ValueError when neither shape renders the question.
    """
    shapes: list[Any] = [PROBE_TEXT, [{"type": "text", "text": PROBE_TEXT}]]
    errors = []
    for content in shapes:
        conversation = [{"role": "user", "content": content}]
        try:
            text = render_generation_prompts(tokenizer, [conversation], chat_template_kwargs, chat_template)[0]
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        if PROBE_TEXT in text:
            return conversation
        errors.append(f"content {content!r} rendered without the question: {visible_tail(text, width=80)}")
    raise ValueError("the chat template renders no probe conversation: " + "; ".join(errors))


def _render_pair(
    tokenizer: Any, conversation: Any, kwargs: dict[str, Any], chat_template: str | None, label: str
) -> RenderedPrompt:
    text = render_generation_prompts(tokenizer, [conversation], kwargs, chat_template)[0]
    history = render_histories(tokenizer, [conversation], kwargs, chat_template)[0]
    return RenderedPrompt(text=text, history=history, label=label)


def _template_text(tokenizer: Any, chat_template: str | None) -> str | None:
    text = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    return text if isinstance(text, str) else None


def has_chat_template(tokenizer: Any, chat_template: str | None = None) -> bool:
    """Whether prompts can be templated at all: the trainer's template, or the tokenizer's (one or several named)."""
    return bool(chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None))


PLAIN_TEXT_NOTE = (
    "the tokenizer has no chat template, so the prompts are plain text: TRL passes string prompts to the model "
    "untemplated, exactly as written. The template checks (the generation prompt's think prefill, the thinking switch, "
    "enable_thinking) do not apply; still checked: the dataset prompts themselves for think blocks they open (a "
    "doubled or unclosed <think> prefill in the text)"
)


def check_template(
    tokenizer: Any,
    *,
    prompts: Sequence[Any] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
    markup: ThinkMarkup | None = None,
    rendered_rows: Sequence[RenderedPrompt] = (),
    mixed: bool = False,
) -> TemplateReport:
    """Render a probe conversation with thinking on, off and as the run asks, plus ``prompts``; analyse them.

    Args:
        tokenizer: the trainer's processing class (a tokenizer).
        prompts: dataset prompts (messages or strings), rendered through GRPOTrainer's path.
        chat_template_kwargs: the run's ``GRPOConfig.chat_template_kwargs``.
        chat_template: the template the trainer renders with (``trainer.chat_template``; None = the tokenizer's).
        markup: think markup of the model family; default guessed from the template text.
        rendered_rows: prompts already rendered by the trainer itself (the guard passes these).
        mixed: the run renders rows in both modes (``rl_guards.trl.thinking_mix``).
    """
    kwargs = dict(chat_template_kwargs or {})
    requested = kwargs.get("enable_thinking")
    requested = bool(requested) if requested is not None else None
    base = {k: v for k, v in kwargs.items() if k != "enable_thinking"}
    template_text = _template_text(tokenizer, chat_template)
    markup = markup or markup_for_template(template_text)
    extra: list[TemplateFinding] = []

    probe: list[dict[str, Any]] | None = None
    thinking = non_thinking = run = RenderedPrompt("", None, "probe")
    if not has_chat_template(tokenizer, chat_template):  # plain-text prompts: no conversation to probe with
        extra.append(TemplateFinding(NO_CHAT_TEMPLATE, "info", PLAIN_TEXT_NOTE, "template"))
    else:
        try:
            probe = probe_conversation(tokenizer, chat_template, kwargs)
            thinking = _render_pair(
                tokenizer, probe, {**base, "enable_thinking": True}, chat_template, "thinking probe"
            )
            non_thinking = _render_pair(
                tokenizer, probe, {**base, "enable_thinking": False}, chat_template, "non-thinking probe"
            )
            run = _render_pair(tokenizer, probe, kwargs, chat_template, "run probe")
        except Exception as exc:
            extra.append(TemplateFinding(RENDER_FAILED, "warning", f"probe render failed: {exc}", "probe"))
            thinking = non_thinking = run = RenderedPrompt("", None, "probe")
            probe = None

    family_has_switch = None
    own = getattr(tokenizer, "chat_template", None)
    if probe is not None and chat_template is not None and isinstance(own, str) and own != chat_template:
        try:
            on = render_generation_prompts(tokenizer, [probe], {**base, "enable_thinking": True})[0]
            off = render_generation_prompts(tokenizer, [probe], {**base, "enable_thinking": False})[0]
            family_has_switch = on != off
        except Exception:  # the tokenizer's own template is only a hint
            family_has_switch = None

    rows = list(rendered_rows)
    if prompts:
        try:
            texts = render_generation_prompts(tokenizer, prompts, kwargs, chat_template)
            histories = render_histories(tokenizer, prompts, kwargs, chat_template)
            rows += [
                RenderedPrompt(t, h, f"dataset row {i}") for i, (t, h) in enumerate(zip(texts, histories, strict=True))
            ]
        except Exception as exc:
            extra.append(
                TemplateFinding(
                    RENDER_FAILED, "blocking", f"dataset prompts do not render: {type(exc).__name__}: {exc}", "rows"
                )
            )

    return check_rendered_template(
        thinking,
        non_thinking,
        run=run if probe is not None else None,
        rows=rows,
        requested_thinking=requested,
        family_has_switch=family_has_switch,
        markup=markup,
        mixed=mixed,
        extra_findings=extra,
    )


def template_error_text(report: TemplateReport) -> str:
    """The message of a TemplateError: every blocking finding with its rendered text and fix."""
    lines = [f"the chat template is wrong for this run ({len(report.errors)} blocking finding(s)):"]
    lines += [f"- {f.kind} ({f.where}): {f.message}" for f in report.errors]
    return "\n".join(lines)


def assert_template(
    tokenizer: Any,
    *,
    prompts: Sequence[Any] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
    markup: ThinkMarkup | None = None,
) -> TemplateReport:
    """:func:`check_template`, raising :class:`~rl_guards.errors.TemplateError` on a blocking finding."""
    report = check_template(
        tokenizer,
        prompts=prompts,
        chat_template_kwargs=chat_template_kwargs,
        chat_template=chat_template,
        markup=markup,
    )
    if report.blocking:
        raise TemplateError(template_error_text(report), guard="template")
    return report
