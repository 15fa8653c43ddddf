"""A tinker-cookbook renderer checked against the tokenizer's own chat template, for think blocks.

The cookbook renders prompts with its own renderers (``renderer.build_generation_prompt(messages)``), not with the
tokenizer's chat template. Where the two disagree on the think block of the generation prompt, a policy trained
through the renderer is served (vLLM, ``apply_chat_template``) a prompt of another shape: a renderer that drops the
closed empty block a non-thinking template adds, or opens one the template does not. This renders a probe
conversation both ways in the renderer's own mode and compares what the generation prompt does with the block.

The renderer is duck-typed (``build_generation_prompt(messages) -> ModelInput`` with ``to_ints()``, and the
attributes ``disables_thinking`` / ``frames_thinking`` where it has them): nothing here imports the cookbook.
"""

from __future__ import annotations

from typing import Any

from rl_guards.chat.template_check import PROBE_TEXT, render_generation_prompts
from rl_guards.core.templates import (
    RenderedPrompt,
    TemplateFinding,
    extract_empty_think,
    scan_prompt,
    visible_tail,
)
from rl_guards.core.think_markup import THINK, ThinkMarkup

RENDERER_MISMATCH = "renderer_mismatch"  # the renderer's generation prompt treats the think block unlike the template
RENDERER_PARSE = "renderer_parse"  # parse_response drops, doubles or leaves the think block in the answer text
PARSE_THINKING = "2 plus 2 is 4."  # the reasoning of the probe response
PARSE_ANSWER = "4"


def renderer_thinking(renderer: Any) -> bool:
    """The mode a renderer prompts in: False when its generation prompt closes the block (``disables_thinking``)
    or it never frames thinking (``frames_thinking = False``: instruct renderers), else True."""
    if getattr(renderer, "disables_thinking", False):
        return False
    return bool(getattr(renderer, "frames_thinking", True))


def render_with(renderer: Any, tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    """The generation prompt the renderer builds for ``messages``, decoded with special tokens kept."""
    ids = [int(t) for t in renderer.build_generation_prompt(messages).to_ints()]
    return tokenizer.decode(ids, skip_special_tokens=False)


def renderer_probe(renderer: Any, tokenizer: Any) -> RenderedPrompt:
    """The probe conversation as the renderer renders it."""
    return RenderedPrompt(render_with(renderer, tokenizer, [{"role": "user", "content": PROBE_TEXT}]), None,
                          f"renderer {type(renderer).__name__} probe")  # fmt: skip


def _block(text: str, markup: ThinkMarkup) -> str:
    if scan_prompt(text, markup).opened:
        return "opens a think block"
    if extract_empty_think(text, markup) is not None:
        return "ends with a closed empty think block"
    return "has no think block"


def compare_renderer(
    renderer: Any, tokenizer: Any, markup: ThinkMarkup = THINK
) -> tuple[RenderedPrompt | None, list[TemplateFinding]]:
    """The renderer's probe render, and a ``renderer_mismatch`` error when its generation prompt treats the think
    block unlike the tokenizer's chat template with ``enable_thinking`` set to the renderer's mode."""
    try:
        probe = renderer_probe(renderer, tokenizer)
    except Exception as exc:
        return None, [TemplateFinding("render_failed", "warning", f"the renderer cannot render a probe: {exc}",
                                      f"renderer {type(renderer).__name__}")]  # fmt: skip
    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        return probe, []
    thinking = renderer_thinking(renderer)
    try:
        template = render_generation_prompts(
            tokenizer, [[{"role": "user", "content": PROBE_TEXT}]], {"enable_thinking": thinking}
        )[0]
    except Exception:  # a tokenizer template that cannot render the probe: nothing to compare with
        return probe, []
    ours, theirs = _block(probe.text, markup), _block(template, markup)
    if ours == theirs:
        return probe, []
    name = type(renderer).__name__
    message = (
        f"the renderer {name} (thinking={thinking}) builds a generation prompt that {ours}, while the tokenizer's own "
        f"chat template with enable_thinking={thinking} {theirs}. Renderer: {visible_tail(probe.text, width=80)}; "
        f"template: {visible_tail(template, width=80)}. The policy is trained on one prompt shape and served "
        "(vLLM, apply_chat_template) the other. Fix: use the renderer the cookbook recommends for this model "
        "(tinker_cookbook.model_info.get_recommended_renderer_name), or a template that matches the renderer"
    )
    return probe, [TemplateFinding(RENDERER_MISMATCH, "blocking", message, f"renderer {name}")]


def _parts(message: Any) -> tuple[str, list[str]]:
    """A parsed message's answer text and its thinking parts (the cookbook's content: a string or typed parts)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content, []
    text, thinking = [], []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "thinking":
            thinking.append(str(part.get("thinking", "")))
        elif isinstance(part, dict) and part.get("type") == "text":
            text.append(str(part.get("text", "")))
    return "".join(text), thinking


def parse_round_trip(
    renderer: Any, tokenizer: Any, prompt: RenderedPrompt | None, markup: ThinkMarkup = THINK
) -> list[TemplateFinding]:
    """A ``renderer_parse`` error when ``renderer.parse_response`` on a well-formed response in the renderer's mode
    (thinking: a think block then the answer, starting inside the block when the prompt opens it) leaves a think tag
    in the answer text, or drops or doubles the reasoning: an env grading the parsed text then grades the thinking,
    or a response the policy wrote well is scored as malformed."""
    stops = [s for s in _stops(renderer) if isinstance(s, int)]
    if not stops:  # string stops (role_colon): no token to end the probe response with
        return []
    thinking = renderer_thinking(renderer)
    opened = prompt is not None and scan_prompt(prompt.text, markup).opened
    if thinking:
        body = ("" if opened else f"{markup.open_tag}\n") + f"{PARSE_THINKING}\n{markup.close_tag}\n\n{PARSE_ANSWER}"
    else:
        body = PARSE_ANSWER
    name = type(renderer).__name__
    try:
        tokens = [int(t) for t in tokenizer.encode(body, add_special_tokens=False)] + [stops[0]]
        message, _ = renderer.parse_response(tokens)
        text, reasoning = _parts(message)
    except Exception as exc:
        return [TemplateFinding(RENDERER_PARSE, "blocking", f"{name}.parse_response fails on {body!r} + its stop "
                                f"token: {type(exc).__name__}: {exc}", f"renderer {name}")]  # fmt: skip
    wrong = []
    if markup.open_tag in text or markup.close_tag in text:
        wrong.append("leaves think tags in the answer text")
    if text.strip() != PARSE_ANSWER:
        wrong.append(f"gives the answer text {text!r} (expected {PARSE_ANSWER!r})")
    if thinking and sum(PARSE_THINKING in r for r in reasoning) != 1:
        wrong.append(f"gives {len(reasoning)} thinking part(s) {reasoning!r} (expected the reasoning once)")
    if not wrong:
        return []
    message_text = (
        f"{name}.parse_response (thinking={thinking}, prompt {'opens' if opened else 'does not open'} the block) on "
        f"{body!r} + its stop token {'; '.join(wrong)}: an env that grades the parsed text (a ProblemEnv's "
        "get_text_content) then grades the thinking, or scores a well-formed answer as wrong. Fix: parse with the "
        "renderer that built the prompt, in its mode"
    )
    return [TemplateFinding(RENDERER_PARSE, "blocking", message_text, f"renderer {name}")]


def _stops(renderer: Any) -> list[Any]:
    try:
        return list(renderer.get_stop_sequences())
    except Exception:
        return []


__all__ = [
    "RENDERER_MISMATCH",
    "RENDERER_PARSE",
    "compare_renderer",
    "parse_round_trip",
    "render_with",
    "renderer_probe",
    "renderer_thinking",
]
