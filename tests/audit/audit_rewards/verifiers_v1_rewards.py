"""verifiers >= 0.4 (``verifiers.v1``) rewards as its users write them: ``@vf.reward`` functions declaring what they
need by name (``task``: the row's ``TaskData``, ``trace``: the rollout; ``trace.last_reply`` is the answer)."""

import re

import verifiers.v1 as vf

_NUMBER = re.compile(r"-?\d+")


@vf.reward
def clean_correct(task, trace) -> float:
    numbers = _NUMBER.findall(trace.last_reply.split("</think>")[-1])
    return float(bool(numbers) and numbers[-1] == task.answer)


@vf.reward(weight=1.0)
async def clean_keyed(task, trace) -> dict:
    return {"correct": clean_correct(task, trace), "format": 0.0}


@vf.reward
async def hackable_contains(task, trace) -> float:
    return float(task.answer in trace.last_reply.split("</think>")[-1])


@vf.reward
def thinking_contains(task, trace) -> float:
    return float(task.answer in _NUMBER.findall(trace.last_reply))


@vf.reward
def inverted_correct(task, trace) -> float:
    return 1.0 - clean_correct(task, trace)


@vf.reward
def raises_boxed(task, trace) -> float:
    return float(re.search(r"\\boxed\{(-?\d+)\}", trace.last_reply).group(1) == task.answer)
