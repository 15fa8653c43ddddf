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
    return probe, [TemplateFinding(RENDERER_MISMATCH, "error", message, f"renderer {name}")]


__all__ = ["RENDERER_MISMATCH", "compare_renderer", "render_with", "renderer_probe", "renderer_thinking"]
