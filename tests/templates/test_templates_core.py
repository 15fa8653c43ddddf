"""rl_guards.core.templates on hand-written renders: scanning, generation start, empty block, findings."""

from __future__ import annotations

import pytest

from rl_guards.core.templates import (
    DOUBLE_OPEN,
    FLAG_NO_EFFECT,
    PREFILL_DUPLICATES_TEMPLATE,
    ROW_PREFILL,
    THINKING_FLAG_IGNORED,
    RenderedPrompt,
    check_rendered_template,
    extract_empty_think,
    generation_start,
    scan_prompt,
    visible_tail,
)
from rl_guards.core.think_markup import GEMMA4, GPTOSS

U = "<|im_start|>user\nQ?<|im_end|>\n"  # a ChatML user turn
H = "<|im_start|>assistant\n"  # the assistant header


@pytest.mark.parametrize(
    ("text", "history", "unclosed", "in_history", "opened"),
    [
        (U + H, U, 0, 0, False),  # qwen3 thinking on: no prefill
        (U + H + "<think>\n", U, 1, 0, True),  # qwen3_5_think prefill
        (U + H + "<think>\n\n</think>\n\n", U, 0, 0, False),  # qwen3 non-thinking
        (U + H + "<think>\n<think>\n", U, 2, 0, True),  # double open in the generation prompt
        # assistant prefill message closed as a turn, then the template's own prefill
        (U + H + "<think>\n<|im_end|>\n" + H + "<think>\n", U + H + "<think>\n<|im_end|>\n", 2, 1, True),
        # qwen3 renders an empty block before the prefill content, then a fresh header
        (
            U + H + "<think>\n\n</think>\n\n<think>\n<|im_end|>\n" + H,
            U + H + "<think>\n\n</think>\n\n<think>\n<|im_end|>\n",
            1,
            1,
            False,
        ),
        (U + H + "<think>\n", None, 1, 0, True),  # string prompt: history unknown
        ("a </think> b", None, 0, 0, False),  # stray close is not an open
    ],
)
def test_scan_prompt_table(text: str, history: str | None, unclosed: int, in_history: int, opened: bool) -> None:
    scan = scan_prompt(text, history=history)
    assert len(scan.unclosed) == unclosed
    assert len(scan.history_unclosed) == in_history
    assert scan.opened is opened


def test_stray_close_recorded() -> None:
    scan = scan_prompt("x</think>y<think>")
    assert scan.stray_closes == (1,) and len(scan.unclosed) == 1


def test_generation_start_snaps_to_a_cut_tag() -> None:
    # The common prefix ends inside "<think>": the tag belongs to the generation prompt.
    assert generation_start("ab<think>\n", "ab<thx", tags=("<think>",)) == 2
    assert generation_start("abc", None) == 0
    assert generation_start(U + H, U) == len(U)


@pytest.mark.parametrize(
    ("text", "markup", "expected"),
    [
        (U + H + "<think>\n\n</think>\n\n", None, "<think>\n\n</think>\n\n"),
        ("<|assistant|>\n<think></think>", None, "<think></think>"),
        (U + H + "<think>\n", None, None),
        (U + H, None, None),
        (U + H + "<think>\nx\n</think>\n\n", None, None),  # not empty
        ("<|turn>model\n<|channel><channel|>", GEMMA4, "<|channel><channel|>"),
    ],
)
def test_extract_empty_think(text: str, markup: object, expected: str | None) -> None:
    kwargs = {"markup": markup} if markup is not None else {}
    assert extract_empty_think(text, **kwargs) == expected


def test_empty_think_must_be_in_the_generation_prompt() -> None:
    text = U + H + "<think>\n\n</think>\n\n"
    assert extract_empty_think(text, history=text) is None


def test_visible_tail_shows_whitespace() -> None:
    assert visible_tail("a\n\nb") == "'a\\n\\nb'"
    assert visible_tail("x" * 500, width=10).startswith("…'xxxxxxxxxx")


def _probe(on: str, off: str) -> tuple[RenderedPrompt, RenderedPrompt]:
    return (
        RenderedPrompt(U + on, U, "thinking probe"),
        RenderedPrompt(U + off, U, "non-thinking probe"),
    )


QWEN3 = _probe(H, H + "<think>\n\n</think>\n\n")
QWEN35 = _probe(H + "<think>\n", H + "<think>\n\n</think>\n\n")
DEEPSEEK = _probe(H + "<think>\n", H + "<think>\n")
NOSWITCH = _probe(H, H)


@pytest.mark.parametrize(
    ("probes", "requested", "family", "kinds", "blocking"),
    [
        (QWEN3, None, None, set(), False),
        (QWEN3, True, None, set(), False),
        (QWEN3, False, None, set(), False),
        (QWEN35, True, None, set(), False),
        (DEEPSEEK, None, None, {THINKING_FLAG_IGNORED}, False),  # info: run does not ask for non-thinking
        (DEEPSEEK, False, None, {THINKING_FLAG_IGNORED}, True),
        (NOSWITCH, None, None, set(), False),
        (NOSWITCH, False, None, {FLAG_NO_EFFECT}, False),
        (NOSWITCH, False, True, {THINKING_FLAG_IGNORED}, True),  # trainer template dropped the family's switch
        (NOSWITCH, None, True, {THINKING_FLAG_IGNORED}, False),
    ],
)
def test_probe_verdicts(
    probes: tuple[RenderedPrompt, RenderedPrompt],
    requested: bool | None,
    family: bool | None,
    kinds: set[str],
    blocking: bool,
) -> None:
    report = check_rendered_template(*probes, requested_thinking=requested, family_has_switch=family)
    assert report.kinds() == kinds
    assert report.blocking is blocking


def test_report_facts() -> None:
    report = check_rendered_template(*QWEN35)
    assert report.thinking_prefill and not report.non_thinking_open and report.has_switch
    assert report.prompt_opened(True) and not report.prompt_opened(False)
    assert report.empty_think == "<think>\n\n</think>\n\n"
    assert "empty think block" in report.format()


def test_prefill_message_on_prefilling_template_is_blocking_with_fix() -> None:
    history = U + H + "<think>\n<|im_end|>\n"
    row = RenderedPrompt(history + H + "<think>\n", history, "dataset row 0")
    report = check_rendered_template(*QWEN35, rows=[row], requested_thinking=True)
    (finding,) = report.errors
    assert finding.kind == PREFILL_DUPLICATES_TEMPLATE
    assert "the template already adds it" in finding.message
    assert "<think>\\n<|im_end|>\\n<|im_start|>assistant\\n<think>\\n'" in finding.message  # visible whitespace


def test_prefill_message_on_plain_template_explains_the_closed_turn() -> None:
    history = U + H + "<think>\n\n</think>\n\n<think>\n<|im_end|>\n"
    row = RenderedPrompt(history + H, history, "dataset row 0")
    report = check_rendered_template(*QWEN3, rows=[row])
    (finding,) = report.errors
    assert finding.kind == PREFILL_DUPLICATES_TEMPLATE and "continue_final_message" in finding.message


def test_string_rows_double_open_and_single_prefill() -> None:
    double = RenderedPrompt(U + H + "<think>\n<think>\n", None, "dataset row 0")
    single = RenderedPrompt(U + H + "<think>\n", None, "dataset row 1")
    report = check_rendered_template(*QWEN35, rows=[double, double, single], requested_thinking=True)
    assert [f.kind for f in report.errors] == [DOUBLE_OPEN]
    assert report.errors[0].message.startswith("2/3 rendered dataset prompts")
    # On qwen3 (no prefill) a single appended <think> is a legitimate prefill: info only.
    report = check_rendered_template(*QWEN3, rows=[single], requested_thinking=True)
    assert not report.blocking and report.kinds() == {ROW_PREFILL}


def test_probe_double_open_counts_only_in_the_used_mode() -> None:
    on, off = _probe(H + "<think><think>", H + "<think>\n\n</think>\n\n")
    assert check_rendered_template(on, off, requested_thinking=True).blocking
    report = check_rendered_template(on, off, requested_thinking=False)
    assert not report.blocking and DOUBLE_OPEN in report.kinds()


def test_other_markups() -> None:
    # gemma4: the template prefills the thought channel after a tool response; a second one is a double open.
    tool = "<|turn>model\n<|tool_response>4<tool_response|><|channel>thought\n"
    on, off = RenderedPrompt(tool, None), RenderedPrompt("<|turn>model\n", None)
    report = check_rendered_template(on, off, rows=[RenderedPrompt(tool + "<|channel>thought\n", None)], markup=GEMMA4)
    assert report.thinking_prefill and DOUBLE_OPEN in report.kinds()
    # gptoss: every message closes with <|end|>, so closed analysis messages never count.
    text = "<|start|>assistant<|channel|>analysis<|message|>x<|end|><|start|>assistant"
    report = check_rendered_template(RenderedPrompt(text), RenderedPrompt(text), markup=GPTOSS)
    assert not report.findings and not report.thinking_prefill


def test_mixed_runs_use_both_modes() -> None:
    assert check_rendered_template(*DEEPSEEK, mixed=True).blocking  # per-row False cannot turn thinking off
    report = check_rendered_template(*NOSWITCH, mixed=True)
    assert not report.blocking and [f.severity for f in report.findings] == ["warning"]
    assert report.findings[0].kind == FLAG_NO_EFFECT
    on, off = _probe(H, H + "<think><think>")
    assert not check_rendered_template(on, off).blocking
    assert check_rendered_template(on, off, mixed=True).blocking


def test_failed_probe_renders_make_no_flag_claims() -> None:
    empty = RenderedPrompt("", None, "probe")
    assert not check_rendered_template(empty, empty, requested_thinking=False, family_has_switch=True).findings
