"""What the run-time checks of issues 15 and 16 cost on the tiny fixture, measured in one run side by side.

- ``probe generations per checkpoint``: the drift guard generates its fixed probe prompts (``prompts_per_task`` x
  tasks x ``num_generations`` completions) at train start and before every checkpoint; printed as a share of the
  completions the run generated for training, and the wall time of those generations as a share of the run's.
- ``reward probes``: the reward-function probes' rounds, the texts each scored, and their wall time as a share of
  the run's (their budget: ``probes.budget`` of the run's elapsed time; ``bench_probe_budget.py`` measures it on a
  slow reward function).

The run is the example's setup (two tasks, routed rewards, length penalty, StrayThinkPenalty, a mixed thinking
column): ``--steps`` steps of 8 rows, a checkpoint every ``--save_steps``.

Run: ``.venv/bin/python benchmarks/bench_checks_cost.py [--steps 120] [--save_steps 20]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--save_steps", type=int, default=20)
    args = parser.parse_args(argv)

    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.guards.drift import DriftGuard
    from rl_guards.guards.probes import RewardProbeGuard
    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty
    from rl_guards.trl.thinking_mix import honour_thinking_column

    timers: dict[str, float] = {"drift": 0.0, "probes": 0.0}

    def timed(cls: Any, method: str, key: str) -> None:
        original = getattr(cls, method)

        def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(self, *a, **kw)
            finally:
                timers[key] += time.perf_counter() - start

        setattr(cls, method, wrapper)

    timed(DriftGuard, "_probe", "drift")
    timed(RewardProbeGuard, "scan", "probes")
    tiny = tiny_setup()
    penalty = StrayThinkPenalty()
    funcs = [*route({"arith": [arith_correct], "echo": [echo_match]}), length_penalty, penalty]
    with tempfile.TemporaryDirectory() as out:
        config = tiny_grpo_config(
            out,
            max_steps=args.steps,
            save_strategy="steps",
            save_steps=args.save_steps,
            max_completion_length=24,
            learning_rate=1e-6,
            chat_template_kwargs={"enable_thinking": True},
        )
        trainer = GRPOTrainer(
            model=tiny.model_dir,
            processing_class=tiny.load_tokenizer(),
            reward_funcs=funcs,
            args=config,
            train_dataset=make_dataset(n_per_task=4, thinking="mixed"),
        )
        honour_thinking_column(trainer)
        run = rl_guards.install(trainer, {"rollouts": {"every_steps": 1000, "on_save": False}})
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        drift, probes = run.guard("drift"), run.guard("probes")
        batch = config.per_device_train_batch_size
        trained = args.steps * batch
        probe_completions = (1 + len(drift.checkpoints)) * len(drift.indices) * config.num_generations
        per_checkpoint = len(drift.indices) * config.num_generations
        print(
            f"probe generations per checkpoint: {per_checkpoint} completions ({len(drift.indices)} prompts x "
            f"{config.num_generations}); {probe_completions} over the run (baseline + {len(drift.checkpoints)} "
            f"checkpoints) = {probe_completions / trained:.1%} of the {trained} training completions; "
            f"{timers['drift']:.2f} s = {timers['drift'] / wall:.1%} of the run's {wall:.1f} s"
        )
        print(
            f"reward probes: {probes.rounds} round(s) at step(s) {probes.coverage.get('steps', [])}, texts per round "
            f"{probes.texts}; {probes.spent:.2f} s probing = {probes.spent / wall:.1%} of the run (budget "
            f"{run.config.probes.budget:.0%} of the elapsed time); the scan hook in all {timers['probes']:.2f} s"
        )
        print(f"findings: {sorted({f.guard + '/' + f.kind for f in run.findings})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
