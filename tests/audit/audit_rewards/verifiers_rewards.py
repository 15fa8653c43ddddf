"""verifiers rubric functions as its users write them: keyword arguments by name (``completion``, ``answer``,
``prompt``, ``state``, ``parser``, ...), chat completions as message lists, async allowed."""

import re

_NUMBER = re.compile(r"-?\d+")


def _text(completion):
    if isinstance(completion, list):
        return completion[-1]["content"] if completion else ""
    return completion


def clean_correct_answer(completion, answer, **kwargs):
    numbers = _NUMBER.findall(_text(completion).split("</think>")[-1])
    return 1.0 if numbers and numbers[-1] == str(answer) else 0.0


async def clean_judge(prompt, completion, answer, state):
    return clean_correct_answer(completion, answer)


def clean_parsed(parser, completion, answer, **kwargs):
    parsed = parser.parse_answer(completion) or ""
    numbers = _NUMBER.findall(parsed.split("</think>")[-1])
    return 1.0 if numbers and numbers[-1] == str(answer) else 0.0


def inverted_answer(completion, answer, **kwargs):
    return 1.0 - clean_correct_answer(completion, answer)


def thinking_answer(completion, answer, **kwargs):
    return 1.0 if str(answer) in _NUMBER.findall(_text(completion)) else 0.0


def hackable_answer(completion, answer, **kwargs):
    return 1.0 if str(answer) in _text(completion).split("</think>")[-1] else 0.0


async def raises_judge(prompt, completion, answer, state):
    verdict = re.search(r"\\boxed\{(-?\d+)\}", _text(completion)).group(1)  # AttributeError without \boxed{}
    return float(verdict == str(answer))


def prefix_answer(completion, answer, **kwargs):
    numbers = _NUMBER.findall(_text(completion)[:120])
    return 1.0 if numbers and numbers[-1] == str(answer) else 0.0


def wrong_type_answer(completion, answer, **kwargs):
    return [clean_correct_answer(completion, answer)]  # a list where verifiers wants a float


def random_answer(completion, answer, **kwargs):
    import random

    return clean_correct_answer(completion, answer) * random.choice([0.9, 1.0])
