"""What rl_guards costs a GRPO run: step time with every guard on vs off, guard cost per batch, host transfers.

Sections (``--only step,batch,sync,scanner``; all by default):

- ``step``: a real tiny GRPO run (the ``examples/grpo_tiny.py`` setup: two routed tasks, length penalty,
  ``StrayThinkPenalty``, mixed thinking) with ``rl_guards.install(trainer, GuardsConfig())``. Guards are switched
  on and off per step INSIDE one trainer (the hook's two wrapped methods are swapped for TRL's originals in
  ``on_step_begin``), in pairs of one on-step and one off-step in random order, so machine load drifts cancel.
  Step time is the wall time from one ``on_step_begin`` to the next (generation, rewards, guards, loss, optimizer
  step, logging). Reports the ratio with its spread (per-pair median and IQR; ratio of means with a bootstrap
  95 % CI), the same on the process's CPU time (less sensitive to other load), and, measured directly inside
  the run, the guards' own milliseconds per step by part (``_GuardTimer``: the hook, the reward wrappers, the
  callbacks, the log's extra), with the reward probes (a time budget of their own) and rl_guards' reward functions
  (rewards the run chose) apart.
- ``batch``: CPU milliseconds per rollout batch of each guard's ``on_batch`` (the masking guard's
  ``check_tensors``), the hook's batch build (``trl.rollout_rows.local_rows`` + ``Assembly.assemble``: this rank's
  rows, the guards' scans, the numbers every rank gathers), and the reward-function wrappers, on synthetic batches
  (real Qwen vocabulary, think blocks, 8 completions per prompt, three tasks) at 64..4,096 rows and 256..8,192
  mean completion tokens (``--quick``: up to 1,024 x 1,024 and 256 x 4,096). Then the total per batch against
  assumed GPU step times: an EXTRAPOLATION.
- ``sync``: host-device transfers per batch, counted with a ``torch.overrides.TorchFunctionMode`` that sees
  every ``.tolist() / .item() / .cpu() / .numpy() / int() / float() / bool()`` / ``nonzero`` / ``.to(cpu)`` call
  on a tensor, at two batch sizes: a per-row sync would grow with the rows.
- ``scanner``: think-markup scanner MB/s vs TRL's ``think_format_reward`` on ``bench_scanner.py``'s corpus.

Run: ``.venv/bin/python benchmarks/bench_overhead.py [--quick | --full] [--only SECTIONS] [--pairs N]``
(prints tables; no assertions). Timings on a shared 2-core machine are noisy: read the spreads.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from rl_guards.config import GuardsConfig  # noqa: E402
from rl_guards.core.batch import RolloutBatch  # noqa: E402
from rl_guards.guards.base import Guard, GuardSession, RunContext, overrides  # noqa: E402
from rl_guards.guards.registry import BATCH_GUARDS  # noqa: E402

# ----- small statistics ----------------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (values need not be sorted)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def bootstrap_ci(
    pairs: list[tuple[float, float]], stat: Callable[[list[tuple[float, float]]], float], n: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95 % percentile bootstrap CI of ``stat`` over resampled pairs."""
    rng = random.Random(seed)
    k = len(pairs)
    draws = [stat([pairs[rng.randrange(k)] for _ in range(k)]) for _ in range(n)]
    return quantile(draws, 0.025), quantile(draws, 0.975)


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Best CPU milliseconds of this process over ``repeats`` calls.

    CPU time, not wall time: on a shared machine a waiting process's wall time grows with the load, its CPU time is
    what the call costs a core (guards are single-threaded Python; torch runs with 1 thread here).
    """
    best = math.inf
    for _ in range(max(1, repeats)):
        gc.collect()
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best * 1000


# ----- section: interleaved step time on the tiny GRPO run --------------------------------------------------------


class _GuardTimer:
    """The guards' own time inside the run, per step and part: wall and CPU of the training thread.

    Parts (``PARTS``): the hook on a guarded step (``GuardRun._after_generation``: the loss tensors' check, this
    rank's rows, the assembly, every guard's scan / on_batch / after_batch, metrics into the trainer's buffer; and
    the reward wrap's own part, TRL's reward call timed apart), with the reward probes' scan and on_batch taken out
    (their time budget is their own: ``probes.budget``); the reward-function wrappers install puts on every step
    (``CatchRowErrors``, ``route``'s own part: outer minus the function inside); the callbacks' own events
    (``GuardRun``, ``GuardRunState``; the console / tracker ``on_log`` wrappers minus the callback inside); and
    ``trainer.log`` (TRL's log, which averages and prints more keys when the guards logged). rl_guards' reward
    functions the run chose (``StrayThinkPenalty``) are timed apart: they are the run's rewards, on or off.
    The guards' per-batch hooks are also timed one by one (``ms``: nested inside the hook).
    """

    PARTS = ("hook", "probes", "reward wrappers", "callbacks", "trainer.log", "rl_guards reward functions", "gc")

    def __init__(self, trainer: Any, install: Callable[[Any], Any]) -> None:
        from rl_guards.rewards.routing import RoutedReward
        from rl_guards.rewards.row_errors import CatchRowErrors
        from rl_guards.rewards.stray_think import StrayThinkPenalty

        self.ms: dict[str, float] = defaultdict(float)  # the guards' hooks one by one (wall), guarded steps
        self.cpu_ms: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        # part -> step -> [wall ms, thread CPU ms]
        self.parts: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        self.step: int | None = None  # set by the interleaving callback at each step begin
        self._probing = False  # inside the probes: the reward calls they make are theirs
        self._logging = False  # inside trainer.log: the callbacks' on_log inside it are counted as callbacks
        self._restore: list[tuple[Any, str, Any]] = []
        reward_call = self._part_wrap("hook", trainer._calculate_rewards, sign=-1.0)  # TRL's own: not the hook's
        trainer._calculate_rewards = reward_call
        printers = [cb for cb in trainer.callback_handler.callbacks if type(cb).__name__ in _LOG_WRAPPED]
        for cb in printers:  # the callback's own on_log, before the router wraps it
            cb.on_log = self._part_wrap("callbacks", cb.on_log, sign=-1.0)
        self.run = run = install(trainer)
        for cb in printers:  # the router's wrapper around it: its own part is outer minus inner
            cb.on_log = self._part_wrap("callbacks", cb.on_log)
        trainer._calculate_rewards = self._part_wrap("hook", trainer._calculate_rewards)
        run._after_generation = self._part_wrap("hook", run._after_generation)
        from transformers import TrainerCallback

        events = [e for e in dir(TrainerCallback) if e.startswith("on_") and e not in ("on_init_end", "on_train_begin")]
        for callback in (run, run.saved_state):
            for event in events:
                object.__setattr__(callback, event, self._part_wrap("callbacks", getattr(callback, event)))
        trainer.log = self._log(trainer.log)
        for guard in run.guards:
            for hook in ("check_tensors", "scan", "on_batch", "after_batch", "on_train_begin"):
                if hook != "on_train_begin" and not overrides(guard, hook):
                    continue
                fn = self._wrap(f"{guard.name}.{hook}", getattr(guard, hook))
                if guard.name == "probes" and hook in ("scan", "on_batch"):
                    fn = self._probes(fn)
                setattr(guard, hook, fn)
        # The batch build: this rank's rows (the adapter's local_rows, as the hook calls it) and the engine's
        # assembly (prepare: the shell, the guards' scans; finish: the gather of numbers and the batch from them).
        assembly = run.engine.assembly
        assembly.prepare = self._wrap("engine.assemble", assembly.prepare)
        assembly.finish = self._wrap("engine.assemble", assembly.finish)
        _route_local_rows(self)
        # The reward wrappers' own time: the wrapper's call minus the function inside (class-level, undone after).
        chain = _reward_chain(trainer.reward_funcs)
        for cls, inner in ((CatchRowErrors, "__wrapped__"), (RoutedReward, "fn")):
            self._patch_call(cls, "reward wrappers")
            for fn in chain:
                if type(fn) is cls:
                    object.__setattr__(fn, inner, self._part_wrap("reward wrappers", getattr(fn, inner), sign=-1.0))
        self._patch_call(StrayThinkPenalty, "rl_guards reward functions")
        self._gc_start = (0.0, 0.0)
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        """The collector's pauses per step (``gc`` part: it runs wherever an allocation trips it, inside any part)."""
        if phase == "start":
            self._gc_start = (time.perf_counter(), time.thread_time())
        elif self.step is not None:
            cell = self.parts["gc"][self.step]
            cell[0] += (time.perf_counter() - self._gc_start[0]) * 1000
            cell[1] += (time.thread_time() - self._gc_start[1]) * 1000

    def _record(self, part: str, wall: float, cpu: float) -> None:
        if self.step is None or (self._probing and part != "probes"):
            return
        cell = self.parts[part][self.step]
        cell[0] += wall * 1000
        cell[1] += cpu * 1000
        if self._logging and part != "trainer.log":  # a callback's on_log inside the log: counted once, as its own
            self._record("trainer.log", -wall, -cpu)

    def _log(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``trainer.log``: TRL's and HF's log, less the callbacks' own part inside it (timed as callbacks)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            self._logging = True
            try:
                return fn(*args, **kwargs)
            finally:
                self._logging = False
                self._record("trainer.log", time.perf_counter() - t, time.thread_time() - c)

        return timed

    def _part_wrap(self, part: str, fn: Callable[..., Any], sign: float = 1.0) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._record(part, sign * (time.perf_counter() - t), sign * (time.thread_time() - c))

        return timed

    def _probes(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The probes' hooks: their time moves from the hook to ``probes``; reward calls inside them are theirs."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            self._probing = True
            try:
                return fn(*args, **kwargs)
            finally:
                self._probing = False
                wall, cpu = time.perf_counter() - t, time.thread_time() - c
                self._record("probes", wall, cpu)
                self._record("hook", -wall, -cpu)

        return timed

    def _patch_call(self, cls: type, part: str) -> None:
        original = cls.__call__
        timer = self

        def __call__(obj: Any, *args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return original(obj, *args, **kwargs)
            finally:
                timer._record(part, time.perf_counter() - t, time.thread_time() - c)

        self._restore.append((cls, "__call__", original))
        cls.__call__ = __call__  # type: ignore[method-assign]

    def undo(self) -> None:
        """Put the patched classes back."""
        for cls, name, original in reversed(self._restore):
            setattr(cls, name, original)
        self._restore.clear()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)

    def per_step(self, part: str, steps: list[int]) -> tuple[float, float]:
        """Mean (wall ms, CPU ms) of ``part`` over ``steps``."""
        if not steps:
            return math.nan, math.nan
        cells = [self.parts[part].get(s, [0.0, 0.0]) for s in steps]
        return statistics.fmean(c[0] for c in cells), statistics.fmean(c[1] for c in cells)

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ms[label] += (time.perf_counter() - t) * 1000
                self.cpu_ms[label] += (time.thread_time() - c) * 1000
                self.calls[label] += 1

        return timed


_LOG_WRAPPED = ("PrinterCallback", "ProgressCallback", "WandbCallback")  # the router wraps their on_log


def _reward_chain(funcs: list[Any]) -> list[Any]:
    """The reward functions and every wrapper inside them (``__wrapped__`` / ``fn``)."""
    out: list[Any] = []
    todo = list(funcs)
    while todo:
        fn = todo.pop()
        out.append(fn)
        inner = fn.__dict__.get("__wrapped__") or fn.__dict__.get("fn") if hasattr(fn, "__dict__") else None
        if inner is not None:
            todo.append(inner)
    return out


def _route_local_rows(timer: _GuardTimer) -> None:
    """Time ``trl.rollout_rows.local_rows`` as the hook calls it, into ``timer`` (the latest one; wrapped once)."""
    from rl_guards.trl import hook

    if not hasattr(hook.local_rows, "timers"):
        original = hook.local_rows

        def local_rows(*args: Any, **kwargs: Any) -> Any:
            return local_rows.timers[-1]._wrap("trl.local_rows", original)(*args, **kwargs)

        local_rows.timers = []  # type: ignore[attr-defined]
        hook.local_rows = local_rows
    hook.local_rows.timers.append(timer)


def _interleave_callback(
    trainer: Any, on: tuple[Any, Any], off: tuple[Any, Any], arms: list[bool], timer: _GuardTimer | None = None
) -> Any:
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        """Swaps the hook's wrapped methods in or out at each step begin and times each step."""

        def __init__(self) -> None:
            self.times: list[tuple[int, bool, float]] = []  # (step, guards_on, wall seconds)
            self.cpu: dict[int, float] = {}  # step -> CPU seconds of this process
            self._start: tuple[int, bool, float, float] | None = None

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now, cpu = time.perf_counter(), time.process_time()
            if self._start is not None:
                step, arm, start, cpu_start = self._start
                self.times.append((step, arm, now - start))
                self.cpu[step] = cpu - cpu_start
            step = int(state.global_step)
            arm = arms[step] if step < len(arms) else False
            trainer._generate_and_score_completions, trainer._calculate_rewards = on if arm else off
            if timer is not None:
                timer.step = step
            self._start = (step, arm, time.perf_counter(), time.process_time())

    return Interleave()


def build_tiny_trainer(output_dir: str, max_steps: int, batch: int = 8, max_new: int = 24) -> Any:
    """The examples/grpo_tiny.py trainer (CPU, no W&B, no checkpoints); ``batch`` completions of <= ``max_new``."""
    from trl import GRPOTrainer

    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    setup = tiny_setup()
    penalty = StrayThinkPenalty.from_config(GuardsConfig().stray_think_penalty)
    reward_funcs = [*route({"arith": [arith_correct], "echo": [echo_match]}), length_penalty, penalty]
    args = tiny_grpo_config(
        output_dir,
        max_steps=max_steps,
        max_completion_length=max_new,
        per_device_train_batch_size=batch,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        chat_template_kwargs={"enable_thinking": True},
    )
    trainer = GRPOTrainer(
        model=setup.model_dir,
        processing_class=setup.tokenizer,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=make_dataset(n_per_task=16, thinking="mixed"),
    )
    from rl_guards.trl.thinking_mix import honour_thinking_column

    honour_thinking_column(trainer)  # as the example does: per-row enable_thinking, rendered by TRL's own path
    return trainer


def section_step(pairs: int, seed: int, warmup: int = 4, batch: int = 8, max_new: int = 24) -> dict[str, Any]:
    import warnings

    import rl_guards

    print("\n## Tiny GRPO step time, every guard on vs off, interleaved in one trainer\n")
    rng = random.Random(seed)
    arms: list[bool] = [rng.random() < 0.5 for _ in range(warmup)]
    for _ in range(pairs):
        first = rng.random() < 0.5
        arms += [first, not first]
    arms.append(False)  # the last step's interval is cut by train end: not measured
    with tempfile.TemporaryDirectory() as out:
        trainer = build_tiny_trainer(out, max_steps=len(arms), batch=batch, max_new=max_new)
        off = (trainer._generate_and_score_completions, trainer._calculate_rewards)
        timer = _GuardTimer(trainer, lambda t: rl_guards.install(t, GuardsConfig()))
        run = timer.run
        on = (trainer._generate_and_score_completions, trainer._calculate_rewards)
        callback = _interleave_callback(trainer, on, off, arms, timer)
        trainer.add_callback(callback)
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # the preflight report
                warnings.simplefilter("ignore")
                trainer.train()
        finally:
            timer.undo()
        wall = time.perf_counter() - t0
        guard_names = [g.name for g in run.guards]
        findings = run.session.summary_rows()
        probes = next((g for g in run.guards if g.name == "probes"), None)
        probe_share = probes.spent / probes.elapsed if probes is not None and probes.elapsed else math.nan
        rounds = f"{probes.rounds} rounds, {probes.aborted} aborted" if probes is not None else "off"

    times = {step: (arm, sec * 1000) for step, arm, sec in callback.times}
    pair_ms: list[tuple[float, float]] = []  # (on, off) wall
    pair_cpu: list[tuple[float, float]] = []  # (on, off) CPU
    on_steps: list[int] = []
    off_steps: list[int] = []
    for k in range(pairs):
        a, b = warmup + 2 * k, warmup + 2 * k + 1
        if a in times and b in times:
            (arm_a, ms_a), (_, ms_b) = times[a], times[b]
            cpu_a, cpu_b = callback.cpu[a] * 1000, callback.cpu[b] * 1000
            pair_ms.append((ms_a, ms_b) if arm_a else (ms_b, ms_a))
            pair_cpu.append((cpu_a, cpu_b) if arm_a else (cpu_b, cpu_a))
            on_steps.append(a if arm_a else b)
            off_steps.append(b if arm_a else a)
    on_ms = [p[0] for p in pair_ms]
    off_ms = [p[1] for p in pair_ms]
    ratios = [a / b for a, b in pair_ms]
    diffs = [a - b for a, b in pair_ms]

    def ratio_of_means(ps: list[tuple[float, float]]) -> float:
        return sum(p[0] for p in ps) / sum(p[1] for p in ps)

    def mean_diff(ps: list[tuple[float, float]]) -> float:
        return sum(p[0] - p[1] for p in ps) / len(ps)

    rom_lo, rom_hi = bootstrap_ci(pair_ms, ratio_of_means, seed=seed)
    md_lo, md_hi = bootstrap_ci(pair_ms, mean_diff, seed=seed + 1)
    cpu_lo, cpu_hi = bootstrap_ci(pair_cpu, ratio_of_means, seed=seed + 2)
    cpu_on, cpu_off = [p[0] for p in pair_cpu], [p[1] for p in pair_cpu]
    # The guards' own time per guarded step, by part (the measured pairs' guarded steps); trainer.log counts as
    # its extra time on guarded steps over unguarded ones (the guards' keys it averages and prints).
    part = {name: timer.per_step(name, on_steps) for name in _GuardTimer.PARTS}
    log_off = timer.per_step("trainer.log", off_steps)
    log_extra = (part["trainer.log"][0] - log_off[0], part["trainer.log"][1] - log_off[1])
    own_parts = {"hook": part["hook"], "reward wrappers": part["reward wrappers"], "callbacks": part["callbacks"],
                 "trainer.log (extra)": log_extra}  # fmt: skip
    guard_ms_per_step = sum(v[0] for v in own_parts.values())
    guard_cpu_per_step = sum(v[1] for v in own_parts.values())
    off_median = statistics.median(off_ms)
    print(
        f"{len(arms)} steps in {wall:.0f} s ({warmup} warm-up steps, {len(pair_ms)} on/off pairs in random order); "
        f"batch {batch} = {batch // 4} prompts x 4 generations, <= {max_new} new tokens; load average "
        f"{os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores; guards: {', '.join(guard_names)}"
    )
    print()
    print("| measure | guards off | guards on | on/off |")
    print("|---|---:|---:|---:|")
    print(
        f"| step ms, median [IQR] | {off_median:.1f} [{quantile(off_ms, 0.25):.1f}, "
        f"{quantile(off_ms, 0.75):.1f}] | {statistics.median(on_ms):.1f} [{quantile(on_ms, 0.25):.1f}, "
        f"{quantile(on_ms, 0.75):.1f}] | {statistics.median(on_ms) / off_median:.3f} |"
    )
    print(
        f"| per-pair ratio on/off, median [IQR] | | | {statistics.median(ratios):.3f} "
        f"[{quantile(ratios, 0.25):.3f}, {quantile(ratios, 0.75):.3f}] |"
    )
    print(
        f"| ratio of mean step times [bootstrap 95 % CI] | {statistics.fmean(off_ms):.1f} | "
        f"{statistics.fmean(on_ms):.1f} | {ratio_of_means(pair_ms):.3f} [{rom_lo:.3f}, {rom_hi:.3f}] |"
    )
    print(
        f"| added ms per step, mean [bootstrap 95 % CI] / per-pair median | | | {mean_diff(pair_ms):+.1f} "
        f"[{md_lo:+.1f}, {md_hi:+.1f}] / {statistics.median(diffs):+.1f} |"
    )
    print(
        f"| step CPU ms (this process), median; ratio of means [bootstrap 95 % CI] | {statistics.median(cpu_off):.1f} "
        f"| {statistics.median(cpu_on):.1f} | {ratio_of_means(pair_cpu):.3f} [{cpu_lo:.3f}, {cpu_hi:.3f}] |"
    )
    print(
        f"| guards' own wall ms per guarded step, reward probes apart (timed inside the run) | | "
        f"{guard_ms_per_step:.2f} | {guard_ms_per_step / off_median:.2%} of the median off step |"
    )
    print(
        f"| guards' own CPU ms per guarded step, reward probes apart (timed inside the run) | | "
        f"{guard_cpu_per_step:.2f} | {guard_cpu_per_step / statistics.median(cpu_off):.2%} of the median off "
        "step's CPU |"
    )
    print()
    print(
        "Where the guards' own time goes, per guarded step (mean over the measured pairs' guarded steps; CPU: the "
        "training thread's). The reward probes keep to a budget of their own (`probes.budget`, a share of the run's "
        "elapsed time, by their own clock) and are counted apart; their clock also runs through the unguarded steps "
        "here, so on a guarded step they may spend the budget of two.\n"
    )
    print("| part | wall ms | CPU ms | what |")
    print("|---|---:|---:|---|")
    what = {
        "hook": "the hook on a guarded step: loss tensors' check, this rank's rows, the assembly and every guard's "
        "scan / on_batch / after_batch, metrics to the trainer; the reward wrap's own part (probes taken out)",
        "reward wrappers": "CatchRowErrors (and route's) own part: the wrapper's call minus the function inside",
        "callbacks": "GuardRun / GuardRunState events (the step end: engine.step_end), the console on_log wrapper's "
        "own part",
        "trainer.log (extra)": f"TRL's log on a guarded step minus an unguarded one ({part['trainer.log'][0]:.2f} "
        f"vs {log_off[0]:.2f} ms wall): the guards' keys averaged and filtered",
    }
    for name, (w, c) in own_parts.items():
        print(f"| {name} | {w:.2f} | {c:.2f} | {what[name]} |")
    print(f"| **guards' own** | **{guard_ms_per_step:.2f}** | **{guard_cpu_per_step:.2f}** | |")
    pw, pc = part["probes"]
    print(
        f"| reward probes (apart) | {pw:.2f} | {pc:.2f} | RewardProbeGuard.scan / on_batch: their rounds and the "
        f"per-row verdict columns; {probe_share:.2%} of the run's elapsed time by their own clock ({rounds}) |"
    )
    rw, rc = part["rl_guards reward functions"]
    print(f"| rl_guards reward functions (apart) | {rw:.2f} | {rc:.2f} | StrayThinkPenalty: a reward the run chose |")
    gw, gcpu = part["gc"]
    gc_off = timer.per_step("gc", off_steps)
    print(
        f"| garbage collection (inside any part) | {gw:.2f} | {gcpu:.2f} | the collector's pauses on a guarded step "
        f"({gc_off[0]:.2f} ms on an unguarded one): wherever an allocation trips it, mostly after the probes' |"
    )
    print()
    print("Inside the hook, per guarded step (mean over the steps with guards on):\n")
    print("| hook | wall ms per step | CPU ms per step | calls |")
    print("|---|---:|---:|---:|")
    n_on = sum(1 for arm in arms[: len(callback.times)] if arm) or 1
    batch_hooks = {k: v for k, v in timer.ms.items() if not k.endswith("on_train_begin")}
    summed_hooks = sum(v for k, v in batch_hooks.items() if not k.endswith(".scan"))  # the scans: in the assembly
    labels = {"engine.assemble": "engine.assemble (the shell, base numbers, gather; less the scans)"}
    for name in ("ms", "cpu_ms"):  # the guards' scans run inside Assembly.prepare: each on its own row
        values = getattr(timer, name)
        values["engine.assemble"] -= sum(v for k, v in values.items() if k.endswith(".scan"))
    for label in sorted(batch_hooks, key=lambda k: (k.startswith("probes."), -timer.ms[k])):
        print(
            f"| {labels.get(label, label)} | {timer.ms[label] / n_on:.2f} | {timer.cpu_ms[label] / n_on:.2f} "
            f"| {timer.calls[label]} |"
        )
    once = {k.split(".")[0]: v for k, v in timer.ms.items() if k.endswith("on_train_begin") and v >= 0.05}
    print(
        "\nOnce, at train start (on_train_begin, ms): "
        + ", ".join(f"{name} {ms:.0f}" for name, ms in sorted(once.items(), key=lambda kv: -kv[1]))
    )
    if findings:
        print("\nfindings during the run: " + ", ".join(f"{r['guard']}/{r['kind']} x{r['count']}" for r in findings))
    return {
        "pairs": len(pair_ms),
        "median_ratio": statistics.median(ratios),
        "ratio_of_means": ratio_of_means(pair_ms),
        "ci": (rom_lo, rom_hi),
        "guard_ms_per_step": guard_ms_per_step,
        "guard_cpu_ms_per_step": guard_cpu_per_step,
        "hook_ms_per_step": part["hook"][0],
        "hook_cpu_ms_per_step": part["hook"][1],
        "parts": {name: list(v) for name, v in {**own_parts, "probes": part["probes"], "gc": part["gc"]}.items()},
        "probe_ms_per_step": pw,
        "probe_cpu_ms_per_step": pc,
        "probe_share": probe_share,
        "probe_rounds": rounds,
        "cpu_ratio_of_means": ratio_of_means(pair_cpu),
        "off_median_ms": off_median,
        "off_median_cpu_ms": statistics.median(cpu_off),
        # as this section summed it up to ab22f5f: every guard's per-batch hook, local_rows and the assembly with
        # the guards' scans in it (the probes' included), per step with guards on
        "summed_hooks_ms_per_step": summed_hooks / n_on,
    }


# ----- synthetic batches -------------------------------------------------------------------------------------


def load_tokenizer() -> Any:
    """The full Qwen vocabulary (real ``<think>`` ids, realistic decode cost); its backend is cached on disk."""
    from rl_guards.testing import build_tokenizer

    return build_tokenizer(vocab_size=None, cache_dir=Path.home() / ".cache" / "rl_guards")


def synthetic_batch(tokenizer: Any, rows: int, mean_tokens: int) -> RolloutBatch:
    """``bench_rollout_dump.make_batch`` (think blocks, 8 per group, 3 tasks) with the fields the hook fills."""
    from bench_rollout_dump import make_batch

    batch = make_batch(tokenizer, rows, mean_tokens)
    batch.thinking = [i % 4 != 3 for i in range(len(batch))]  # a thinking / non-thinking mix
    batch.prompt_opened = [False] * len(batch)
    batch.decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
    batch.columns = {"answer": [str(i % 97) for i in range(len(batch))]}
    return batch


def synthetic_output(batch: RolloutBatch, pad: int) -> dict[str, torch.Tensor]:
    """The tensors ``_generate_and_score_completions`` returns for this batch (left-padded prompts, right-padded
    completions, masks up to and including EOS)."""
    n = len(batch)
    width = max(len(ids) for ids in batch.completion_ids)
    pwidth = max(len(ids) for ids in batch.prompt_ids)
    completion_ids = torch.full((n, width), pad, dtype=torch.long)
    completion_mask = torch.zeros((n, width), dtype=torch.long)
    prompt_ids = torch.full((n, pwidth), pad, dtype=torch.long)
    prompt_mask = torch.zeros((n, pwidth), dtype=torch.long)
    for i, (cids, pids) in enumerate(zip(batch.completion_ids, batch.prompt_ids, strict=True)):
        completion_ids[i, : len(cids)] = torch.tensor(cids)
        completion_mask[i, : len(cids)] = 1
        prompt_ids[i, pwidth - len(pids) :] = torch.tensor(pids)
        prompt_mask[i, pwidth - len(pids) :] = 1
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(batch.advantages, dtype=torch.float32),
    }


def guards_config(out_dir: str) -> GuardsConfig:
    """Every guard on in ``log`` mode (same cost, never stops); routes for the synthetic tasks; dumps every step."""
    cfg = GuardsConfig.from_dict(
        {
            "routing": {"routes": {"math": ["math_ok"], "code": ["judge"], "chat": ["judge"]}},
            "rollouts": {"every_steps": 1, "wandb_rows_per_task": 0, "output_dir": out_dir},
        }
    )
    for name in cfg.guard_sections():
        getattr(cfg, name).mode = "log"
    return cfg


def run_context(tokenizer: Any, out_dir: str, reward_funcs: list[Any] | None = None) -> RunContext:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return RunContext(
        output_dir=out_dir,
        tokenizer=tokenizer,
        args=SimpleNamespace(mask_truncated_completions=False, max_completion_length=0),
        chat_template=tokenizer.chat_template,
        chat_template_kwargs={"enable_thinking": True},
        eos_token_ids=[eos],
        pad_token_id=tokenizer.pad_token_id,
        reward_func_names=["math_ok", "judge"],
        reward_funcs=list(reward_funcs or []),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        decode_text=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )


def hook_inputs(batch: RolloutBatch, output: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    """What the hook captures from ``_calculate_rewards``: (inputs, prompts, completions, completion_ids, rewards)."""
    inputs = [
        {"prompt": p, "task": t, "answer": a, "enable_thinking": th}
        for p, t, a, th in zip(batch.prompts, batch.tasks, batch.columns["answer"], batch.thinking, strict=True)
    ]
    completions = [[{"role": "assistant", "content": c}] for c in batch.completions]
    rewards = torch.tensor([[math.nan if v is None else v for v in r] for r in batch.rewards], dtype=torch.float32)
    return inputs, batch.prompts, completions, batch.completion_ids, rewards


def bare_guard_run(tokenizer: Any, config: GuardsConfig, ctx: RunContext, batch: RolloutBatch) -> Any:
    """A real ``GuardRun`` (no guards) on a stand-in trainer holding what the hook reads; for :func:`build_batch`."""
    from rl_guards.trl.hook import GuardRun

    trainer = SimpleNamespace(
        args=SimpleNamespace(
            output_dir=ctx.output_dir,
            max_completion_length=batch.max_completion_length,
            chat_template_kwargs=dict(ctx.chat_template_kwargs),
            mask_truncated_completions=False,
        ),
        processing_class=tokenizer,
        accelerator=None,
        eos_token_ids=list(ctx.eos_token_ids),
        reward_func_names=list(batch.reward_names),
        reward_funcs=[],
        reward_weights=torch.ones(len(batch.reward_names)),
        num_generations=batch.num_generations,
        state=SimpleNamespace(epoch=0.0, global_step=batch.step),
        model=SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _generate_and_score_completions=lambda inputs: inputs,
        _calculate_rewards=lambda *args: None,
    )
    return GuardRun(trainer, config, [])


def build_batch(run: Any, output: dict[str, Any], pending: tuple[Any, ...], step: int) -> RolloutBatch | None:
    """The hook's batch build through the public pieces: this rank's rows (``trl.rollout_rows.local_rows``, as the
    hook calls it) and ``Assembly.assemble`` (the shell, the scans of the installed guards, the gather)."""
    from rl_guards.trl.rollout_rows import local_rows

    rows = local_rows(output, pending, step=step, mode="train", trainer=run.trainer, ctx=run.ctx, config=run.config,
                      markup=run.markup)  # fmt: skip
    return run.engine.assembly.assemble(rows)


def reward_wrappers(tokenizer: Any) -> dict[str, Callable[..., Any]]:
    """The reward-side pieces, each around a trivial function so only the wrapper's cost shows."""
    from rl_guards.rewards.blind_judge import blind_judge
    from rl_guards.rewards.routing import route
    from rl_guards.rewards.stray_think import StrayThinkPenalty

    def judge(completions: list[Any], **kwargs: Any) -> list[float]:
        return [0.0] * len(completions)

    def math_ok(completions: list[Any], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    penalty = StrayThinkPenalty.from_guards_config(
        GuardsConfig(), tokenizer=tokenizer, chat_template_kwargs={"enable_thinking": True}
    )
    routed = route({"math": [math_ok], "code": [judge], "chat": [judge]})
    return {
        "StrayThinkPenalty (reward)": penalty,
        "blind_judge (wrapper)": blind_judge(judge),
        "route (wrappers)": routed,
    }


def time_cell(tokenizer: Any, rows: int, tokens: int, repeats: int) -> dict[str, float]:
    """ms per batch of every piece at one (rows, mean tokens) cell."""
    batch = synthetic_batch(tokenizer, rows, tokens)
    output = synthetic_output(batch, tokenizer.pad_token_id)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = guards_config(tmp)
        wrappers = reward_wrappers(tokenizer)
        ctx = run_context(tokenizer, tmp, reward_funcs=wrappers["route (wrappers)"])
        # The hook's own per-batch work, from TRL's tensors and reward inputs to the RolloutBatch.
        try:
            run = bare_guard_run(tokenizer, config, ctx, batch)
            pending = hook_inputs(batch, output)
            results["hook: local_rows + Assembly.assemble"] = best_ms(lambda: build_batch(run, output, pending, 10),
                                                                      repeats)  # fmt: skip
        except Exception as exc:  # say so rather than crash the benchmark
            print(f"  (hook batch build not measured: {type(exc).__name__}: {exc})")
        for cls in BATCH_GUARDS:
            guard = cls(config)
            guard.setup(ctx)
            session = GuardSession()
            if overrides(guard, "check_tensors"):
                session.defer = True  # the hook's path: per-row rule bits on the device, decided after the gather
                results[f"{cls.__name__}.check_tensors"] = best_ms(
                    lambda g=guard, s=session: g.check_tensors(output, s.reporter(g.name, g.config, 10)), repeats
                )
                continue
            if not overrides(guard, "on_batch"):
                continue  # start-of-training checks: no per-batch work
            if cls.__name__ == "RolloutRecorder":

                def dump(c: Any = cls) -> None:
                    # A fresh recorder and folder each time: a recorder does not rewrite a step it wrote.
                    sub = guards_config(tempfile.mkdtemp(dir=tmp))
                    rec = c(sub)
                    rec.setup(RunContext(**{**ctx.__dict__, "output_dir": tmp}))
                    report = GuardSession().reporter(rec.name, rec.config, 10)
                    rec.on_batch(batch, report)
                    rec.after_batch(batch, report)  # hands the rows to the background writer
                    rec.flush(report)  # and waits: this cell counts the whole write

                results["RolloutRecorder.on_batch (dump step)"] = best_ms(dump, repeats)
                continue
            results[f"{cls.__name__}.on_batch"] = best_ms(
                lambda g=guard, s=session: g.on_batch(batch, s.reporter(g.name, g.config, 10)), repeats
            )
        completions = [[{"role": "assistant", "content": c}] for c in batch.completions]
        kwargs = {
            "prompts": batch.prompts,
            "completion_ids": batch.completion_ids,
            "task": batch.tasks,
            "enable_thinking": batch.thinking,
            "answer": batch.columns["answer"],
        }
        for label, fn in wrappers.items():
            if isinstance(fn, list):  # route(): one call per wrapped function, as TRL makes them
                results[label] = best_ms(lambda fs=fn: [f(completions=completions, **kwargs) for f in fs], repeats)
            else:
                results[label] = best_ms(lambda f=fn: f(completions=completions, **kwargs), repeats)
    results["_tokens"] = float(sum(len(ids) for ids in batch.completion_ids))
    results["_text_mb"] = sum(len(t.encode("utf-8", "surrogatepass")) for t in batch.completions) / 1e6
    return results


EVERY_BATCH_EXCLUDED = ("RolloutRecorder.on_batch (dump step)",)  # amortised separately: one step in every_steps


def guard_total(cell: dict[str, float], every_steps: int = 10) -> float:
    """ms per batch of the hook + every batch guard, the recorder amortised over ``every_steps``."""
    total = sum(v for k, v in cell.items() if not k.startswith("_") and "(reward" not in k and "(wrapper" not in k)
    total -= sum(cell.get(k, 0.0) for k in EVERY_BATCH_EXCLUDED)
    return total + cell.get("RolloutRecorder.on_batch (dump step)", 0.0) / every_steps


def print_grid(title: str, cells: dict[tuple[int, int], dict[str, float]], axis: str) -> None:
    keys = list(cells)
    labels = [k for k in next(iter(cells.values())) if not k.startswith("_")]
    head = [f"{r} x {t}" for r, t in keys]
    print(f"\n{title}\n")
    print("| CPU ms per batch | " + " | ".join(head) + " |")
    print("|---|" + "---:|" * len(head))
    for label in labels:
        print(f"| {label} | " + " | ".join(f"{cells[k].get(label, math.nan):.1f}" for k in keys) + " |")
    print(
        "| **guards total per batch** (hook + every guard, dump / 10) | "
        + " | ".join(f"**{guard_total(cells[k]):.1f}**" for k in keys)
        + " |"
    )
    print(
        "| completion tokens in the batch (M) | " + " | ".join(f"{cells[k]['_tokens'] / 1e6:.2f}" for k in keys) + " |"
    )
    print(
        "| guards total, µs per completion token | "
        + " | ".join(f"{guard_total(cells[k]) * 1000 / cells[k]['_tokens']:.3f}" for k in keys)
        + " |"
    )


def section_batch(
    batch_sizes: list[int], lengths: list[int], extra: list[tuple[int, int]], quick: bool
) -> dict[tuple[int, int], dict[str, float]]:
    print("\n## Guard cost per rollout batch (synthetic batches, one process, this CPU)\n")
    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    print(
        "rows x mean completion tokens (lengths ~N(mean, mean/4), 8 completions per prompt, 3 tasks, think blocks, "
        "5 % truncated, 3 in 4 rows thinking); CPU time of this process, best of 1-3 runs; every guard in log mode; "
        "torch 1 thread"
    )

    def repeats_for(rows: int, tokens: int) -> int:
        n = rows * tokens
        return 1 if n > 4e6 or (quick and n > 1e6) else (2 if n > 5e5 or quick else 3)

    mid_len = 1024
    by_rows = {(r, mid_len): time_cell(tokenizer, r, mid_len, repeats_for(r, mid_len)) for r in batch_sizes}
    print_grid(f"Batch size sweep at {mid_len} mean completion tokens:", by_rows, "rows")
    mid_rows = 256
    by_len = {}
    for n in lengths:
        key = (mid_rows, n)
        by_len[key] = by_rows[key] if key in by_rows else time_cell(tokenizer, mid_rows, n, repeats_for(mid_rows, n))
    print_grid(f"Completion length sweep at {mid_rows} rows:", by_len, "tokens")
    cells = {**by_rows, **by_len}
    for key in extra:
        cells[key] = time_cell(tokenizer, key[0], key[1], repeats_for(*key))
    if extra:
        print_grid("Large batches:", {k: cells[k] for k in extra}, "both")

    print("\n### EXTRAPOLATION: guard time per batch against an assumed GPU step time\n")
    print(
        "Guards run on the host CPU of every rank, on the whole gathered batch (not a per-rank slice), "
        "synchronously between generation and the loss; nothing overlaps them with GPU work. These are CPU "
        "milliseconds of one core of this machine (wall time on a loaded machine is longer); a training node's "
        "cores are usually faster. The step times are ASSUMED, not measured: a real GRPO step that generates this "
        "many tokens is rarely as short as 1 s. The rollout dump counts one tenth (rollouts.every_steps=10).\n"
    )
    print("| rows x mean tokens | guards ms per batch | % of a 1 s step | % of a 10 s step | % of a 60 s step |")
    print("|---|---:|---:|---:|---:|")
    for key in sorted(cells, key=lambda k: k[0] * k[1]):
        total = guard_total(cells[key])
        print(f"| {key[0]} x {key[1]} | {total:.0f} | {total / 10:.1f} % | {total / 100:.2f} % | {total / 600:.2f} % |")
    return cells


# ----- section: host-device transfers per batch ----------------------------------------------------------------

_SYNC_METHODS = {"tolist", "item", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__", "nonzero"}


class TransferCounter(TorchFunctionMode):
    """Counts torch calls that copy device data to the host (a sync on CUDA) and host-to-device tensor builds."""

    def __init__(self) -> None:
        super().__init__()
        self.d2h: Counter[str] = Counter()
        self.h2d: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in _SYNC_METHODS or name in ("masked_select", "unique", "repeat_interleave"):
            self.d2h[name] += 1
        elif name == "to" and any(
            (isinstance(a, str | torch.device) and str(a).startswith("cpu")) for a in [*args[1:], *kwargs.values()]
        ):
            self.d2h["to(cpu)"] += 1
        elif (
            name == "__getitem__"
            and len(args) > 1
            and isinstance(args[1], torch.Tensor)
            and args[1].dtype == torch.bool
        ):
            self.d2h["bool-mask index"] += 1
        elif name in ("tensor", "as_tensor"):
            self.h2d[name] += 1
        return func(*args, **kwargs)

    def text(self, counts: Counter[str]) -> str:
        return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none"


def section_sync() -> bool:
    """Prints the counts; True when no count grows with the rows."""
    from rl_guards.guards.masks import GRPOMaskGuard

    print("\n## Host-device transfers per batch (torch calls counted with a TorchFunctionMode)\n")
    print(
        "Method: every torch function and Tensor method call inside the measured call passes through the mode; "
        "device-to-host ones (tolist, item, cpu, numpy, int/float/bool/index of a tensor, nonzero, masked_select, "
        "unique, .to(cpu), boolean-mask indexing) are each a CUDA sync. Measured on CPU tensors: the calls are the "
        "same on CUDA (benchmarks/gpu_overhead.py checks the real syncs with torch.cuda.set_sync_debug_mode). "
        "A per-row sync would make the count grow with the rows.\n"
    )
    tokenizer = load_tokenizer()
    counts: dict[str, list[int]] = {}
    print("| call | rows | device-to-host calls | host-to-device tensor builds |")
    print("|---|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        config = guards_config(tmp)
        ctx = run_context(tokenizer, tmp)
        for rows in (64, 1024):
            batch = synthetic_batch(tokenizer, rows, 256)
            output = synthetic_output(batch, tokenizer.pad_token_id)
            bad = {k: v.clone() for k, v in output.items()}
            bad["completion_mask"][:3] = 1  # loss after EOS / on padding in 3 rows
            mask_guard = GRPOMaskGuard(config)
            mask_guard.setup(ctx)
            run = bare_guard_run(tokenizer, config, ctx, batch)
            pending = hook_inputs(batch, output)
            cases: list[tuple[str, Callable[[], Any]]] = [
                (
                    "GRPOMaskGuard.check_tensors, clean batch",
                    lambda g=mask_guard, o=output: g.check_tensors(o, GuardSession().reporter(g.name, g.config, 1)),
                ),
                (
                    "GRPOMaskGuard.check_tensors, 3 bad rows (message built)",
                    lambda g=mask_guard, o=bad: g.check_tensors(o, GuardSession().reporter(g.name, g.config, 1)),
                ),
                (
                    "hook: local_rows + Assembly.assemble",
                    lambda r=run, o=output, p=pending: build_batch(r, o, p, 1),
                ),
            ]
            guards = []
            for cls in BATCH_GUARDS:
                if cls.check_tensors is not Guard.check_tensors or cls.on_batch is Guard.on_batch:
                    continue
                g = cls(config)
                g.setup(ctx)
                guards.append(g)
            cases.append(
                (
                    "every on_batch guard (" + ", ".join(g.name for g in guards) + ")",
                    lambda gs=guards, b=batch: [
                        g.on_batch(b, GuardSession().reporter(g.name, g.config, 1)) for g in gs
                    ],
                )
            )
            for label, fn in cases:
                with TransferCounter() as counter:
                    fn()
                print(f"| {label} | {rows} | {counter.text(counter.d2h)} | {counter.text(counter.h2d)} |")
                counts.setdefault(label, []).append(sum(counter.d2h.values()))
    return all(len(set(v)) == 1 for v in counts.values())


# ----- section: scanner throughput ---------------------------------------------------------------------------


def section_scanner(megabytes: float) -> float:
    """Prints the table; returns scan()'s MB/s."""
    from bench_scanner import completion, utf8_bytes
    from trl.rewards import think_format_reward

    from rl_guards.core.think_markup import THINK, scan

    print("\n## Think-markup scanner throughput (bench_scanner.py corpus, one core)\n")
    rng = random.Random(0)
    texts: list[str] = []
    total = 0
    while total < megabytes * 1e6:
        text = completion(rng, rng.randint(1000, 4000))
        texts.append(text)
        total += len(text)
    mb = utf8_bytes(texts) / 1e6
    ascii_texts = [t.encode("ascii", "ignore").decode() for t in texts]
    ascii_mb = utf8_bytes(ascii_texts) / 1e6
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    rows = [
        ("rl_guards scan()", mb, lambda: [scan(t, THINK) for t in texts]),
        ("rl_guards scan(), ASCII-only copy of the corpus", ascii_mb, lambda: [scan(t, THINK) for t in ascii_texts]),
        ("trl think_format_reward", mb, lambda: think_format_reward(conversational)),
        ("str.find('<think>') alone (a floor for any Python scanner)", mb, lambda: [t.find("<think>") for t in texts]),
    ]
    print(f"corpus: {len(texts)} completions, {mb:.1f} MB UTF-8 (mixed prose, code, CJK, emoji, broken markup)\n")
    speeds: dict[str, float] = {}
    print("| function | MB/s | completions/s |")
    print("|---|---:|---:|")
    for label, size, fn in rows:
        ms = best_ms(fn, 3)
        speeds[label] = size / (ms / 1000)
        print(f"| {label} | {size / (ms / 1000):.0f} | {len(texts) / (ms / 1000):.0f} |")
    print("\ntarget: >= 1,000 MB/s on one core")
    return speeds["rl_guards scan()"]


# ----- main --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (benchmarks/run_all.py uses this)")
    parser.add_argument("--full", action="store_true", help="add 4,096 x 8,192 (34 M tokens: minutes, ~8 GB)")
    parser.add_argument("--only", default="step,batch,sync,scanner", help="comma-separated sections")
    parser.add_argument("--pairs", type=int, default=None, help="on/off step pairs (default 100, quick 60)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - {"step", "batch", "sync", "scanner"}
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; available: step, batch, sync, scanner")

    import transformers
    import trl

    print(
        f"torch {torch.__version__}, trl {trl.__version__}, transformers {transformers.__version__}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    step = cells = no_row_sync = scanner = None
    if "step" in sections:
        torch.set_num_threads(1)
        step = section_step(args.pairs or (60 if args.quick else 100), args.seed)
    if "batch" in sections:
        if args.quick:  # up to ~1 M completion tokens per batch; the per-token cost is flat, see the table
            cells = section_batch([64, 256, 1024], [256, 1024, 4096], [], True)
        else:
            extra = [(1024, 4096), (4096, 8192)] if args.full else [(1024, 4096)]
            cells = section_batch([64, 256, 1024, 4096], [256, 1024, 4096, 8192], extra, False)
    if "sync" in sections:
        no_row_sync = section_sync()
    if "scanner" in sections:
        scanner = section_scanner(5.0 if args.quick else 20.0)
    print_targets(step, cells, no_row_sync, scanner)
    return 0


def print_targets(
    step: dict[str, Any] | None,
    cells: dict[tuple[int, int], dict[str, float]] | None,
    no_row_sync: bool | None,
    scanner: float | None,
) -> None:
    """The measurements against the targets, one line each."""
    print("\n## Against the targets\n")
    print("| target | measured | met? |")
    print("|---|---|---|")
    if step is not None:
        lo, hi = step["ci"]
        print(
            f"| <= 1 % added step time, all guards on (tiny CPU model) | guards' own CPU "
            f"{step['guard_cpu_ms_per_step']:.2f} ms per {step['off_median_ms']:.0f} ms step = "
            f"{step['guard_cpu_ms_per_step'] / step['off_median_ms']:.1%}; on/off ratio of means "
            f"{step['ratio_of_means']:.3f} [95 % CI {lo:.3f}, {hi:.3f}] | no: the tiny step does almost no work |"
        )
    if cells:
        per_token = statistics.median(guard_total(c) * 1000 / c["_tokens"] for c in cells.values())
        big = max(cells, key=lambda k: k[0] * k[1])
        total = guard_total(cells[big])
        print(
            f"| <= 1 % at realistic sizes (EXTRAPOLATION to assumed GPU step times) | {per_token:.2f} µs of one CPU "
            f"core per completion token in the gathered batch; {big[0]} x {big[1]}: {total:.0f} ms, i.e. 1 % of a "
            f"{total / 10:.0f} s step | only when a step lasts >= {per_token * 100:.0f} µs per completion token "
            "of the global batch |"
        )
    if no_row_sync is not None:
        verdict = "yes" if no_row_sync else "NO: a count grows with the rows"
        print(
            "| no per-row host-device sync | device-to-host calls per batch the same at 64 and 1,024 rows "
            f"(TorchFunctionMode count) | {verdict} |"
        )
    if scanner is not None:
        print(f"| scanner >= 1 GB/s on one core | {scanner:.0f} MB/s | {'yes' if scanner >= 1000 else 'no'} |")


if __name__ == "__main__":
    sys.exit(main())
