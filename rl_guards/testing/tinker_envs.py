"""The tiny fixture's two tasks as a tinker-cookbook RL dataset (needs ``tinker_cookbook``; import it explicitly).

``TinyTasksDatasetBuilder`` is a cookbook ``RLDatasetBuilder`` (chz): each batch has ``batch_size`` groups of
``group_size`` ``ProblemEnv`` rollouts, the tasks alternating ("arith": "What is 3+4? Answer with the number.",
"echo": "Repeat the word: apple"), tagged with their task (``logging_tags``), so per-tag metrics (``env/<tag>/...``)
exist. The tiny model answers them unreliably: rewards vary, some groups are dead, as in :mod:`rl_guards.testing`.

The hooks below plant the failures rl_guards' tinker tests and benchmarks look for, each in the form a recipe would
have it (nothing of the cookbook is patched): ``grader`` ("right" / "never" for a task whose reward cannot vary, and
the reward probes' graders: see :class:`TinyTaskEnv`), ``raw_text`` (a ``step`` that grades the thinking too),
``prefill`` (an assistant prefill the env adds), ``mixed_groups`` (a group builder that draws a new problem per env),
``move_header`` (a group builder whose ``compute_group_rewards`` moves the last observation tokens into the action).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.renderers.qwen3 import Qwen3Renderer
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from tinker_cookbook.rl.types import (
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    Trajectory,
    Transition,
)
from tinker_cookbook.tokenizer_utils import get_tokenizer

from rl_guards.testing.data import Example, make_examples
from rl_guards.testing.rewards import final_answer

GRADERS = ("right", "never", "inverted", "last_number", "last_number_64", "first_number", "stall")
_INTEGER = re.compile(r"-?\d+")


class TinyTaskEnv(ProblemEnv):
    """One tiny-task problem; the answer is the completion's final line, compared as ``rl_guards.testing.rewards``
    does. Other graders (``check_answer``), for the plants and their twins: ``"never"`` (no answer is ever right, a
    task that cannot learn), ``"inverted"`` (every answer but the right one), ``"last_number"`` (the last integer of
    the text, as the cookbook's arithmetic env grades), ``"last_number_64"`` (the same on ``text[:64]``: reads a
    prefix), ``"first_number"`` (the first integer), ``"stall"`` (``last_number``, but sleeps forever on a text over
    600 characters: a judge that never answers). ``raw_text``: ``step`` grades the decoded response, thinking
    included, instead of the renderer's parsed answer (a recipe that skips ``parse_response``)."""

    def __init__(
        self,
        example: Example,
        renderer: Any,
        *,
        grader: str = "right",
        prefill: str | None = None,
        stop: bool = True,
        raw_text: bool = False,
    ) -> None:
        super().__init__(renderer, format_coef=0.1)
        if grader not in GRADERS:
            raise ValueError(f"grader {grader!r}: one of {', '.join(GRADERS)}")
        self.example = example
        self.task = example.task
        self.grader = grader
        self.prefill = prefill
        self.stop = stop
        self.raw_text = raw_text

    @property
    def stop_condition(self) -> Any:
        return super().stop_condition if self.stop else []

    async def step(self, action: list[int], *, extra: Any = None) -> Any:
        if self.stop and not self.raw_text:
            return await super().step(action, extra=extra)
        # sampled past its end-of-turn (no stop sequences), or raw_text: grade the text up to the first stop token
        stops = set(self.renderer.get_stop_sequences())
        end = next((i for i, t in enumerate(action) if t in stops), len(action))
        text = self.renderer.tokenizer.decode(action[:end], skip_special_tokens=True)
        correct = float(self.check_answer(text))
        return StepResult(
            reward=correct,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=[],
            metrics={"correct": correct},
        )

    def get_question(self) -> str:
        return self.example.question

    def check_answer(self, sample_str: str) -> bool:
        if self.grader == "never":
            return False
        if self.grader in ("right", "inverted"):  # inverted: pays every answer but the right one (a sign error)
            right = final_answer(sample_str).strip().lower() == self.example.answer.lower()
            return right != (self.grader == "inverted")
        if self.grader == "stall" and len(sample_str) > 600:
            time.sleep(3600)
        text = sample_str[:64] if self.grader == "last_number_64" else sample_str
        numbers = _INTEGER.findall(text)
        if not numbers:
            return False
        return numbers[0 if self.grader == "first_number" else -1] == self.example.answer

    def check_format(self, sample_str: str) -> bool:
        return True

    def get_reference_answer(self) -> str:
        return self.example.answer

    async def initial_observation(self) -> tuple[tinker.ModelInput, Any]:
        if self.prefill is None:
            return await super().initial_observation()
        convo = [{"role": "user", "content": self.get_question()}]
        return self.renderer.build_generation_prompt(convo, prefill=self.prefill), self.stop_condition


@dataclass(frozen=True)
class MixedProblemsGroupBuilder(EnvGroupBuilder):
    """A "group" of different problems, one per env (what a tutorial's grouping bug makes)."""

    thunks: tuple[Any, ...]
    tag: str

    async def make_envs(self) -> Sequence[Env]:
        return [thunk() for thunk in self.thunks]

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class HeaderIntoActionGroupBuilder(EnvGroupBuilder):
    """The recipe's group, whose ``compute_group_rewards`` moves the last ``tokens`` observation tokens of every
    trajectory into its action (a "fix" that re-attaches the assistant header to the answer): the cookbook's own
    ``trajectory_to_data`` then gives those observation tokens the rollout's advantage."""

    inner: EnvGroupBuilder
    tokens: int = 3

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Any]]:
        out = await self.inner.compute_group_rewards(trajectory_group, env_group)
        for trajectory in trajectory_group:
            first = trajectory.transitions[0]
            ob = first.ob.to_ints()
            moved = ob[-self.tokens :]
            ac = TokensWithLogprobs(
                tokens=moved + list(first.ac.tokens),
                maybe_logprobs=[0.0] * len(moved) + list(first.ac.logprobs),
                stop_reason=first.ac.stop_reason,
            )
            trajectory.transitions[0] = Transition(
                ob=tinker.ModelInput.from_ints(ob[: -self.tokens]),
                ac=ac,
                reward=first.reward,
                episode_done=first.episode_done,
                metrics=first.metrics,
                logs=first.logs,
            )
        return out

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()


class ThinkPrefillRenderer(Qwen3Renderer):
    """Qwen3's renderer with an R1-style generation prompt: it opens the think block itself."""

    def build_generation_prompt(
        self, messages: list[Any], role: str = "assistant", prefill: str | None = None
    ) -> tinker.ModelInput:
        return super().build_generation_prompt(messages, role, "<think>\n" + (prefill or ""))


THINK_PREFILL_RENDERER = "rl_guards/tiny_think_prefill"
renderers.register_renderer(THINK_PREFILL_RENDERER, lambda tokenizer, _images=None: ThinkPrefillRenderer(tokenizer))


class TinyTasksDataset(RLDataset):
    """``n_batches`` batches of ``batch_size`` groups, tasks alternating, reproducible by ``seed``."""

    def __init__(self, builder: TinyTasksDatasetBuilder, renderer: Any) -> None:
        self.b = builder
        self.renderer = renderer

    def __len__(self) -> int:
        return self.b.n_batches

    def _env(self, example: Example, tag: str) -> TinyTaskEnv:
        grader = self.b.grader if tag in self.b.planted_tasks else "right"
        return TinyTaskEnv(example, self.renderer, grader=grader, prefill=self.b.prefill, stop=self.b.stop,
                           raw_text=self.b.raw_text and tag in self.b.planted_tasks)  # fmt: skip

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        examples = make_examples(self.b.batch_size, tuple(self.b.tasks), seed=self.b.seed * 100_003 + index)
        examples = examples[: self.b.batch_size]
        out: list[EnvGroupBuilder] = []
        rng = random.Random(f"{self.b.seed}:{index}")
        for i, example in enumerate(examples):
            tag = self.b.tags[i % len(self.b.tags)] if self.b.tags else example.task
            if self.b.mixed_groups:
                others = make_examples(self.b.group_size, (example.task,), seed=rng.randint(0, 10**9))
                builder: EnvGroupBuilder = MixedProblemsGroupBuilder(
                    tuple(partial(self._env, e, tag) for e in others), tag
                )
            else:
                builder = ProblemGroupBuilder(
                    env_thunk=partial(self._env, example, tag), num_envs=self.b.group_size, dataset_name=tag
                )
            if self.b.move_header:
                builder = HeaderIntoActionGroupBuilder(builder, self.b.move_header)
            out.append(builder)
        return out


@chz.chz
class TinyTasksDatasetBuilder(RLDatasetBuilder):
    """The tiny fixture's tasks as a cookbook dataset (see the module docstring)."""

    # Groups per batch and rollouts per group.
    batch_size: int
    group_size: int
    # The tokenizer's folder (the tiny model's) and the renderer the envs prompt with.
    model_name_for_tokenizer: str
    renderer_name: str
    n_batches: int = 100
    tasks: tuple[str, ...] = ("arith", "echo")
    # Group i's logging tag is tags[i % len(tags)] (default: its task's name).
    tags: tuple[str, ...] = ()
    seed: int = 0
    # Planted failures (off by default).
    grader: str = "right"  # the planted tags' check_answer (TinyTaskEnv.GRADERS; "never": no answer is ever right)
    planted_tasks: tuple[str, ...] = ("echo",)  # the tags grader and raw_text apply to
    raw_text: bool = False  # the planted tags' step grades the decoded response, thinking included
    prefill: str | None = None  # an assistant prefill every env adds to its prompt
    mixed_groups: bool = False  # each group holds group_size different problems
    move_header: int = 0  # move this many observation tokens into each action after grading
    # False: sample without stop sequences (every completion runs to max_tokens: a benchmark's fixed length)
    stop: bool = True

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        tokenizer = get_tokenizer(self.model_name_for_tokenizer)
        return TinyTasksDataset(self, renderers.get_renderer(self.renderer_name, tokenizer)), None


__all__ = [
    "THINK_PREFILL_RENDERER",
    "HeaderIntoActionGroupBuilder",
    "MixedProblemsGroupBuilder",
    "ThinkPrefillRenderer",
    "TinyTaskEnv",
    "TinyTasksDataset",
    "TinyTasksDatasetBuilder",
]
