"""Answer forms (pure): the final answer a reference states, the ways completions state an answer, and whether a
text contains an answer.

A reference column holds a bare answer (``"54"``), an answer in a form (``"#### 54"``, ``"\\boxed{54}"``) or a whole
worked solution ending in one. The probes need the final answer alone (:func:`final_answer`): a variant built from
a whole solution still contains the right answer wherever it is put, so nothing it scores is attributable.

Forms (:data:`FORMS`), the ways graders find an answer: ``bare`` (the answer alone), ``stated`` ("The answer is
X."), ``labelled`` ("Answer: X", as DAPO-style prompts ask), ``boxed`` (``\\boxed{X}``), ``hash`` (GSM8K's ``#### X``,
numbers only), ``tagged`` (``<answer>X</answer>``), ``latex`` (``$X$``), ``last_line`` (a line of reasoning, then the
answer alone on the last line).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FORMS: dict[str, str] = {
    "bare": "{}",
    "stated": "The answer is {}.",
    "labelled": "Answer: {}",
    "boxed": "\\boxed{{{}}}",
    "hash": "#### {}",
    "tagged": "<answer>{}</answer>",
    "latex": "${}$",
    "last_line": "Working through the question one part at a time.\n{}",
}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_HASH = re.compile(r"####\s*([^\n]+)")
_TAGGED = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_STATED = re.compile(
    r"(?:final answer|the answer)\s*(?:is|:)\s*([^\n]+?)\s*(?:\.\s*$|\.\s+|$)", re.IGNORECASE | re.MULTILINE
)
SHORT = 64  # characters: a one-line reference this short is the answer itself


def _boxed_contents(text: str) -> list[str]:
    """The contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in ``text`` (braces balanced), in order."""
    out = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                out.append(text[start:i].strip())
                break
    return out


def _unwrap(value: str) -> str:
    value = value.strip()
    while len(value) >= 2 and value[0] == value[-1] == "$":
        value = value[1:-1].strip()
    return value.rstrip(".").strip() if not NUMBER.fullmatch(value) else value


def final_answer(reference: object) -> str | None:
    """The final answer a reference states: the last ``\\boxed{}``, ``#### X``, ``<answer>X</answer>`` or "the
    answer is X"; else a short one-line reference as it is; else the last number of a worked solution; else None."""
    if reference is None:
        return None
    text = str(reference).strip()
    if not text:
        return None
    boxed = _boxed_contents(text)
    if boxed and boxed[-1]:
        return _unwrap(boxed[-1])
    for pattern in (_HASH, _TAGGED, _STATED):
        found = pattern.findall(text)
        if found and _unwrap(found[-1]):
            return _unwrap(found[-1])
    if "\n" not in text and len(text) <= SHORT:
        return _unwrap(text) or None
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


def is_number(value: str) -> bool:
    return bool(NUMBER.fullmatch(value.strip()))


def admits(value: str, form: str) -> bool:
    """Whether an answer can be written in ``form`` (GSM8K's ``#### X`` holds numbers only)."""
    return form != "hash" or is_number(value)


def render(form: str, value: str) -> str:
    return FORMS[form].format(value)


def _normal(value: str) -> str:
    text = value.strip().lower().replace(",", "")
    if is_number(text):
        try:
            number = float(text)
            return repr(int(number)) if number.is_integer() else repr(number)
        except ValueError:
            return text
    return text


def same_answer(a: str, b: str) -> bool:
    """The same answer written alike or as the same number (``8`` and ``8.0``, ``1,000`` and ``1000``)."""
    return _normal(a) == _normal(b)


def contains_answer(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole token (not inside a longer one: ``5`` is not in ``15``),
    case-insensitive; a number also as its equal (``8.0`` for ``8``)."""
    value = value.strip()
    if not value:
        return False
    pattern = r"(?<![0-9A-Za-z.])" + re.escape(value) + r"(?![0-9A-Za-z]|\.\d)"
    if re.search(pattern, text, re.IGNORECASE):
        return True
    if is_number(value):
        return any(same_answer(n, value) for n in NUMBER.findall(text))
    return False


def _moved(value: str, by: int) -> str:
    """``value`` with every digit moved by ``by`` (a wrong number of the same length and format)."""
    digits = "0123456789"
    return "".join(digits[(digits.index(c) + by) % 10] if c in digits else c for c in value)


def _unrelated(candidate: str, value: str) -> bool:
    """Neither answer contains the other, even inside a longer token (a substring grader pays ``18`` for ``8``),
    and they are not the same answer."""
    a, b = candidate.strip().lower(), value.strip().lower()
    return bool(a) and not same_answer(a, b) and a not in b and b not in a


def same_length_wrong(value: str, avoid: Sequence[str]) -> str | None:
    """A wrong answer as long as ``value`` (a number with its digits moved), unrelated to it and to ``avoid``; None
    when there is none (a text answer): a control that a length term scores as it scores ``value``."""
    if not any(c.isdigit() for c in value):
        return None
    for by in (2, 3, 4, 6, 7, 8):
        candidate = _moved(value, by)
        if _unrelated(candidate, value) and all(_unrelated(candidate, a) for a in avoid):
            return candidate
    return None


def wrong_answers(value: str, others: Sequence[str], count: int = 2) -> list[str]:
    """``count`` wrong answers for a right ``value``: other rows' final answers unrelated to it (the closest in
    length first), else made up (a number with its digits moved; ``none``, ``unknown``); distinct from each other."""
    out: list[str] = []
    pool = sorted(dict.fromkeys(o for o in others if o is not None), key=lambda o: abs(len(o) - len(value)))
    made = [_moved(value, d) for d in (1, 2, 3, 7)] if any(c.isdigit() for c in value) else []
    for candidate in [*pool, *made, "none", "unknown", "elsewhere"]:
        if len(out) == count:
            break
        if _unrelated(candidate, value) and all(_unrelated(candidate, o) for o in out):
            out.append(candidate)
    return out


__all__ = [
    "FORMS",
    "admits",
    "contains_answer",
    "final_answer",
    "is_number",
    "render",
    "same_answer",
    "same_length_wrong",
    "wrong_answers",
]
