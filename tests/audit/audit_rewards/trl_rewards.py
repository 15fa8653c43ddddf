# ruff: noqa: B905  (written as users write them)
"""TRL reward functions as its users write them: ``f(completions, **kwargs)`` with the dataset columns by name,
one float (or None) per completion; conversational completions are message lists."""

import re

_NUMBER = re.compile(r"-?\d+")


def _text(completion):
    return completion[0]["content"] if isinstance(completion, list) else completion


def clean_accuracy(completions, answer, **kwargs):
    out = []
    for completion, expected in zip(completions, answer):
        numbers = _NUMBER.findall(_text(completion).split("</think>")[-1])
        out.append(1.0 if numbers and numbers[-1] == str(expected) else 0.0)
    return out


def clean_length_penalty(completions, **kwargs):
    return [-0.001 * len(_text(c)) for c in completions]


def inverted_accuracy(completions, answer, **kwargs):
    return [-r for r in clean_accuracy(completions, answer)]


def prefix_accuracy(completions, answer, **kwargs):
    out = []
    for completion, expected in zip(completions, answer):
        numbers = _NUMBER.findall(_text(completion)[:150])
        out.append(1.0 if numbers and numbers[-1] == str(expected) else 0.0)
    return out


def suffix_accuracy(completions, answer, **kwargs):
    return [1.0 if str(a) in _NUMBER.findall(_text(c)[-100:]) else 0.0 for c, a in zip(completions, answer)]


def thinking_accuracy(completions, answer, **kwargs):
    return [1.0 if str(a) in _NUMBER.findall(_text(c)) else 0.0 for c, a in zip(completions, answer)]


def hackable_accuracy(completions, answer, **kwargs):
    return [1.0 if str(a) in _text(c).split("</think>")[-1] else 0.0 for c, a in zip(completions, answer)]


def raises_accuracy(completions, answer, **kwargs):
    return [float(int(_text(c).split("</think>")[-1].strip()) == int(a)) for c, a in zip(completions, answer)]


def none_accuracy(completions, answer, **kwargs):
    out = []
    for completion, expected in zip(completions, answer):
        numbers = re.findall(r"\\boxed\{(-?\d+)\}", _text(completion))
        out.append(float(numbers[-1] == str(expected)) if numbers else None)  # "unparseable": left out
    return out


def wrong_count_accuracy(completions, answer, **kwargs):
    return clean_accuracy(completions, answer)[:1]  # one score for the batch


def random_accuracy(completions, answer, **kwargs):
    import random

    return [r + random.uniform(-0.05, 0.05) for r in clean_accuracy(completions, answer)]  # "break ties"


def nan_accuracy(completions, answer, **kwargs):
    out = []
    for completion, expected in zip(completions, answer):
        numbers = [float(n) for n in _NUMBER.findall(_text(completion).split("</think>")[-1])]
        out.append(sum(n == float(expected) for n in numbers) / len(numbers) if numbers else float("nan"))
    return out


async def clean_async_judge(prompts, completions, answer, **kwargs):
    import asyncio

    await asyncio.sleep(0)  # an API judge's round trip
    return clean_accuracy(completions, answer)


def inverted_by_ids(completions, completion_ids, answer, **kwargs):
    """Reads completion_ids (TRL passes them): a length-normalised score, its sign flipped."""
    return [-r / max(len(ids), 1) for r, ids in zip(clean_accuracy(completions, answer), completion_ids)]


def first_line_accuracy(completions, answer, **kwargs):
    """Only the first line: never the answer after a think block."""
    return [1.0 if str(a) in _NUMBER.findall(_text(c).strip().split("\n")[0]) else 0.0
            for c, a in zip(completions, answer)]


def missing_kwargs_accuracy(completions, answer):
    """No **kwargs: TRL passes prompts, completion_ids, trainer_state, ... and the call raises there."""
    return clean_accuracy(completions, answer)
