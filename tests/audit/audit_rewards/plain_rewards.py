"""Plain ``fn(completion, answer) -> float`` graders (Tinker cookbook style, a notebook's grader)."""

import asyncio
import re

_NUMBER = re.compile(r"-?\d+")


def _final(completion):
    return completion.split("</think>")[-1]


def clean_grader(completion, answer):
    numbers = _NUMBER.findall(_final(completion))
    return 1.0 if numbers and numbers[-1] == str(answer) else 0.0


async def clean_async_grader(completion, answer):
    await asyncio.sleep(0)
    return clean_grader(completion, answer)


def inverted_grader(completion, answer):
    return -clean_grader(completion, answer)


def prefix_grader(completion, answer):
    numbers = _NUMBER.findall(completion[:100])  # "the answer is near the start"
    return 1.0 if numbers and numbers[-1] == str(answer) else 0.0


def thinking_grader(completion, answer):
    numbers = _NUMBER.findall(completion)
    return 1.0 if str(answer) in numbers else 0.0


def hackable_grader(completion, answer):
    return 1.0 if str(answer) in _final(completion) else 0.0


def raises_grader(completion, answer):
    return 1.0 if int(_final(completion).strip()) == int(answer) else 0.0  # ValueError on "The answer is 7."


def wrong_type_grader(completion, answer):
    return "1" if clean_grader(completion, answer) else "0"


def suffix_grader(completion, answer):
    return 1.0 if str(answer) in _NUMBER.findall(completion[-60:]) else 0.0


def none_grader(completion, answer):
    boxed = re.findall(r"\\boxed\{(-?\d+)\}", completion)
    return (1.0 if boxed[-1] == str(answer) else 0.0) if boxed else None


def nan_grader(completion, answer):
    numbers = [int(n) for n in _NUMBER.findall(_final(completion))]
    return float("nan") if not numbers else float(numbers[-1] == int(answer))
