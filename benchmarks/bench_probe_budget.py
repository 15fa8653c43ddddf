"""The reward probes' time budget on a real GRPO run (issue 40 item 6): a reward function that takes 200 ms per call,
then 1 ms per call, over 300 steps, at the default ``probes.budget`` (2 % of the run's time).

Per run: the probes' wall time as a share of the run's (the largest share after any step, and at the end), the probe
rounds and their steps, the texts each round scored, and the findings (a correct grader: none expected). The delay is
per call (one invocation of the function, whatever the number of completions in it), as an API judge that batches
its requests costs; the probes call each function a few times per round, over every probed row at once.

Run: ``.venv/bin/python benchmarks/bench_probe_budget.py [--steps 300] [--delays 0.2 0.001]`` (about 4 minutes on
2 cores).
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


class SlowGrader:
    """The testing fixture's arithmetic grader, ``delay`` seconds per call (an API judge's round trip)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.__name__ = "slow_grader"

    def __call__(self, completions: list[Any], answer: list[str], **kwargs: Any) -> list[float | None]:
        from rl_guards.testing.rewards import arith_correct

        time.sleep(self.delay)
        return arith_correct(completions, answer)


def run_one(delay: float, steps: int) -> dict[str, Any]:
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup

    tiny = tiny_setup()
    with tempfile.TemporaryDirectory() as out:
        config = tiny_grpo_config(out, max_steps=steps, max_completion_length=24, learning_rate=1e-6,
                                  chat_template_kwargs={"enable_thinking": True})  # fmt: skip
        trainer = GRPOTrainer(
            model=tiny.model_dir,
            processing_class=tiny.load_tokenizer(),
            reward_funcs=[SlowGrader(delay)],
            args=config,
            train_dataset=make_dataset(n_per_task=16, tasks=("arith",), thinking=True),
        )
        run = rl_guards.install(trainer, {"rollouts": {"every_steps": 100000, "on_save": False}})
        probes = run.guard("probes")
        shares: list[float] = []
        scan = probes.scan

        def watched(batch: Any) -> Any:
            out = scan(batch)
            shares.append(probes.spent / max(probes.elapsed, 1e-9))
            return out

        probes.scan = watched  # type: ignore[method-assign]
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        return {
            "delay_s": delay,
            "steps": steps,
            "wall_s": round(wall, 1),
            "probe_s": round(probes.spent, 2),
            "share_end": probes.spent / wall,
            "share_max": max(shares[1:], default=0.0),
            "rounds": probes.rounds,
            "aborted": probes.aborted,
            "round_steps": list(probes.coverage.get("steps", [])),
            "texts": list(probes.texts),
            "findings": sorted(f"{f.guard}/{f.kind}" for f in run.findings if f.guard == "probes"),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--delays", type=float, nargs="+", default=[0.2, 0.001])
    args = parser.parse_args(argv)
    for delay in args.delays:
        r = run_one(delay, args.steps)
        print(
            f"reward {delay * 1000:g} ms per call, {r['steps']} steps: probes {r['probe_s']} s of {r['wall_s']} s = "
            f"{r['share_end']:.2%} of the run (largest after any step {r['share_max']:.2%}; budget 2%); "
            f"{r['rounds']} round(s) at step(s) {r['round_steps']} (and {r['aborted']} stopped by the budget before "
            "a row finished), "
            f"texts per round {r['texts']}; probe findings "
            f"{r['findings'] or 'none'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
