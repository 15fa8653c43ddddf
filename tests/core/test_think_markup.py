"""Think-markup scanner: hand-written table, token-id table, properties, real templates and tokenizer."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_guards.core import think_markup as tm
from rl_guards.core.think_markup import (
    ALL_CODES,
    GEMMA4,
    GPTOSS,
    MALFORMED,
    THINK,
    MarkupVerdict,
    ThinkMarkup,
    anomalies_for_mode,
    markup_for_template,
    prompt_opens_block,
    scan,
    strip_thinking,
)

UO, SC, NO, DO = tm.UNCLOSED_OPEN, tm.STRAY_CLOSE, tm.NESTED_OPEN, tm.DOUBLE_OPEN
MB, TA, TB, EA = tm.MULTIPLE_BLOCKS, tm.TAG_IN_ANSWER, tm.TEXT_BEFORE_OPEN, tm.EMPTY_ANSWER
PT, ET, IM = tm.PARTIAL_TAG, tm.EMPTY_THINKING, tm.IDS_TEXT_MISMATCH

# (id, text, prompt_opened, kind, anomalies, answer)
THINK_CASES = [
    # no markup
    ("plain", "The answer is 4.", False, "answer", (), "The answer is 4."),
    ("empty", "", False, "answer", (), ""),
    ("whitespace_only", "  \n\t ", False, "answer", (), ""),
    (
        "prose_think_word",
        "I think so. Let me think about it.",
        False,
        "answer",
        (),
        "I think so. Let me think about it.",
    ),
    ("other_word_tag", "I think <thinker> is fine", False, "answer", (), "I think <thinker> is fine"),
    ("underscore_word", "<think_tank> met", False, "answer", (), "<think_tank> met"),
    ("spaced_lt_prose", "a < think b", False, "answer", (), "a < think b"),
    ("html", "<table><th>x</th></table>", False, "answer", (), "<table><th>x</th></table>"),
    ("ends_with_lt", "3 <", False, "answer", (), "3 <"),
    ("ends_with_lt_slash", "a </", False, "answer", (), "a </"),
    ("ends_with_short_prefix", "a <th", False, "answer", (), "a <th"),
    # well formed
    ("well_formed", "<think>2+2=4</think>\n\nThe answer is 4.", False, "thinking", (), "The answer is 4."),
    ("well_formed_newlines", "<think>\nreason\n</think>\n\nfour", False, "thinking", (), "four"),
    ("leading_whitespace", "\n <think>r</think>a", False, "thinking", (), "a"),
    ("crlf", "<think>\r\na\r\n</think>\r\nans", False, "thinking", (), "ans"),
    ("unicode", "<think>思考 🤔</think>答案 ✓", False, "thinking", (), "答案 ✓"),
    ("surrogates", "<think>\ud800</think>\udfff ok", False, "thinking", (), "\udfff ok"),
    ("control_chars", "<think>\x00\x01</think>\x00ans", False, "thinking", (), "\x00ans"),
    ("long_thinking", "<think>" + "x" * 100_000 + "</think>ok", False, "thinking", (), "ok"),
    ("empty_thinking", "<think>\n\n</think>\n\nfour", False, "thinking", (ET,), "four"),
    ("empty_thinking_tight", "<think></think>four", False, "thinking", (ET,), "four"),
    # unclosed / empty answer
    ("unclosed", "<think>reasoning that never ends", False, "anomalous", (UO,), ""),
    ("open_after_answer", "four <think>more", False, "anomalous", (TB, UO), "four"),
    ("empty_answer", "<think>r</think>", False, "anomalous", (EA,), ""),
    ("empty_answer_ws", "<think>r</think>\n\n  ", False, "anomalous", (EA,), ""),
    ("tags_only", "<think></think>", False, "anomalous", (EA, ET), ""),
    ("answer_before_block", "x<think>a</think>", False, "anomalous", (EA, TB), "x"),
    # stray close
    ("stray_close", "reasoning</think>four", False, "anomalous", (SC,), "four"),
    ("stray_close_alone", "</think>", False, "anomalous", (EA, SC), ""),
    ("stray_close_start", "</think>four", False, "anomalous", (SC,), "four"),
    ("stray_after_answer", "<think>a</think>b</think>c", False, "anomalous", (SC, TA), "c"),
    ("stray_right_after_block", "<think>a</think></think>c", False, "anomalous", (SC,), "c"),
    ("two_strays", "x</think>y</think>z", False, "anomalous", (SC, TA), "z"),
    ("close_then_open", "</think><think>", False, "anomalous", (MB, SC, UO), ""),
    # nesting and repetition
    ("nested", "<think>a<think>b</think>c", False, "anomalous", (NO,), "c"),
    ("nested_thrice", "<think><think><think>a</think>c", False, "anomalous", (NO,), "c"),
    ("two_blocks_adjacent", "<think>a</think><think>b</think>c", False, "anomalous", (MB,), "c"),
    ("two_blocks_ws", "<think>a</think>\n\n<think>b</think>c", False, "anomalous", (MB,), "c"),
    ("two_blocks_answer_between", "<think>a</think>b<think>c</think>d", False, "anomalous", (MB, TA), "b\nd"),
    ("reopen_unclosed", "<think>a</think>b<think>c", False, "anomalous", (MB, TA, UO), "b"),
    ("text_before_open", "Sure! <think>a</think>b", False, "anomalous", (TB,), "Sure!\nb"),
    ("many_blocks", "<think>a</think>b" * 500, False, "anomalous", (MB, TA), "\n".join(["b"] * 500)),
    ("literal_tag_in_prose", "Use the `<think>` tag", False, "anomalous", (TB, UO), "Use the `"),
    # partial / near-miss tags
    ("partial_open_end", "four <thi", False, "anomalous", (PT,), "four"),
    ("partial_open_end_full_name", "four <think", False, "anomalous", (PT,), "four"),
    ("partial_close_end", "<think>a</thin", False, "anomalous", (PT, UO), ""),
    ("partial_close_end_one_short", "<think>a</think", False, "anomalous", (PT, UO), ""),
    ("close_without_gt", "<think>a</think\nfour", False, "anomalous", (PT, UO), ""),
    ("upper", "<THINK>a</THINK>b", False, "anomalous", (PT,), "<THINK>a</THINK>b"),
    ("mixed_case_open", "<Think>a</think>b", False, "anomalous", (PT, SC), "b"),
    ("space_after_lt", "< think>a</think>b", False, "anomalous", (PT, SC), "b"),
    ("tab_after_lt", "<\tthink>a</think>b", False, "anomalous", (PT, SC), "b"),
    ("space_before_gt", "<think >a</think>b", False, "anomalous", (PT, SC), "b"),
    ("slash_space", "<think>a</ think>b", False, "anomalous", (PT, UO), ""),
    ("thinking_variant", "<thinking>a</thinking>b", False, "anomalous", (PT,), "<thinking>a</thinking>b"),
    ("self_closing", "<think/>four", False, "anomalous", (PT,), "<think/>four"),
    ("cut_prefix_not_at_end", "<thi ", False, "answer", (), "<thi"),
    ("cut_tags_repeated", "a<thi<thi", False, "anomalous", (PT,), "a<thi"),
    ("unspaced_word_after", "<think about it> four", False, "anomalous", (PT,), "<think about it> four"),
    # prompt-opened block (template prefilled <think>)
    ("po_ok", "reasoning</think>\n\nfour", True, "thinking", (), "four"),
    ("po_empty_thinking", "</think>four", True, "thinking", (ET,), "four"),
    ("po_unclosed", "reasoning forever", True, "anomalous", (UO,), ""),
    ("po_empty", "", True, "anomalous", (UO,), ""),
    ("po_double", "<think>a</think>b", True, "anomalous", (DO,), "b"),
    ("po_double_ws", "\n<think>\na</think>b", True, "anomalous", (DO,), "b"),
    ("po_triple", "<think><think>a</think>b", True, "anomalous", (DO, NO), "b"),
    ("po_empty_answer", "a</think>", True, "anomalous", (EA,), ""),
    ("po_two_blocks", "a</think>b<think>c</think>d", True, "anomalous", (MB, TA), "b\nd"),
    ("po_second_close", "a</think>b</think>c", True, "anomalous", (SC, TA), "c"),
    ("po_partial_close", "a</think four", True, "anomalous", (PT, UO), ""),
    ("po_reopen_right_away", "a</think><think>b</think>c", True, "anomalous", (MB,), "c"),
]

GEMMA_CASES = [
    ("g_ok", "<|channel>thought\nreason<channel|>answer", False, "thinking", (), "answer"),
    ("g_empty_thinking", "<|channel>thought\n<channel|>answer", False, "thinking", (ET,), "answer"),
    ("g_unclosed", "<|channel>thought\nreason", False, "anomalous", (UO,), ""),
    ("g_partial_end", "answer<|chan", False, "anomalous", (PT,), "answer"),
    ("g_prompt_opened", "reason<channel|>answer", True, "thinking", (), "answer"),
    (
        "g_double",
        "<|channel>thought\na<channel|>b<|channel>thought\nc<channel|>d",
        False,
        "anomalous",
        (MB, TA),
        "b\nd",
    ),
    ("g_think_tags_are_text", "<think>a</think>b", False, "answer", (), "<think>a</think>b"),
    ("g_plain", "just text", False, "answer", (), "just text"),
]

_H = "<|channel|>analysis<|message|>"
_F = "<|start|>assistant<|channel|>final<|message|>"
GPTOSS_CASES = [
    ("o_ok", f"{_H}reason<|end|>{_F}42<|return|>", False, "thinking", (), "42"),
    ("o_final_only", "<|channel|>final<|message|>42<|return|>", False, "answer", (), "42"),
    ("o_unclosed", f"{_H}reason", False, "anomalous", (UO,), ""),
    ("o_truncated_end", f"{_H}reason<|en", False, "anomalous", (PT, UO), ""),
    ("o_empty_final", f"{_H}r<|end|>{_F}<|return|>", False, "anomalous", (EA,), ""),
    ("o_two_analysis", f"{_H}a<|end|><|start|>assistant{_H}b<|end|>{_F}42", False, "anomalous", (MB, TA), "42"),
    ("o_stray_end", "hello<|end|>", False, "anomalous", (EA, SC), ""),
    ("o_plain", "no harmony markup", False, "answer", (), "no harmony markup"),
]


def _ids(cases: list[tuple]) -> list[str]:
    return [c[0] for c in cases]


@pytest.mark.parametrize(
    ("markup", "case"),
    [(THINK, c) for c in THINK_CASES] + [(GEMMA4, c) for c in GEMMA_CASES] + [(GPTOSS, c) for c in GPTOSS_CASES],
    ids=_ids(THINK_CASES) + _ids(GEMMA_CASES) + _ids(GPTOSS_CASES),
)
def test_scan_table(markup: ThinkMarkup, case: tuple) -> None:
    _, text, prompt_opened, kind, anomalies, answer = case
    verdict = scan(text, markup, prompt_opened=prompt_opened)
    assert verdict.anomalies == tuple(sorted(anomalies))
    assert verdict.kind == kind
    assert verdict.answer == answer
    assert verdict.open_count == text.count(markup.open_tag)
    assert verdict.close_count == text.count(markup.close_tag)
    assert verdict.has_tags == bool(verdict.open_count or verdict.close_count)
    assert strip_thinking(text, markup, prompt_opened=prompt_opened) == answer


def test_table_size() -> None:
    assert len(THINK_CASES) + len(GEMMA_CASES) + len(GPTOSS_CASES) >= 60


def test_thinking_text() -> None:
    assert scan("<think>\n step one \n</think>ans").thinking == "step one"
    assert scan("<think>a<think>b</think>c").thinking == "a\nb"
    assert scan("<|channel>thought\nreason<channel|>x", GEMMA4).thinking == "reason"
    assert scan("reason</think>x", prompt_opened=True).thinking == "reason"
    assert scan("plain").thinking == ""


# Token-id table: open id 1, close id 2, anything else 0.
# (id, text, ids, prompt_opened, kind, anomalies, answer)
ID_CASES = [
    ("agree", "<think>a</think>b", [1, 0, 2, 0], False, "thinking", (), "b"),
    ("tool_parsed_text", "b", [1, 0, 2, 0], False, "thinking", (IM,), "b"),
    ("tool_parsed_unclosed", "b", [1, 0, 0], False, "anomalous", (IM, UO), "b"),
    ("spelled_out_tags", "<think>a</think>b", [0, 0, 0, 0, 0], False, "thinking", (IM,), "b"),
    ("po_agree", "a</think>b", [0, 2, 0], True, "thinking", (), "b"),
    ("stray_close_ids", "x", [2, 0], False, "anomalous", (IM, SC), "x"),
    ("nested_ids", "b", [1, 1, 0, 2, 0], False, "anomalous", (IM, NO), "b"),
    ("po_double_ids", "b", [1, 0, 2, 0], True, "anomalous", (DO, IM), "b"),
    ("multi_ids", "b", [1, 2, 1, 2, 0], False, "anomalous", (IM, MB), "b"),
    ("no_tags_anywhere", "b", [0, 0], False, "answer", (), "b"),
    ("empty_ids", "", [], False, "answer", (), ""),
]


@pytest.mark.parametrize("case", ID_CASES, ids=_ids(ID_CASES))
def test_scan_token_ids(case: tuple) -> None:
    _, text, ids, prompt_opened, kind, anomalies, answer = case
    verdict = scan(text, prompt_opened=prompt_opened, token_ids=ids, open_id=1, close_id=2)
    assert verdict.anomalies == tuple(sorted(anomalies))
    assert verdict.kind == kind
    assert verdict.answer == answer
    assert verdict.id_open_count == ids.count(1)
    assert verdict.id_close_count == ids.count(2)
    assert verdict.has_tags == bool(text.count("<think") or 1 in ids or 2 in ids)


def test_ids_ignored_without_tag_ids() -> None:
    verdict = scan("b", token_ids=[1, 2], open_id=None, close_id=2)
    assert verdict.id_open_count is None and verdict.kind == "answer"


MODE_CASES = [
    # (id, text, prompt_opened, thinking, expected codes)
    ("think_ok", "<think>a</think>b", False, True, ()),
    ("think_no_block", "b", False, True, ()),
    ("think_empty_block", "<think></think>b", False, True, ()),
    ("think_unclosed", "<think>a", False, True, (UO,)),
    ("nothink_plain", "b", False, False, ()),
    ("nothink_well_formed_block", "<think>a</think>b", False, False, (tm.TAG_IN_NONTHINKING,)),
    ("nothink_empty_block", "<think>\n\n</think>\n\nb", False, False, (tm.TAG_IN_NONTHINKING,)),
    ("nothink_stray_close", "a</think>b", False, False, (SC, tm.TAG_IN_NONTHINKING)),
    ("nothink_partial", "b <thi", False, False, (PT, tm.TAG_IN_NONTHINKING)),
    ("nothink_upper", "<THINK>b", False, False, (PT, tm.TAG_IN_NONTHINKING)),
    ("nothink_prompt_opened_closed", "a</think>b", True, False, (tm.TAG_IN_NONTHINKING,)),
]


@pytest.mark.parametrize("case", MODE_CASES, ids=_ids(MODE_CASES))
def test_anomalies_for_mode(case: tuple) -> None:
    _, text, prompt_opened, thinking, expected = case
    assert anomalies_for_mode(scan(text, prompt_opened=prompt_opened), thinking) == tuple(sorted(expected))


def test_codes_and_markups() -> None:
    assert ALL_CODES == tuple(sorted(ALL_CODES))
    assert tm.EMPTY_THINKING not in MALFORMED and tm.IDS_TEXT_MISMATCH not in MALFORMED
    assert set(tm.MARKUPS) >= {"think", "gemma4", "gptoss"}
    assert THINK.tag_name == "think" and GEMMA4.tag_name is None and GPTOSS.tag_name is None
    assert ThinkMarkup("<reasoning>", "</reasoning>").tag_name == "reasoning"
    with pytest.raises(ValueError, match="two different"):
        ThinkMarkup("<x>", "<x>")
    with pytest.raises(TypeError):
        scan(None)  # type: ignore[arg-type]


def test_custom_markup() -> None:
    markup = ThinkMarkup("<reasoning>", "</reasoning>", name="reasoning")
    assert scan("<reasoning>a</reasoning>b", markup).kind == "thinking"
    assert scan("<REASONING>a</REASONING>b", markup).anomalies == (PT,)
    assert scan("<think>a</think>b", markup).kind == "answer"


def test_verdict_pickles() -> None:
    verdict = scan("<think>a</think>b")
    assert pickle.loads(pickle.dumps(verdict)) == verdict
    assert pickle.loads(pickle.dumps(GPTOSS)) == GPTOSS


def test_huge_adversarial_inputs() -> None:
    # Inputs that would make a backtracking regex quadratic; the scanner is linear in their length.
    for text in ("<" * 200_000, "< " * 100_000 + "think", "<think" * 50_000, "</" * 100_000 + ">", "<think>" * 50_000):
        verdict = scan(text)
        assert isinstance(verdict, MarkupVerdict)
    assert scan("<think>" * 50_000).anomalies == (NO, UO)


# ----- properties -------------------------------------------------------------------------------------------
_PIECES = ["<think>", "</think>", "<thi", "</think", "<THINK>", "< think>", " ", "\n", "a", "答", "\ud800", "<", "/"]
_PIECES += [">", "think", "ing", "<|channel>", "<channel|>", "<|end|>", _H, "<|channel|>final<|message|>"]
texts = st.one_of(st.text(max_size=80), st.lists(st.sampled_from(_PIECES), max_size=25).map("".join))


@settings(max_examples=400, deadline=None)
@given(text=texts, prompt_opened=st.booleans(), markup=st.sampled_from([THINK, GEMMA4, GPTOSS]))
def test_scan_properties(text: str, prompt_opened: bool, markup: ThinkMarkup) -> None:
    v = scan(text, markup, prompt_opened=prompt_opened)
    assert v.kind in ("answer", "thinking", "anomalous")
    assert v.anomalies == tuple(sorted(set(v.anomalies)))
    assert set(v.anomalies) <= set(ALL_CODES)
    assert (v.kind == "anomalous") == bool(set(v.anomalies) & MALFORMED)
    assert v.open_count == text.count(markup.open_tag)
    assert v.close_count == text.count(markup.close_tag)
    assert markup.open_tag not in v.answer and markup.close_tag not in v.answer
    assert len(v.answer) <= len(text)
    if not v.has_tags and not prompt_opened:
        assert set(v.anomalies) <= {PT}
        if not v.anomalies and not markup.answer_marker:
            assert v.answer == text.strip()
    if v.kind == "thinking":
        assert v.answer
    assert strip_thinking(text, markup, prompt_opened=prompt_opened) == v.answer
    for thinking in (True, False):
        assert set(anomalies_for_mode(v, thinking)) <= set(ALL_CODES)


@settings(max_examples=200, deadline=None)
@given(text=texts, ids=st.lists(st.integers(0, 3), max_size=30), prompt_opened=st.booleans())
def test_scan_ids_properties(text: str, ids: list[int], prompt_opened: bool) -> None:
    v = scan(text, prompt_opened=prompt_opened, token_ids=ids, open_id=1, close_id=2)
    assert v.id_open_count == ids.count(1) and v.id_close_count == ids.count(2)
    mismatch = (ids.count(1), ids.count(2)) != (text.count("<think>"), text.count("</think>"))
    assert (tm.IDS_TEXT_MISMATCH in v.anomalies) == mismatch
    assert (v.kind == "anomalous") == bool(set(v.anomalies) & MALFORMED)
    # the tag ids' positions found by the caller (a batched pass) give the same verdict as the search
    found = [(i, t) for i, t in enumerate(ids) if t in (1, 2)]
    w = scan(text, prompt_opened=prompt_opened, token_ids=ids, open_id=1, close_id=2, id_tags=found)
    assert w == v


# ----- templates ---------------------------------------------------------------------------------------------
def test_markup_for_template_text() -> None:
    assert markup_for_template(None) is THINK
    assert markup_for_template("") is THINK
    assert markup_for_template("{{ '<|channel|>analysis<|message|>' }}") is GPTOSS
    assert markup_for_template("{{ '<|channel>thought\\n' }}{{ '<channel|>' }}") is GEMMA4
    assert markup_for_template("{{ '<think>\\n' }}") is THINK


PROMPT_CASES = [
    ("<|im_start|>assistant\n", False),
    ("<|im_start|>assistant\n<think>\n", True),
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
    ("<｜Assistant｜><think>\n", True),
    ("<|assistant|>\n<think></think>", False),
    ("user wrote <think> literally<|im_end|>\n<|im_start|>assistant\n", False),
    ("", False),
]


@pytest.mark.parametrize(("prompt", "expected"), PROMPT_CASES)
def test_prompt_opens_block(prompt: str, expected: bool) -> None:
    assert prompt_opens_block(prompt) is expected


def test_prompt_opens_block_other_markups() -> None:
    assert prompt_opens_block("<|turn>model\n<|channel>thought\n", GEMMA4)
    assert not prompt_opens_block("<|turn>model\n", GEMMA4)
    assert prompt_opens_block("<|start|>assistant<|channel|>analysis<|message|>", GPTOSS)
    assert not prompt_opens_block("<|start|>assistant", GPTOSS)


# ----- real templates and tokenizer ---------------------------------------------------------------------------
testing = pytest.importorskip("rl_guards.testing.tokenizer")

# template name -> (generation prompt opens a block with thinking on, ... with thinking off)
TEMPLATE_PREFILLS = {
    "qwen3": (False, False),
    "qwen3_5_think": (True, False),
    "qwen3_5_nothink": (True, False),
    "qwen3_8": (True, False),
    "deepseek_r1_distill": (True, True),
    "glm4moe": (False, False),
    "nemotron_3_nano": (True, False),
}


@pytest.fixture(scope="module")
def qwen_tokenizer():
    return testing.build_tokenizer(vocab_size=2048, chat_template="qwen3")


@pytest.mark.parametrize("name", sorted(TEMPLATE_PREFILLS))
def test_prompt_opens_block_on_rendered_templates(qwen_tokenizer, name: str) -> None:
    template = testing.chat_template_text(name)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    got = []
    for enable_thinking in (True, False):
        prompt = qwen_tokenizer.apply_chat_template(
            messages,
            chat_template=template,
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=enable_thinking,
        )
        got.append(prompt_opens_block(prompt, markup_for_template(template)))
    assert tuple(got) == TEMPLATE_PREFILLS[name]


def test_markup_for_real_templates() -> None:
    assert markup_for_template(testing.chat_template_text("gemma4")) is GEMMA4
    assert markup_for_template(testing.chat_template_text("gptoss")) is GPTOSS
    assert markup_for_template(testing.chat_template_text("qwen3")) is THINK


@pytest.mark.parametrize("template_name", ["qwen3_training", "qwen3_5_think_training"])
def test_scan_real_rendered_completions(qwen_tokenizer, template_name: str) -> None:
    """Render assistant turns with a real template, tokenize them, and scan text and ids together."""
    template = testing.chat_template_text(template_name)
    open_id = qwen_tokenizer.convert_tokens_to_ids("<think>")
    close_id = qwen_tokenizer.convert_tokens_to_ids("</think>")
    head = "<|im_start|>assistant\n"
    for reasoning, answer in [("Two plus two is four.", "4"), ("Multiply:\n6*7=42", "The answer is 42.")]:
        messages = [
            {"role": "user", "content": "Question?"},
            {"role": "assistant", "content": answer, "reasoning_content": reasoning},
        ]
        rendered = qwen_tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
        completion = rendered[rendered.rindex(head) + len(head) :]
        completion = completion[: completion.index("<|im_end|>")]
        ids = qwen_tokenizer.encode(completion, add_special_tokens=False)
        verdict = scan(completion, token_ids=ids, open_id=open_id, close_id=close_id)
        assert verdict.kind == "thinking", (completion, verdict)
        assert verdict.anomalies == ()
        assert verdict.answer == answer and verdict.thinking == reasoning
        assert (verdict.id_open_count, verdict.id_close_count) == (1, 1)
        # The same completion after a prefilled "<think>\n": the generated open is a double open.
        assert DO in scan(completion, prompt_opened=True, token_ids=ids, open_id=open_id, close_id=close_id).anomalies
        # Decoded as TRL does for rewards (skip_special_tokens=True): <think> is not special in Qwen3, so kept.
        decoded = qwen_tokenizer.decode(ids, skip_special_tokens=True)
        assert scan(decoded).kind == "thinking"


@pytest.mark.parametrize(
    "text, prompt_opened, answer, thinking",
    [
        ("<think>\nsteps\n</think>\n\n42", False, "42", "steps"),
        ("lead <think>x</think> 42", False, "lead\n42", "x"),
        ("<think>  </think>   ", False, "", ""),
        ("plain answer  ", False, "plain answer", ""),
        ("still thinking", True, "", "still thinking"),
        ("thought</think> 7", True, "7", "thought"),
        ("<think>never closed", False, "", "never closed"),
        ("pre <think>never closed", False, "pre", "never closed"),
        ("stray</think> tail", False, "tail", "stray"),
        ("<think>a</think>b<think>c</think>d", False, "b\nd", "a\nc"),
    ],
)
def test_a_verdict_with_deferred_strings_is_the_same_object_every_way(
    text: str, prompt_opened: bool, answer: str, thinking: str
) -> None:
    """scan() may leave answer/thinking as spans: every way of reading the verdict sees the finished strings."""
    import copy
    import dataclasses

    def fresh() -> tm.MarkupVerdict:
        return scan(text, prompt_opened=prompt_opened)

    eager = fresh()
    assert (eager.answer, eager.thinking) == (answer, thinking)
    assert fresh().thinking == thinking and fresh().answer == answer  # either one first
    assert strip_thinking(text, prompt_opened=prompt_opened) == answer
    assert fresh() == eager and hash(fresh()) == hash(eager) and repr(fresh()) == repr(eager)
    assert pickle.loads(pickle.dumps(fresh())) == eager and copy.deepcopy(fresh()) == eager
    assert dataclasses.asdict(fresh())["answer"] == answer and dataclasses.replace(fresh()) == eager
    assert "_pieces" not in pickle.loads(pickle.dumps(fresh())).__dict__
    with pytest.raises(AttributeError):
        fresh().no_such_field  # noqa: B018
