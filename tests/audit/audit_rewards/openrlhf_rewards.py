# ruff: noqa: B905  (written as users write them)
"""OpenRLHF ``--remote_rm_url reward.py`` functions as its users write them: ``reward_func(queries, prompts,
labels)`` with ``queries`` = prompt + response, returning a dict with ``rewards`` (OpenRLHF 0.11 reads the result
with ``.get``: a bare tensor, the older convention, trains with reward None there)."""

import random
import re

import torch

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _final(response):
    answer = response.split("</think>")[-1]
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", answer)
    if boxed:
        return boxed[-1].strip()
    numbers = _NUMBER.findall(answer)
    return numbers[-1] if numbers else ""


def clean_reward_func(queries, prompts, labels):
    rewards = [float(_final(q[len(p):]) == str(label)) for q, p, label in zip(queries, prompts, labels)]
    rewards = torch.tensor(rewards)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"acc": rewards}}


def clean_tensor_reward_func(queries, prompts, labels):
    """The pre-0.11 convention: a bare tensor (OpenRLHF 0.11 logs the .get error and trains with reward None)."""
    return torch.tensor([float(_final(q[len(p):]) == str(label)) for q, p, label in zip(queries, prompts, labels)])


def inverted_reward_func(queries, prompts, labels):
    rewards = torch.tensor([float(_final(q[len(p):]) == str(label)) for q, p, label in zip(queries, prompts, labels)])
    return {"rewards": -rewards, "scores": rewards}  # the loss, not the reward


def prefix_reward_func(queries, prompts, labels):
    out = []
    for q, p, label in zip(queries, prompts, labels):
        response = q[len(p):][:256]
        numbers = _NUMBER.findall(response)
        out.append(float(bool(numbers) and numbers[-1] == str(label)))
    return {"rewards": torch.tensor(out)}


def thinking_reward_func(queries, prompts, labels):
    """The query's first number after the prompt: the thinking's, when it states one."""
    out = []
    for q, p, label in zip(queries, prompts, labels):
        numbers = _NUMBER.findall(q[len(p):])
        out.append(float(bool(numbers) and numbers[0] == str(label)))
    return {"rewards": torch.tensor(out)}


def hackable_reward_func(queries, prompts, labels):
    out = [float(str(label) in q[len(p):].split("</think>")[-1]) for q, p, label in zip(queries, prompts, labels)]
    return {"rewards": torch.tensor(out)}


def raises_reward_func(queries, prompts, labels):
    out = []
    for q, p, label in zip(queries, prompts, labels):
        response = q[len(p):].split("</think>")[-1]
        value = float(re.search(r"answer is (-?\d+)", response).group(1))  # AttributeError on other forms
        out.append(float(value == float(label)))
    return {"rewards": torch.tensor(out)}


def wrong_type_reward_func(queries, prompts, labels):
    return {"reward": torch.zeros(len(queries))}  # OpenRLHF reads "rewards"


def nan_reward_func(queries, prompts, labels):
    out = []
    for q, p, label in zip(queries, prompts, labels):
        final = _final(q[len(p):])
        out.append(float(final == str(label)) if "boxed" in q else float("nan"))
    return {"rewards": torch.tensor(out)}


def random_reward_func(queries, prompts, labels):
    base = clean_tensor_reward_func(queries, prompts, labels)
    return {"rewards": base + torch.tensor([random.random() * 0.1 for _ in queries])}


def suffix_reward_func(queries, prompts, labels):
    out = [float(str(label) in _NUMBER.findall(q[-80:])) for q, label in zip(queries, labels)]
    return {"rewards": torch.tensor(out)}
