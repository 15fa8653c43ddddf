"""Hand-built rollout batches for the rollouts tests: real Qwen3 tokenizer, real chat template."""

from __future__ import annotations

import functools
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.guards.base import GuardSession, Reporter, RunContext
from rl_guards.guards.recorder import RolloutRecorder

REWARD_NAMES = ["arith_correct", "echo_match"]

# (task, question, [completions of the group]); a completion ending in "|TRUNC" is cut before EOS.
GROUPS: list[tuple[str, str, list[str]]] = [
    ("arith", "What is 3+4?", ["<think>\n3+4=7\n</think>\n\n7", "<think>\nhmm\n</think>\n\n8"]),
    ("echo", "Repeat the word: apple", ["<think>\nok\n</think>\n\napple", "<think>\nthe word is|TRUNC"]),
    ("arith", "What is 2+2?", ["4", " 4 \t"]),
]


@functools.lru_cache(maxsize=1)
def tokenizer() -> Any:
    from rl_guards.testing import build_tokenizer

    return build_tokenizer()


def decode(ids: list[int]) -> str:
    return tokenizer().decode(ids, skip_special_tokens=False)


def context(output_dir: str, main: bool = True) -> RunContext:
    tok = tokenizer()
    return RunContext(
        output_dir=output_dir,
        is_main_process=main,
        tokenizer=tok,
        decode=decode,
        chat_template=tok.chat_template,
        eos_token_ids=[tok.convert_tokens_to_ids("<|im_end|>")],
        pad_token_id=tok.pad_token_id,
    )


def render_prompt(question: str) -> list[int]:
    tok = tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def make_batch(
    step: int,
    groups: list[tuple[str, str, list[str]]] | None = None,
    *,
    marker: str = "",
    mode: str = "train",
    scores: list[float] | None = None,
) -> RolloutBatch:
    """One batch; ``marker`` is appended to every completion so tests can tell two runs apart. Each row is
    scored by its task's function only: 1.0 for the first completion of a group, else 0.0, unless ``scores``."""
    tok = tokenizer()
    groups = groups or GROUPS
    num_generations = len(groups[0][2])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    rows: dict[str, list[Any]] = {k: [] for k in ("tasks", "completions", "ids", "prompts", "trunc", "rewards")}
    for task, question, completions in groups:
        for k, completion in enumerate(completions):
            truncated = completion.endswith("|TRUNC")
            text = completion.removesuffix("|TRUNC") + marker
            ids = tok.encode(text, add_special_tokens=False) + ([] if truncated else [eos])
            correct = scores[len(rows["tasks"])] if scores is not None else (1.0 if k == 0 else 0.0)
            rows["tasks"].append(task)
            rows["completions"].append(text)
            rows["ids"].append(ids)
            rows["prompts"].append(render_prompt(question))
            rows["trunc"].append(truncated)
            rows["rewards"].append([correct, None] if task == "arith" else [None, correct])
    n = len(rows["tasks"])
    return RolloutBatch(
        step=step,
        mode=mode,
        num_generations=num_generations,
        reward_names=list(REWARD_NAMES),
        reward_weights=[1.0, 1.0],
        rewards=rows["rewards"],
        advantages=[0.5 if i % 2 == 0 else -0.5 for i in range(n)],
        tasks=rows["tasks"],
        completions=rows["completions"],
        completion_ids=rows["ids"],
        prompt_ids=rows["prompts"],
        truncated=rows["trunc"],
        thinking=[True] * n,
        max_completion_length=16,
        prompts=[[{"role": "user", "content": q}] for _, q, cs in groups for _ in cs],
        columns={"answer": [str(i) for i in range(n)]},
        epoch=step / 10,
    )


class Harness:
    """A recorder plus the session it reports into, driven like the hook drives it."""

    def __init__(self, run_dir: str, *, main: bool = True, **rollouts: Any) -> None:
        self.config = GuardsConfig.from_dict({"rollouts": rollouts})
        self.recorder = RolloutRecorder(self.config)
        self.recorder.setup(context(run_dir, main))
        self.session = GuardSession()

    def report(self, step: int | None) -> Reporter:
        return self.session.reporter(self.recorder.name, self.recorder.config, step)

    def begin(self, step: int) -> None:
        self.recorder.on_train_begin(self.report(step))

    def batch(self, batch: RolloutBatch) -> None:
        """The hook's order for one batch; then wait for the background writer, so files can be read."""
        self.recorder.on_batch(batch, self.report(batch.step))
        self.recorder.after_batch(batch, self.report(batch.step))
        self.recorder.flush(self.report(batch.step))

    def save(self, checkpoint: int) -> None:
        self.recorder.on_save(f"{self.recorder.ctx.output_dir}/checkpoint-{checkpoint}", self.report(checkpoint))

    def metric(self, name: str) -> list[float]:
        return self.session.metrics.get(f"rl_guards/rollouts/{name}", [])
