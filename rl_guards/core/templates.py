"""Rendered chat-template analysis: double think opens, prefills, ignored thinking flags, the empty-think block.

Pure string work: the caller renders (``rl_guards.chat.template_check`` does it through GRPOTrainer's own path)
and hands over the rendered strings. A think block is the span from an open tag to the next close tag; blocks
never nest, so a prompt that ends with two unclosed opens is always wrong.

What a rendered prompt can tell::

    <|im_start|>assistant\\n<think>\\n                 template prefills the block (qwen3_5_think, deepseek_r1_distill)
    <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n     closed empty block: qwen3 with enable_thinking=False
    ...<think>\\n<|im_end|>\\n<|im_start|>assistant\\n     an assistant prefill message, closed as a finished turn
    ...<think>\\n<think>\\n                            double open

Knowing where the generation prompt starts (``RenderedPrompt.history``: the same conversation rendered
without the generation prompt) separates an open left in an earlier turn from one the template adds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rl_guards.core.severity import BLOCKING, INFO, severity_of, worst
from rl_guards.core.severity import SEVERITIES as SCALE
from rl_guards.core.think_markup import THINK, ThinkMarkup, markup_for_template

SEVERITIES: tuple[str, ...] = tuple(reversed(SCALE))  # most severe first: blocking, warning, info

# Finding kinds.
DOUBLE_OPEN = "double_open"  # two or more unclosed opens at the end of a prompt
PREFILL_DUPLICATES_TEMPLATE = "prefill_duplicates_template"  # an unclosed open in an earlier, finished turn
THINKING_FLAG_IGNORED = "thinking_flag_ignored"  # enable_thinking does not do what the run asks of it
FLAG_NO_EFFECT = "flag_no_effect"  # enable_thinking given, template has no thinking switch (harmless)
ROW_PREFILL = "row_prefill"  # dataset prompts open a block the template does not open in this mode
RENDER_FAILED = "render_failed"  # the adapter could not render a probe or a row
NO_CHAT_TEMPLATE = "no_chat_template"  # no template at all: plain-text prompts, the template checks do not apply

TAIL_CHARS = 160  # characters of rendered text shown in a message


@dataclass(frozen=True)
class RenderedPrompt:
    """One rendered prompt: ``text`` with the generation prompt; ``history`` without it (None when unknown)."""

    text: str
    history: str | None = None
    label: str = "prompt"


@dataclass(frozen=True)
class PromptScan:
    """Where a rendered prompt's think blocks open and close."""

    text: str
    generation_start: int  # index where the generation prompt begins (0 when unknown)
    unclosed: tuple[int, ...]  # positions of opens still unclosed at the end of the text
    stray_closes: tuple[int, ...]  # closes with no open before them

    @property
    def history_unclosed(self) -> tuple[int, ...]:
        """Unclosed opens in earlier (finished) turns."""
        return tuple(p for p in self.unclosed if p < self.generation_start)

    @property
    def generation_unclosed(self) -> tuple[int, ...]:
        """Unclosed opens the generation prompt itself adds."""
        return tuple(p for p in self.unclosed if p >= self.generation_start)

    @property
    def opened(self) -> bool:
        """The generation prompt leaves a think block open: the model starts inside it."""
        return bool(self.generation_unclosed)


@dataclass(frozen=True)
class TemplateFinding:
    """One thing wrong (or worth knowing) about the rendered template."""

    kind: str
    severity: str  # "blocking": corrupts the run; "warning": likely wrong; "info": worth knowing
    message: str
    where: str = ""  # which render, e.g. "thinking probe", "dataset rows"

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", severity_of(self.severity, default=self.severity))  # "error" too
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


@dataclass
class TemplateReport:
    """What the rendered template does with think blocks, and what is wrong with it."""

    markup: ThinkMarkup
    thinking_prefill: bool  # thinking-mode generation prompt leaves a block open
    non_thinking_open: bool  # non-thinking generation prompt leaves a block open
    has_switch: bool  # thinking and non-thinking renders differ
    empty_think: str | None  # the closed empty block the non-thinking generation prompt ends with, verbatim
    requested_thinking: bool | None  # the run's enable_thinking (None: not set, template default)
    run_opened: bool | None = None  # the run's own generation prompt leaves a block open (None: not rendered)
    findings: list[TemplateFinding] = field(default_factory=list)
    renders: dict[str, str] = field(default_factory=dict)  # label -> rendered text

    def prompt_opened(self, thinking: bool) -> bool:
        """Does the generation prompt leave a think block open in that mode."""
        return self.thinking_prefill if thinking else self.non_thinking_open

    @property
    def errors(self) -> list[TemplateFinding]:
        return [f for f in self.findings if f.severity == BLOCKING]

    @property
    def blocking(self) -> bool:
        """Any finding that corrupts training."""
        return bool(self.errors)

    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}

    def format(self) -> str:
        """A readable multi-line verdict (for the CLI and logs)."""
        lines = [
            f"markup: {self.markup.name} ({self.markup.open_tag!r} ... {self.markup.close_tag!r})",
            f"thinking switch: {'yes' if self.has_switch else 'no'}",
            f"generation prompt opens a block: thinking={self.thinking_prefill} non-thinking={self.non_thinking_open}",
            f"empty think block (non-thinking): {self.empty_think!r}",
        ]
        if not self.findings:
            lines.append("verdict: ok, no findings")
        else:
            lines.append("verdict: " + worst(f.severity for f in self.findings))
            for f in self.findings:
                lines.append(f"  [{f.severity}] {f.kind} ({f.where}): {f.message}")
        return "\n".join(lines)


# ----- scanning ----------------------------------------------------------------------------------------------
def _positions(text: str, tag: str) -> list[int]:
    out, start = [], 0
    while True:
        i = text.find(tag, start)
        if i < 0:
            return out
        out.append(i)
        start = i + len(tag)


def _tag_events(text: str, open_tag: str, close_tag: str) -> list[tuple[int, bool]]:
    """(position, is_open) of every tag, in order; an open inside a close occurrence is not an open."""
    closes = _positions(text, close_tag)
    spans = [(c, c + len(close_tag)) for c in closes]
    opens = [o for o in _positions(text, open_tag) if not any(a <= o < b for a, b in spans)]
    return sorted([(o, True) for o in opens] + [(c, False) for c in closes])


def generation_start(text: str, history: str | None, *, tags: Sequence[str] = ()) -> int:
    """Index where the generation prompt begins: the end of the common prefix of ``text`` and ``history``.

    A tag cut by that boundary counts as part of the generation prompt.
    """
    if history is None:
        return 0
    n = min(len(text), len(history))
    i = 0
    while i < n and text[i] == history[i]:
        i += 1
    for tag in tags:
        for p in _positions(text, tag):
            if p < i < p + len(tag):
                i = p
    return i


def scan_prompt(text: str, markup: ThinkMarkup = THINK, *, history: str | None = None) -> PromptScan:
    """Walk the tags of a rendered prompt; unclosed opens are what the model would start inside."""
    open_tag, close_tag = markup.open_tag, markup.close_tag
    start = generation_start(text, history, tags=(open_tag, close_tag))
    stack: list[int] = []
    stray: list[int] = []
    for pos, is_open in _tag_events(text, open_tag, close_tag):
        if is_open:
            stack.append(pos)
        elif stack:
            stack.pop()
        else:
            stray.append(pos)
    return PromptScan(text=text, generation_start=start, unclosed=tuple(stack), stray_closes=tuple(stray))


def extract_empty_think(text: str, markup: ThinkMarkup = THINK, *, history: str | None = None) -> str | None:
    """The closed empty block a generation prompt ends with, verbatim (``'<think>\\n\\n</think>\\n\\n'``), or None."""
    open_tag, close_tag = markup.open_tag, markup.close_tag
    start = generation_start(text, history, tags=(open_tag, close_tag))
    match = re.search(re.escape(open_tag) + r"\s*" + re.escape(close_tag) + r"\s*\Z", text)
    if match is None or match.start() < start:
        return None
    return match.group(0)


def visible_tail(text: str, start: int | None = None, width: int = TAIL_CHARS) -> str:
    """``repr`` of the end of ``text`` (from ``start`` if given), so whitespace and newlines show."""
    begin = max(0, len(text) - width) if start is None else max(0, min(start, len(text) - width))
    return ("…" if begin > 0 else "") + repr(text[begin:])


# ----- analysis ----------------------------------------------------------------------------------------------
def _fix_for(kind: str, template_opens: bool, tag: str) -> str:
    if kind == PREFILL_DUPLICATES_TEMPLATE:
        if template_opens:
            return f"remove the {tag!r} prefill from your prompts: the template already adds it"
        return (
            "remove the assistant prefill message: TRL renders prompts with add_generation_prompt=True and never "
            "continue_final_message, so the prefill is closed as a finished turn and a new assistant turn opens; "
            "choose thinking with chat_template_kwargs={'enable_thinking': ...} instead"
        )
    if template_opens:
        return f"remove the {tag!r} you add to the prompt: the template already adds it"
    return f"keep a single {tag!r} at the end of the prompt"


def _describe(scan: PromptScan, kind: str, open_tag: str, template_opens: bool) -> str:
    first = scan.unclosed[0]
    if kind == PREFILL_DUPLICATES_TEMPLATE:
        what = (
            f"an unclosed {open_tag!r} sits in an earlier, finished turn before the generation prompt"
            f" ({len(scan.unclosed)} unclosed in all)"
        )
    else:
        what = f"{len(scan.unclosed)} unclosed {open_tag!r} at the end of the prompt (think blocks do not nest)"
    tail = visible_tail(scan.text, start=max(0, first - 40))
    return f"{what}. Rendered: {tail}. Fix: {_fix_for(kind, template_opens, open_tag)}"


def _open_finding(scan: PromptScan) -> str | None:
    if scan.history_unclosed:
        return PREFILL_DUPLICATES_TEMPLATE
    if len(scan.unclosed) >= 2:
        return DOUBLE_OPEN
    return None


def check_rendered_template(
    thinking: RenderedPrompt,
    non_thinking: RenderedPrompt,
    *,
    run: RenderedPrompt | None = None,
    rows: Sequence[RenderedPrompt] = (),
    requested_thinking: bool | None = None,
    family_has_switch: bool | None = None,
    markup: ThinkMarkup | None = None,
    template_text: str | None = None,
    mixed: bool = False,
    extra_findings: Sequence[TemplateFinding] = (),
) -> TemplateReport:
    """Analyse a template from its renders.

    Args:
        thinking / non_thinking: a plain probe conversation rendered with ``enable_thinking`` True / False.
        run: the probe rendered with the run's own template kwargs (what the trainer really renders).
        rows: dataset prompts rendered through the trainer's path (with the run's kwargs).
        requested_thinking: the run's ``enable_thinking`` (None when the run does not set it).
        family_has_switch: the model family's own template reacts to ``enable_thinking`` (e.g. the tokenizer's
            template, when the trainer renders with another one). None: unknown.
        markup: the family's think markup; default guessed from ``template_text`` (``<think>`` otherwise).
        mixed: rows render in both modes (a per-row thinking flag), so both probes are used by the run.
    """
    if markup is None:
        markup = markup_for_template(template_text)
    open_tag = markup.open_tag
    s_on = scan_prompt(thinking.text, history=thinking.history, markup=markup)
    s_off = scan_prompt(non_thinking.text, history=non_thinking.history, markup=markup)
    s_run = scan_prompt(run.text, history=run.history, markup=markup) if run is not None else None
    has_switch = thinking.text != non_thinking.text
    findings: list[TemplateFinding] = list(extra_findings)
    renders = {thinking.label: thinking.text, non_thinking.label: non_thinking.text}
    if run is not None:
        renders[run.label] = run.text

    # The mode the run uses: explicit flag, else the run render decides (template default).
    if requested_thinking is not None:
        used_opens = s_on.opened if requested_thinking else s_off.opened
    else:
        used_opens = s_run.opened if s_run is not None else s_on.opened

    # (a, b) opens in the probes: a template that double-opens by itself. Error only in the mode the run uses.
    probes: list[tuple[RenderedPrompt, PromptScan, bool]] = [
        (thinking, s_on, mixed or requested_thinking is True or (requested_thinking is None and run is None)),
        (non_thinking, s_off, mixed or requested_thinking is False),
    ]
    if run is not None and s_run is not None and run.text not in (thinking.text, non_thinking.text):
        probes.append((run, s_run, True))
    elif run is not None:  # the run renders like one of the probes: that probe is the used one
        probes = [(r, s, used or r.text == run.text) for r, s, used in probes]
    for rendered, scan, used in probes:
        kind = _open_finding(scan)
        if kind is not None:
            message = _describe(scan, kind, open_tag, scan.opened)
            findings.append(TemplateFinding(kind, BLOCKING if used else INFO, message, rendered.label))

    # (b) dataset rows rendered through the trainer: one finding per kind, showing the first offender.
    by_kind: dict[str, list[PromptScan]] = {}
    differs = 0
    for row in rows:
        scan = scan_prompt(row.text, history=row.history, markup=markup)
        renders.setdefault(row.label, row.text)
        kind = _open_finding(scan)
        if kind is not None:
            by_kind.setdefault(kind, []).append(scan)
        elif scan.opened != used_opens:
            differs += 1
    # "the template already adds it" only of a template whose generation prompt opens a block in some mode (with
    # no template, or one that never opens, the row's own text holds every open)
    template_opens = s_on.opened or s_off.opened or (s_run is not None and s_run.opened)
    for kind, scans in by_kind.items():
        message = f"{len(scans)}/{len(rows)} rendered dataset prompts: " + _describe(
            scans[0], kind, open_tag, scans[0].opened and template_opens
        )
        findings.append(TemplateFinding(kind, BLOCKING, message, "dataset rows"))
    if differs:
        findings.append(
            TemplateFinding(
                ROW_PREFILL,
                "info",
                f"{differs}/{len(rows)} dataset prompts {'do not open' if used_opens else 'open'} a think block "
                f"although the template's generation prompt {'does' if used_opens else 'does not'} in this mode; "
                f"rewards that look for {open_tag!r} must know",
                "dataset rows",
            )
        )

    # (c) thinking flag ignored (nothing to say when the probes did not render).
    if s_off.opened:
        severity = BLOCKING if requested_thinking is False or mixed else INFO
        findings.append(
            TemplateFinding(
                THINKING_FLAG_IGNORED,
                severity,
                f"enable_thinking=False still leaves {open_tag!r} open: the model thinks anyway. "
                f"Rendered: {visible_tail(non_thinking.text, width=80)}. "
                "Fix: use a template with a working switch, or train this model in thinking mode",
                non_thinking.label,
            )
        )
    if not has_switch and (thinking.text or non_thinking.text):
        if family_has_switch:
            severity = BLOCKING if requested_thinking is not None or mixed else INFO
            findings.append(
                TemplateFinding(
                    THINKING_FLAG_IGNORED,
                    severity,
                    "the template the trainer renders with ignores enable_thinking (thinking and non-thinking renders "
                    f"are identical: {visible_tail(thinking.text, width=80)}) although the model's own template "
                    "has the switch. Fix: render with the model's template, or one that keeps the switch",
                    thinking.label,
                )
            )
        elif (requested_thinking is not None or mixed) and not s_off.opened:
            findings.append(
                TemplateFinding(
                    FLAG_NO_EFFECT,
                    "warning" if mixed else "info",
                    f"enable_thinking={'per row' if mixed else requested_thinking} has no effect: this template has "
                    "no thinking switch",
                    thinking.label,
                )
            )

    return TemplateReport(
        markup=markup,
        thinking_prefill=s_on.opened,
        non_thinking_open=s_off.opened,
        has_switch=has_switch,
        empty_think=extract_empty_think(non_thinking.text, history=non_thinking.history, markup=markup),
        requested_thinking=requested_thinking,
        run_opened=s_run.opened if s_run is not None else None,
        findings=findings,
        renders=renders,
    )
