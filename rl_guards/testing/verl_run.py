"""verl's own training-side path on a CPU, with the tiny fixture generating: for tests, the example, benchmarks.

What runs is verl 0.9's code: its Hydra config (``ppo_trainer``), its dataset and collate (``RLHFDataset``), its
TransferQueue, its agent loop workers (chat template, tokenization, padding, truncation) and reward loop workers as
Ray actors, and the V1 trainer's own methods that need no GPU (``_init_dataloader``, ``_build_replay_buffer``,
``_submit_batch_to_rollout``; the sampling ``_step_once`` starts with). What cannot run here (no GPU, no vLLM) is
replaced by the least that can: the rollout server by :class:`~rl_guards.testing.verl_server.TinyRolloutServer`
(the tiny model's sampled tokens), and the trainer's FSDP workers (log-probs, the update, checkpoint writes) are
not run: a step here is rollout, scoring and the sampling of the batch, which is where the guards look.

::

    ray.init(num_cpus=2)
    config = compose_config(model_dir, out_dir, rows=verl_rows(), overrides=[...])
    trainer = TinyV1Trainer(config, model_dir)
    metrics = trainer.step()           # one step: prompts to the rollout, rows sampled (the guards run here)
    trainer.save()                     # what verl's checkpoint callback is told after a save
    trainer.close()
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rl_guards.testing.data import ECHO_WORDS

# Data sources of the tiny tasks (verl routes scorers by data_source).
ARITH, ECHO = "tiny/arith", "tiny/echo"

GUARDED_OVERRIDES = (
    "reward.reward_manager.source=importlib",
    "reward.reward_manager.name=GuardedRewardManager",
    "reward.reward_manager.module.path=pkg://rl_guards.verl",
    "trainer.v1.sampler.custom_sampler.path=pkg://rl_guards.verl",
    "trainer.v1.sampler.custom_sampler.name=GuardedReplayBuffer",
    "trainer.checkpoint_callback_class=rl_guards.verl.GuardedCheckpointCallback",
)


def tiny_compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kw: Any):
    """A verl ``compute_score`` for the tiny tasks, on the answer after any think block: 1 for the right answer, and
    partial credit for a near miss (a number closer to the sum, a word closer to the one to repeat), so that the
    tiny model's groups mostly have a reward spread; other data sources go to verl's ``default_compute_score``, as
    users' scorers usually do."""
    import difflib

    answer = solution_str.rsplit("</think>", 1)[-1]
    if data_source == ARITH:
        numbers = re.findall(r"-?\d+", answer)
        if not numbers:
            return 0.0
        miss = abs(int(numbers[-1]) - int(ground_truth))
        return 1.0 if miss == 0 else 0.5 / (1 + miss)
    if data_source == ECHO:
        words = re.findall(r"[A-Za-z]+", answer)
        if not words:
            return 0.0
        word, truth = words[-1].lower(), str(ground_truth).lower()
        return 1.0 if word == truth else 0.5 * difflib.SequenceMatcher(None, word, truth).ratio()
    from verl.utils.reward_score import default_compute_score

    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kw)


def verl_row(prompt: str, data_source: str, answer: Any, index: int, **extra: Any) -> dict[str, Any]:
    """One dataset row in verl's parquet layout (what its data preprocessing scripts write)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "tiny",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": "train", "index": index, **extra},
    }


def verl_rows(n_per_task: int = 4, tasks: Sequence[str] = (ARITH, ECHO)) -> list[dict[str, Any]]:
    """The tiny tasks (``rl_guards.testing.data``) as verl rows: arithmetic and echo prompts, one data source each."""
    rows: list[dict[str, Any]] = []
    for i in range(n_per_task):
        if ARITH in tasks:
            a, b = i % 5 + 1, (3 * i) % 7 + 1
            rows.append(verl_row(f"What is {a}+{b}? Answer with the number.", ARITH, a + b, len(rows)))
        if ECHO in tasks:
            word = ECHO_WORDS[i % len(ECHO_WORDS)]
            rows.append(verl_row(f"Repeat the word: {word}", ECHO, word, len(rows)))
    return rows


def write_parquet(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> str:
    """Rows to a parquet file verl's ``RLHFDataset`` reads."""
    import pandas as pd

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def compose_config(
    model_dir: str,
    out_dir: str | os.PathLike[str],
    *,
    rows: list[dict[str, Any]] | None = None,
    overrides: Sequence[str] = (),
    response_length: int = 32,
    n: int = 4,
    train_batch_size: int = 2,
    scorer: str | None = None,
) -> Any:
    """verl's ``ppo_trainer`` config, composed by Hydra as ``python -m verl.trainer.main_ppo`` composes it, for the
    tiny model on CPU with rl_guards' manager, sampler and checkpoint callback. ``scorer``: ``path.py:fn`` for
    ``reward.custom_reward_function`` (default: :func:`tiny_compute_score`, loaded from this file); ``"verl"``: none,
    verl's ``default_compute_score`` scores."""
    import verl
    from hydra import compose, initialize_config_dir

    out = Path(out_dir)
    data = write_parquet(out / "data" / "train.parquet", rows if rows is not None else verl_rows())
    scorer = scorer or f"{__file__}:tiny_compute_score"
    path, name = scorer.rsplit(":", 1) if scorer != "verl" else ("null", "null")
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    base = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={train_batch_size}",
        "data.max_prompt_length=64",
        f"data.max_response_length={response_length}",
        "data.dataloader_num_workers=0",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={path}",
        f"reward.custom_reward_function.name={name}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        "trainer.logger=[console]",
        "trainer.total_training_steps=1000",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        *GUARDED_OVERRIDES,
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*base, *overrides])


class TinyV1Trainer:
    """verl's V1 (sync) trainer as far as it runs without a GPU: its dataloader, its replay buffer (the custom
    sampler of the config: rl_guards'), its agent loop and reward loop under the caller's Ray, TransferQueue.

    ``step()`` does what the trainer's ``fit`` does for one step up to the sampled batch (``prepare_step``, then
    ``replay_buffer.sample`` as ``_step_once`` calls it, the metrics through verl's ``MetricsAggregator``, then the
    batch cleared from TransferQueue) and returns the step's metrics; the guards raise their stop from it.
    """

    def __init__(self, config: Any, model_dir: str, *, server: Any = None, max_new_tokens: int | None = None) -> None:
        import transfer_queue as tq
        from omegaconf import OmegaConf
        from verl.experimental.reward_loop import RewardLoopManager
        from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

        from rl_guards.testing.verl_server import TinyRolloutServer

        config.transfer_queue.enable = True
        OmegaConf.resolve(config)  # as TaskRunnerV1.run does before building the trainer
        tq.init(config.transfer_queue)
        self.config = config
        trainer = PPOTrainerSync.__new__(PPOTrainerSync)  # its __init__ builds GPU worker groups: set its fields
        trainer.config = config
        trainer.trainer_mode = "sync"
        trainer.parameter_sync_step = 1
        trainer.global_steps = 1
        trainer.checkpoint_callback = build_checkpoint_callback(config)
        trainer._init_tokenizer()
        trainer._init_dataloader()
        trainer.replay_buffer = trainer._build_replay_buffer()
        self.reward_loop = RewardLoopManager(config)
        length = int(config.actor_rollout_ref.rollout.response_length)
        server = server or TinyRolloutServer(model_dir, max_new_tokens or length)
        trainer.agent_loop_manager = AgentLoopManagerTQ.create(
            config=config,
            llm_client=server,
            teacher_client=None,
            reward_loop_worker_handles=self.reward_loop.reward_loop_worker_handles,
        )
        self.trainer = trainer

    def fresh_guards(self, section: dict[str, Any]) -> Any:
        """A new sampler (verl's ``_build_replay_buffer`` again) whose guards read ``reward.rl_guards`` merged with
        ``section`` (e.g. another ``output_dir`` and guard modes); the reward workers keep the settings they started
        with. Returns the new guard run."""
        from omegaconf import OmegaConf, open_dict

        from rl_guards.verl.settings import plain

        with open_dict(self.config):
            base = plain(self.config.reward.get("rl_guards")) or {}
            self.config.reward.rl_guards = OmegaConf.merge(base, section)
        self.trainer.replay_buffer = self.trainer._build_replay_buffer()
        return self.guard_run

    @property
    def guard_run(self) -> Any:
        """The guards' run handle (``rl_guards.verl.run.VerlGuardRun``) of the replay buffer."""
        return getattr(self.trainer.replay_buffer, "run", None)

    def step(self, prompts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """One training step up to the sampled batch; ``prompts``: rows (:func:`verl_row`) instead of the dataset's
        next batch. The metrics are those verl would log for the step (the sampler's among them)."""
        import transfer_queue as tq
        from verl.trainer.ppo.v1.utils import MetricsAggregator

        trainer = self.trainer
        if prompts is None:
            trainer.prepare_step()
            batch_size = int(self.config.data.train_batch_size)
        else:
            trainer._submit_batch_to_rollout(self.prompt_batch(prompts))
            batch_size = len(prompts)
        batch, metrics = trainer.replay_buffer.sample(
            global_steps=trainer.global_steps, partition_id="train", batch_size=batch_size
        )
        tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        aggregator = MetricsAggregator()
        aggregator.add_step_metrics(metrics, sample_count=len(batch.keys))
        trainer.global_steps += 1
        return aggregator.get_aggregated_metrics()

    def prompt_batch(self, rows: list[dict[str, Any]]) -> Any:
        """Rows as the trainer's ``_next_train_batch`` makes a batch of them (verl's dataset item and collate)."""
        import tempfile
        import uuid

        import numpy as np
        from verl.trainer.ppo.utils import create_rl_dataset
        from verl.utils import tensordict_utils as tu
        from verl.utils.dataset.rl_dataset import collate_fn

        with tempfile.TemporaryDirectory() as tmp:
            path = write_parquet(Path(tmp) / "batch.parquet", rows)
            dataset = create_rl_dataset(path, self.config.data, self.trainer.tokenizer, None, is_train=True)
            items = [dataset[i] for i in range(len(dataset))]
        batch = collate_fn(items)
        batch["uid"] = np.array([str(uuid.uuid4()) for _ in items], dtype=object)
        tensors = tu.get_tensordict(batch)
        tu.assign_non_tensor_data(tensors, "global_steps", self.trainer.global_steps)
        return tensors

    def save(self, final: bool = False) -> None:
        """What verl's ``_save_checkpoint`` tells the checkpoint callback after a save of the last step (the actor
        and critic shards themselves are not written here)."""
        step = self.trainer.global_steps - 1
        folder = Path(self.config.trainer.default_local_dir) / f"global_step_{step}"
        folder.mkdir(parents=True, exist_ok=True)
        self.trainer.total_training_steps = step if final else int(self.config.trainer.total_training_steps)
        self.trainer.checkpoint_callback.on_save(trainer=self.trainer, global_step=step, checkpoint_dir=str(folder))

    def close(self) -> None:
        """TransferQueue closed and the actors of this trainer ended (Ray itself stays up)."""
        import ray
        import transfer_queue as tq

        for actor in [*self.trainer.agent_loop_manager.agent_loop_workers, *self.reward_loop.reward_loop_workers]:
            ray.kill(actor)
        tq.close()


__all__ = [
    "ARITH",
    "ECHO",
    "GUARDED_OVERRIDES",
    "TinyV1Trainer",
    "compose_config",
    "tiny_compute_score",
    "verl_row",
    "verl_rows",
    "write_parquet",
]
