"""Kill a guarded GRPO run with SIGKILL at random points, resume it each time, until it finishes (a test helper).

Usage: ``python kill_campaign.py OUT_DIR --seed S --kills K [--max_steps 11]`` with ``RL_GUARDS_CACHE`` pointing at
a built tiny fixture. Writes ``OUT_DIR/campaign.json``: the kill points chosen and what happened to each attempt.
``--kills 0`` runs once without a kill (the uninterrupted reference).

This process imports torch / TRL / rl_guards once and forks one child per attempt (saving ~5 s of imports each);
the child trains and SIGKILLs itself at its kill point, or finishes. Kill points:

- ``step``: at the end of a random optimizer step (between two steps);
- ``dump_write``: inside a rollout dump's Parquet write, after part of the file is on disk;
- ``mid_checkpoint``: inside the trainer's checkpoint save, after the model but before ``trainer_state.json``;
- ``after_checkpoint``: right after a checkpoint is complete, before any later callback runs.

Each attempt resumes from the newest complete checkpoint (the Trainer writes ``trainer_state.json`` last), or starts
over when there is none, exactly as a user's restart script would. ``--mode`` varies how (issue 22):

- ``plain``: as above;
- ``restore_callbacks``: every attempt with ``restore_callback_states_from_checkpoint=True``;
- ``unguarded_first``: the first attempt trains without rl_guards and is killed after its first checkpoint; the
  others resume that checkpoint with the guards;
- ``damaged``: before each resume, the rl_guards section of the checkpoint it resumes from, as it was written, is
  damaged (``DAMAGES`` in turn, one per resume), and every other attempt also restores the callbacks' states.

Each guarded attempt appends to ``OUT_DIR/restores.jsonl`` what its run restored at train begin: the checkpoint,
the batches seen, and how many times rl_guards warned that it could not restore the saved state.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

KILL_POINTS = ("step", "dump_write", "mid_checkpoint", "after_checkpoint")
MODES = ("plain", "restore_callbacks", "unguarded_first", "damaged")
SAVE_STEPS = 2
EVERY_STEPS = 1  # every batch dumped: the test replays the guards over the final trajectory's rows
SECTION_KEYS = ("GuardRunState", "GuardRun")  # the rl_guards section of stateful_callbacks (GuardRun up to 437f4ff)


def _extra_field(saved: Any) -> Any:  # a finding saved by a newer version, with a field this one lacks
    saved["attributes"]["session"]["findings"].append(
        {"guard": "x", "kind": "y", "severity": "warning", "message": "m", "step": 0, "added_later": True}
    )
    return saved


def _missing_field(saved: Any) -> Any:  # a count row without its count
    saved["attributes"]["session"]["counts"].append(["x", "y"])
    return saved


def _wrong_type(saved: Any) -> Any:
    saved["attributes"]["batches_seen"] = "two"
    return saved


def _future_version(saved: Any) -> Any:
    saved["attributes"]["version"] = 99
    return saved


DAMAGES = {
    "extra_field": _extra_field,
    "missing_field": _missing_field,
    "wrong_type": _wrong_type,
    "not_a_dict": lambda saved: "garbage",
    "future_version": _future_version,
}


def damage_checkpoint(checkpoint: Path, name: str, written: str) -> None:
    """Write ``checkpoint``'s trainer_state.json as ``written`` with ``DAMAGES[name]`` applied to its rl_guards
    section."""
    path = checkpoint / "trainer_state.json"
    state = json.loads(written)
    key = next(k for k in SECTION_KEYS if k in state["stateful_callbacks"])
    state["stateful_callbacks"][key] = DAMAGES[name](state["stateful_callbacks"][key])
    path.write_text(json.dumps(state, indent=2))


def newest_checkpoint(out: Path) -> Path | None:
    done = [p for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
    return max(done, key=lambda p: int(p.name.split("-")[1])) if done else None


def child(
    out: Path, max_steps: int, point: str | None, nth: int, resume: Path | None, guarded: bool, restore: bool
) -> None:
    """Train (resuming from ``resume``); SIGKILL at the ``nth`` occurrence of ``point`` (None: never). ``guarded``:
    with rl_guards; ``restore``: with ``restore_callback_states_from_checkpoint=True``."""
    import logging

    import pyarrow.parquet as pq
    import torch
    from grpo_run import build_trainer
    from transformers import Trainer, TrainerCallback

    import rl_guards

    torch.set_num_threads(1)
    seen = {"n": 0}

    def hit() -> bool:
        seen["n"] += 1
        return seen["n"] == nth

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "dump_write":
        real_write = pq.write_table

        def write_table(table: Any, where: Any, *args: Any, **kwargs: Any) -> None:
            if "step_" in str(where) and hit():
                with open(where, "wb") as fh:  # a torn file, as a kill mid-write leaves it
                    fh.write(b"PAR1" + b"\0" * 100)
                die()
            real_write(table, where, *args, **kwargs)

        pq.write_table = write_table
    if point == "mid_checkpoint":
        real_rng = Trainer._save_rng_state

        def save_rng_state(self: Any, output_dir: str) -> None:
            real_rng(self, output_dir)
            if hit():
                die()

        Trainer._save_rng_state = save_rng_state

    class KillPoint(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if point == "step" and hit():
                die()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if point == "after_checkpoint" and hit():
                die()

    said: list[str] = []

    class NotRestored(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "could not be restored" in record.getMessage():
                said.append(record.getMessage())

    class Restored(TrainerCallback):  # added after the guards: runs once they restored their state
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            line = {"resumed_from": resume.name if resume else None, "batches_seen": run.batches_seen}
            line |= {"restore": restore, "not_restored_warnings": len(said)}
            with open(out / "restores.jsonl", "a") as fh:
                fh.write(json.dumps(line) + "\n")

    overrides = {"restore_callback_states_from_checkpoint": True} if restore else {}
    # KillPoint before the guards' callback
    trainer = build_trainer(str(out), max_steps, [KillPoint()], save_steps=SAVE_STEPS, **overrides)
    config = {
        "rollouts": {"every_steps": EVERY_STEPS, "wandb_rows_per_task": 0},
        "truncation": {"max_rate": 0.5},
        "metrics": "full",  # the per-task row counts, checked against the dumps
    }
    if guarded:
        logging.getLogger("rl_guards").addHandler(NotRestored())
        run = rl_guards.install(trainer, config)
        trainer.add_callback(Restored())
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    trainer.save_state()


def attempt(
    out: Path, max_steps: int, point: str | None, nth: int, guarded: bool = True, restore: bool = False
) -> dict[str, Any]:
    resume = newest_checkpoint(out)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child never returns into this loop
        code = 1
        try:
            log = open(out / "attempts.log", "a", buffering=1)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            child(out, max_steps, point, nth, resume, guarded, restore)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return {
        "point": point,
        "nth": nth,
        "resumed_from": resume.name if resume else None,
        "killed": killed,
        "guarded": guarded,
        "restore": restore,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--max_steps", type=int, default=11)
    parser.add_argument("--mode", choices=MODES, default="plain")
    args = parser.parse_args(argv)
    import torch  # noqa: F401 - imported once here, shared by every forked attempt
    import trl  # noqa: F401

    import rl_guards.trl.hook  # noqa: F401
    from rl_guards.testing import tiny_setup

    tiny_setup()  # built (or loaded) once, before forking
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    attempts = []
    written: dict[str, str] = {}  # checkpoint -> its trainer_state.json as the trainer wrote it
    damages: list[str] = []  # the damage done before each resume, in turn
    if args.mode == "unguarded_first":  # a run without rl_guards, killed once its first checkpoint is complete
        attempts.append(attempt(out, args.max_steps, "after_checkpoint", 1, guarded=False))

    def resume_setup(n: int) -> dict[str, Any]:
        """How the ``n``-th guarded attempt resumes (damaging its checkpoint first in ``damaged`` mode)."""
        resume = newest_checkpoint(out)
        damage = None
        if args.mode == "damaged" and resume is not None:
            damage = list(DAMAGES)[len(damages) % len(DAMAGES)]
            damages.append(damage)
            text = written.setdefault(resume.name, (resume / "trainer_state.json").read_text())
            damage_checkpoint(resume, damage, text)
        restore = args.mode == "restore_callbacks" or (args.mode == "damaged" and n % 2 == 1)
        return {"restore": restore, "damage": damage}

    for n in range(args.kills):
        # Which occurrence of the point kills, within what is left of the run: steps, dump writes and checkpoints
        # still to come. Never right after the final checkpoint: resuming from it makes transformers train one
        # step past max_steps (its own quirk, not what this campaign tests).
        resume = newest_checkpoint(out)
        left = args.max_steps - (int(resume.name.split("-")[1]) if resume else 0)
        checkpoints = len(range(args.max_steps - left + SAVE_STEPS, args.max_steps, SAVE_STEPS)) + 1
        ahead = {"step": left, "dump_write": left, "mid_checkpoint": checkpoints, "after_checkpoint": checkpoints - 1}
        point = rng.choice([p for p in KILL_POINTS if ahead[p] >= 1])
        setup = resume_setup(n)
        result = attempt(out, args.max_steps, point, rng.randint(1, ahead[point]), restore=setup["restore"])
        attempts.append(result | {"damage": setup["damage"]})
        if not result["killed"]:  # the run got to its end before the kill point
            break
    if not attempts or attempts[-1]["killed"]:
        setup = resume_setup(len(attempts))
        attempts.append(attempt(out, args.max_steps, None, 0, restore=setup["restore"]) | {"damage": setup["damage"]})
    summary = {"seed": args.seed, "mode": args.mode, "attempts": attempts}
    (out / "campaign.json").write_text(json.dumps(summary, indent=1))
    return 0 if attempts[-1]["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
