"""A guarded GRPO run for ``torchrun`` (or plain ``python`` for one process).

Used by tests/distributed/test_hook_multiproc.py.

Usage: ``torchrun --nproc_per_node 2 guarded_run.py OUT_DIR`` with ``RL_GUARDS_CACHE`` pointing at a built fixture.
Writes, per rank, every gathered RolloutBatch the guards saw (``batches_rank<r>.jsonl``) and the guard metrics
that rank put in the trainer's buffer, and the run's summary and findings as that rank ended it
(``summary_rank<r>.txt``, ``findings_rank<r>.json``, also when training raised); the main process also writes
``log_history.json``.

Fault injection (``INJECT=<site>``, on rank ``INJECT_RANK``, default 1): the first time that rank reaches the
collective site, the call raises instead (as the rank's own code just before it would); see ``SITES``. ``STOP_AT``:
a guard stops the run (GuardError) on rank 0 at that step; ``SHOW_AT``: a finding shows a row of each rank then.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, ClassVar

import torch

# rl_guards' own collective sites: the function of rl_guards.tensors.collectives it calls, and the frames (function
# names) on the stack that tell this site from the others calling it
SITES: dict[str, tuple[str, tuple[str, ...]]] = {
    "own_group": ("own_group", ("own_group",)),  # Engine.__init__: the engine's own gloo group
    "feature_gather": ("gather_feature_rows", ("finish",)),  # Assembly.finish: every rank's per-row numbers
    "task_names": ("all_gather_objects", ("_task_names_of",)),  # Assembly: names of tasks new to the run
    "decide": ("all_reduce_ints", ("decide", "_decide")),  # Agreement.decide, a batch's stop decision
    "stop_message": ("all_gather_objects", ("_stop_error",)),  # Agreement.share: the stopping rank's message
    "rows_everywhere": ("all_gather_objects", ("fill_rows",)),  # Assembly.fill_rows: rows a message shows
    "rows_to_main": ("gather_objects_to_main", ("fill_rows",)),  # Assembly.fill_rows: a dump's rows
    "probe_numbers": ("gather_feature_rows", ("_probe",)),  # DriftGuard: the probe's per-completion numbers
}
# TRL's collectives reached from rl_guards' probe generation, and rl_guards' own code around them in the probe
PROBE_SITES = ("probe_setup", "trl_gather", "trl_rewards", "trl_logs", "probe_results")


def _on_stack(name: str) -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def _once(site: str, rank: int, original: Callable[..., Any], when: Callable[[], bool]) -> Callable[..., Any]:
    """``original``, except that its first call where ``when()`` holds raises."""
    fired: list[bool] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not fired and when():
            fired.append(True)
            raise RuntimeError(f"injected at {site} on rank {rank}")
        return original(*args, **kwargs)

    return call


def inject_collective(site: str, rank: int) -> None:
    """rl_guards' own collective at ``site`` raises on this rank, once."""
    from rl_guards.tensors import collectives

    name, frames = SITES[site]
    original = getattr(collectives, name)
    setattr(collectives, name, _once(site, rank, original, lambda: all(_on_stack(f) for f in frames)))


def inject_probe(site: str, rank: int, trainer: Any, run: Any) -> None:
    """A collective of TRL's path (or rl_guards' code before or after it) raises on this rank in the first probe."""
    import trl.trainer.grpo_trainer as grpo

    import rl_guards.trl.probe_generation as probe_generation

    in_probe = lambda: _on_stack("probe_generate")  # noqa: E731
    if site == "probe_setup":  # before TRL's path: building the probe's soft stages
        stages = probe_generation._SoftLocalStages
        stages.__init__ = _once(site, rank, stages.__init__, in_probe)  # type: ignore[method-assign]
    elif site == "trl_gather":  # the prompt and completion lengths, the first of TRL's collectives
        trainer.accelerator.gather = _once(site, rank, trainer.accelerator.gather, in_probe)
    elif site == "trl_rewards":
        grpo.gather = _once(site, rank, grpo.gather, in_probe)
    elif site == "trl_logs":
        grpo.gather_object = _once(site, rank, grpo.gather_object, in_probe)
    elif site == "probe_results":  # after TRL's path: reading the probe's completions
        generate = run._original_generate

        class Unreadable(dict):  # type: ignore[type-arg]
            def __getitem__(self, key: Any) -> Any:
                if key == "completion_ids":
                    raise RuntimeError(f"injected at {site} on rank {rank}")
                return super().__getitem__(key)

        run._original_generate = lambda batch: Unreadable(generate(batch))


def main(out_dir: str) -> None:
    torch.set_num_threads(1)
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.config import GuardsConfig
    from rl_guards.core.batch import RolloutBatch
    from rl_guards.errors import GuardError
    from rl_guards.guards.base import Guard, Reporter
    from rl_guards.guards.registry import BATCH_GUARDS
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match

    rank = int(os.environ.get("RANK", "0"))
    inject = os.environ.get("INJECT")
    injected = inject is not None and rank == int(os.environ.get("INJECT_RANK", "1"))
    if injected and inject in SITES:
        inject_collective(inject, rank)

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
            if batch.step == int(os.environ.get("SHOW_AT", "-1")):  # a finding showing a row held by each rank
                report.suspect("shown", lambda: "rows shown", rows=[0, len(batch) - 1])
            if batch.step == int(os.environ.get("STOP_AT", "-1")) and rank == 0:
                raise GuardError("[rl_guards/tap] stopped by the test", guard="tap", step=batch.step)

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
    if inject == "task_names":  # every rank: the batch's task names are then exchanged, as a new task's would be
        run.engine.assembly.task_registry.clear()
    if injected and inject in PROBE_SITES:
        inject_probe(inject, rank, trainer, run)
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
    try:
        trainer.train()
    finally:
        with open(os.path.join(out_dir, f"summary_rank{rank}.txt"), "w", encoding="utf-8") as fh:
            fh.write(run.summary())
        with open(os.path.join(out_dir, f"findings_rank{rank}.json"), "w", encoding="utf-8") as fh:
            json.dump([[f.guard, f.kind, f.message] for f in run.findings], fh)
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
