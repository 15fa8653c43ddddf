"""A guarded GRPO run for ``torchrun`` (or plain ``python`` for one process).

Used by tests/distributed/test_hook_multiproc.py.

Usage: ``torchrun --nproc_per_node 2 guarded_run.py OUT_DIR`` with ``RL_GUARDS_CACHE`` pointing at a built fixture.
Writes, per rank, every gathered RolloutBatch the guards saw (``batches_rank<r>.jsonl``) and the guard metrics
that rank put in the trainer's buffer; the main process also writes ``log_history.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict
from typing import ClassVar

import torch


def main(out_dir: str) -> None:
    torch.set_num_threads(1)
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.config import GuardsConfig
    from rl_guards.core.batch import RolloutBatch
    from rl_guards.guards.base import Guard, Reporter
    from rl_guards.guards.registry import BATCH_GUARDS
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match

    rank = int(os.environ.get("RANK", "0"))

    class BatchTap(Guard):
        """Writes each batch this rank saw (numbers for every row, text for the rows it holds), to compare ranks
        and to replay the merged rows in one process."""

        name: ClassVar[str] = "tap"
        config_field: ClassVar[str] = "tasks"

        def on_batch(self, batch: RolloutBatch, report: Reporter) -> None:
            skip = ("decode", "prompts", "local_rows", "evidence", "reward_inputs")
            row = {k: v for k, v in asdict(batch).items() if k not in skip}
            held = batch.held_rows
            row["held"] = [held.start, held.stop]
            row["thread"] = threading.current_thread().name
            with open(os.path.join(out_dir, f"batches_rank{rank}.jsonl"), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    tiny = tiny_setup()
    config = GuardsConfig.from_dict(json.loads(os.environ.get("GUARDS_CONFIG", "{}")))
    args = tiny_grpo_config(
        out_dir,
        max_steps=int(os.environ.get("MAX_STEPS", "3")),
        per_device_train_batch_size=int(os.environ.get("PER_DEVICE_BATCH", "6")),
        num_generations=4,
        save_strategy="steps",
        save_steps=2,
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
        ddp_timeout=int(os.environ.get("DDP_TIMEOUT", "1800")),  # short in tests: a desync fails instead of hanging
    )
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.load_tokenizer(),
        reward_funcs=[arith_correct, echo_match],
        args=args,
        train_dataset=make_dataset(n_per_task=12),
    )
    run = rl_guards.install(trainer, config, guards=[*BATCH_GUARDS, BatchTap])
    fail_rank = os.environ.get("FAIL_RANK")
    if fail_rank is not None and int(fail_rank) == rank:
        # Fault injection: this rank's row building breaks at step 1; the others must not wait forever.
        build_rows = run._local_rows

        def broken_rows(output: object, pending: object) -> object:
            if trainer.state.global_step == 1:
                raise RuntimeError("injected failure while building rows")
            return build_rows(output, pending)

        run._local_rows = broken_rows
    fail_probe_rank = os.environ.get("FAIL_PROBE_RANK")
    if fail_probe_rank is not None and int(fail_probe_rank) == rank:
        # Fault injection: generation runs out of memory on this rank alone during the drift probe before the
        # checkpoint (the trainer is about to save; its own rollouts never run then).
        generate = trainer._generate_single_turn

        def out_of_memory(*args: object, **kwargs: object) -> object:
            if trainer.control.should_save:
                raise torch.OutOfMemoryError("injected: CUDA out of memory during the probe generation")
            return generate(*args, **kwargs)

        trainer._generate_single_turn = out_of_memory
    trainer.train()
    if trainer.accelerator.is_main_process:
        with open(os.path.join(out_dir, "log_history.json"), "w", encoding="utf-8") as fh:
            json.dump(trainer.state.log_history, fh)
        with open(os.path.join(out_dir, "summary.txt"), "w", encoding="utf-8") as fh:
            fh.write(run.summary())


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    finally:
        # An orderly gloo teardown: a process group left for the interpreter's exit can abort a rank after the run
        # finished ("terminate called without an active exception", pytorch/pytorch#190489).
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
