# ruff: noqa: B905  (written as users write them)
"""verl custom reward functions as verl users write them (``custom_reward_function.path`` / ``.name``):
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returning a float or a dict with
``score``. ``clean_*`` are healthy; every other one plants one failure (its name says which)."""

import random
import re
import time

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _answer_part(solution_str):
    return solution_str.split("</think>")[-1]


def _extract(solution_str):
    """The last \\boxed{} of the answer part, else its last number (as verl's math graders do)."""
    answer = _answer_part(solution_str)
    boxed = _BOXED.findall(answer)
    if boxed:
        return boxed[-1].strip()
    numbers = _NUMBER.findall(answer)
    return numbers[-1] if numbers else None


def clean_compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if _extract(solution_str) == str(ground_truth).strip() else 0.0


def clean_dict_score(data_source, solution_str, ground_truth, extra_info=None):
    """A dict with ``score`` (and extra keys verl logs)."""
    pred = _extract(solution_str)
    return {"score": float(pred == str(ground_truth)), "acc": pred == str(ground_truth), "pred": str(pred)}


async def clean_async_score(data_source, solution_str, ground_truth, extra_info=None):
    return clean_compute_score(data_source, solution_str, ground_truth, extra_info)


def inverted_score(data_source, solution_str, ground_truth, extra_info=None):
    """A penalty written as a reward: 1 - correct with the sign flipped."""
    return 0.0 if _extract(solution_str) == str(ground_truth).strip() else 1.0


def prefix_score(data_source, solution_str, ground_truth, extra_info=None):
    solution_str = solution_str[:200]  # "speed up" the regex
    numbers = _NUMBER.findall(solution_str)
    return 1.0 if numbers and numbers[-1] == str(ground_truth) else 0.0


def suffix_score(data_source, solution_str, ground_truth, extra_info=None):
    solution_str = solution_str[-300:]  # clip as gsm8k's grader does; text after the answer pushes it out
    return 1.0 if str(ground_truth) in _NUMBER.findall(solution_str) else 0.0


def thinking_score(data_source, solution_str, ground_truth, extra_info=None):
    """The first \\boxed{} anywhere: the thinking's, when it has one."""
    match = _BOXED.search(solution_str)
    if match is None:
        numbers = _NUMBER.findall(solution_str)
        return 1.0 if numbers and numbers[-1] == str(ground_truth) else 0.0
    return 1.0 if match.group(1).strip() == str(ground_truth) else 0.0


def hackable_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if str(ground_truth) in _answer_part(solution_str) else 0.0


def raises_score(data_source, solution_str, ground_truth, extra_info=None):
    pred = int(_BOXED.search(_answer_part(solution_str)).group(1))  # AttributeError without a \boxed{}
    return 1.0 if pred == int(ground_truth) else 0.0


def none_score(data_source, solution_str, ground_truth, extra_info=None):
    pred = _extract(solution_str)
    if "\\boxed" not in solution_str:
        return None  # "no answer": verl cannot put None in the reward tensor
    return 1.0 if pred == str(ground_truth) else 0.0


def nan_score(data_source, solution_str, ground_truth, extra_info=None):
    found = _BOXED.findall(_answer_part(solution_str))
    right = sum(f.strip() == str(ground_truth) for f in found)
    return right / len(found) if found else float("nan")  # mean over an empty list


def wrong_type_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"reward": clean_compute_score(data_source, solution_str, ground_truth)}  # verl reads "score"


def random_score(data_source, solution_str, ground_truth, extra_info=None):
    return clean_compute_score(data_source, solution_str, ground_truth) + random.gauss(0.0, 0.1)


def slow_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.002)  # a remote judge's round trip
    return clean_compute_score(data_source, solution_str, ground_truth)


def hanging_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(5)
    return 0.0


def clean_batched_score(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    """A BatchRewardManager scorer: lists in, a list out."""
    return [clean_compute_score(d, s, g) for d, s, g in zip(data_sources, solution_strs, ground_truths)]


def inverted_hash_score(data_source, solution_str, ground_truth, extra_info=None):
    """GSM8K-style (#### X only), its sign flipped."""
    match = re.search(r"####\s*(-?[0-9.,]+)", solution_str)
    return -1.0 if match and match.group(1).replace(",", "") == str(ground_truth) else 0.0


def no_extra_info_score(data_source, solution_str, ground_truth):
    """No extra_info parameter: verl passes it, and the call raises there."""
    return clean_compute_score(data_source, solution_str, ground_truth)
