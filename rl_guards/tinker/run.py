"""The engine on a tinker-cookbook loop: one :class:`TinkerRun` per run, fed by the dataset and group wrappers.

Where the cookbook's synchronous loop (``rl.train.do_sync_training``) meets rl_guards, per iteration ``i``::

    dataset.get_batch(i)                   # S1: the previous iteration is done (trained, logged, checkpointed):
                                           #     its step end and checkpoints go to the engine; a held stop raises
    for each group, concurrently:
        rollouts                           #     (the cookbook's, untouched)
        builder.compute_group_rewards(...) # S2: the group as sampled is recorded, then the recipe's own rewards;
                                           #     the last group of the batch decides the whole batch here: its
                                           #     metrics go into every trajectory's metrics (-> env/all/rl_guards/..)
                                           #     and a stop raises here, before the batch trains
    remove_constant_reward_groups, advantages, datums
    forward_backward(datums)               # local backend only: the datums as sent are checked before they train
    optim_step, checkpoint, log_metrics    # (the cookbook's)

Step numbers are the cookbook's ``i_batch`` (the ``step`` of ``metrics.jsonl`` and ``iteration_<i>/``); the dump of
checkpoint ``<k>`` (saved after ``k`` optimizer steps) holds the rollouts of step ``k - 1``, the last batch it trained.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.core.think_markup import prompts_open_block
from rl_guards.engine.driver import Engine
from rl_guards.errors import GuardError
from rl_guards.guards.base import Guard
from rl_guards.guards.datum_masks import TrainInputs
from rl_guards.guards.probes import RewardProbeGuard
from rl_guards.rewards.checked_calls import UNTIMED
from rl_guards.tinker import checkpoints as C
from rl_guards.tinker import datums as D
from rl_guards.tinker import metrics as M
from rl_guards.tinker.graders import GraderCall
from rl_guards.tinker.rows import PENALTY, GroupResult, expected_rows, local_rows, record, task_of

logger = logging.getLogger("rl_guards")

# per-task metrics the cookbook already logs per tag: env/<tag>/reward/total, env/<tag>/by_group/frac_* (dead share
# = frac_all_good + frac_all_bad); dropped at the default metrics level
COOKBOOK_TWINS = frozenset({"reward_mean", "dead_group_share"})

_RUNS: dict[str, TinkerRun] = {}  # run id -> the live run of this process (wrappers find it by id: picklable)


def live_run(run_id: str) -> TinkerRun | None:
    """The run of this process with this id (None in another process: a rollout executor's worker)."""
    return _RUNS.get(run_id)


@dataclass
class RunSpec:
    """What the run takes from the cookbook's ``Config`` (serialisable: the wrappers carry it)."""

    log_path: str
    model_name: str
    renderer_name: str | None
    max_tokens: int
    remove_constant_reward_groups: bool = False
    sync: bool = True  # no async_config / stream_minibatch_config


@dataclass
class _Batch:
    step: int
    expected: int  # groups the dataset handed out
    groups: dict[int, GroupResult] = field(default_factory=dict)
    decided: bool = False


class TinkerRun:
    """The guards of one tinker-cookbook run: the engine, the batches in flight, the run's findings.

    Made by :func:`rl_guards.tinker.guard`; its :meth:`summary`, :attr:`findings` and :meth:`grader_calls` are the
    handle a user reads. :meth:`end` finishes the run's guards (the last dumps, the end-of-run findings);
    :meth:`main` runs the cookbook's ``train.main`` and calls it.
    """

    def __init__(
        self,
        guards_config: GuardsConfig,
        spec: RunSpec,
        *,
        run_id: str | None = None,
        guards: Sequence[type[Guard]] | None = None,
        stray_think_penalty: bool = False,
    ) -> None:
        from rl_guards.guards.registry import TINKER_GUARDS

        self.config = GuardsConfig.from_dict(guards_config.to_dict())  # a copy: the run's folder is set below
        if self.config.rollouts.output_dir is None:
            self.config.rollouts.output_dir = str(Path(spec.log_path) / "rl_guards")
        self.spec = spec
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.guard_classes = list(guards if guards is not None else TINKER_GUARDS)
        self.use_penalty = bool(stray_think_penalty)
        self.engine: Engine | None = None
        self.cookbook_config: Any = None  # the Config guard() returned (for main())
        self.tokenizer: Any = None
        self.renderer: Any = None
        self.penalty: Any = None
        self.markup: Any = None
        self.start_step = 0
        self.stop: GuardError | None = None  # the stop a guard raised (held until the loop sees it)
        self._stop_seen = False
        self._calls = 0  # get_batch calls
        self._batches: dict[int, _Batch] = {}
        self._last_step: int | None = None
        self._begun = False
        self._ended = False
        self._pending: dict[str, list[float]] = {}  # metrics handed over by the engine, not yet delivered
        self._checkpoints_seen: set[str] = set()
        self._lock = threading.RLock()
        self.local: Any = None  # the attached local backend
        self.notes: list[str] = []
        self.hook_seconds: dict[int, float] = {}  # per step: time spent in rl_guards on the loop's threads
        self._renderer_from_envs = False
        self._said_unprobed = False
        self._steps_timed_until = float("-inf")  # env_step spans already fed to the probes' timer (perf_counter)
        _RUNS[self.run_id] = self
        atexit.register(_end_at_exit, weakref.ref(self))

    # ----- set up ------------------------------------------------------------------------------------------------
    def start(self, tokenizer: Any, renderer: Any) -> None:
        """At dataset build (once): the context, the guards, where a resumed run starts."""
        from rl_guards.chat.markup import markup_from_config
        from rl_guards.tinker.context import build_context, set_reward_columns

        with self._lock:
            if self.engine is not None:
                return
            self.tokenizer, self.renderer = tokenizer, renderer
            ctx = build_context(self.spec.log_path, tokenizer, renderer, self.spec.max_tokens)
            set_reward_columns(ctx, penalty=self.use_penalty, call_timeout=self.config.probes.call_timeout)
            self.markup = markup_from_config(self.config.think_tags, ctx.template_text)
            guards = [g for g in (cls(self.config) for cls in self.guard_classes) if g.enabled]
            self.engine = Engine(self.config, guards, ctx, framework_twins=COOKBOOK_TWINS)
            self.engine.metrics_sink = self._sink
            self.engine.setup()
            if self.use_penalty:
                from rl_guards.rewards.stray_think import StrayThinkPenalty

                self.penalty = StrayThinkPenalty.from_guards_config(
                    self.config, tokenizer=tokenizer, chat_template_kwargs=ctx.chat_template_kwargs
                )
            self.start_step, resumed_from = C.resume_point(self.spec.log_path)
            self._checkpoints_seen = {c["name"] for c in C.written(self.spec.log_path)}
            if resumed_from is not None:
                note = C.restore_state(self.engine, self._folder, resumed_from, self.start_step)
                if note is not None:
                    self.notes.append(note)
            if not self.spec.sync:
                self.notes.append(
                    "async_config / stream_minibatch_config: rl_guards decides each get_batch's groups together, "
                    "but the loop trains groups of several batches at once: per-step attribution is approximate "
                    "and the datums sent are not matched to a batch"
                )

    @property
    def _folder(self) -> str:
        """Where the run's findings, dumps and state go (``<log_path>/rl_guards`` unless configured)."""
        return str(self.config.rollouts.output_dir)

    def attach(self, local: Any) -> None:
        """Check the datums a local backend (:class:`rl_guards.tinker.backend.LocalTinker`) receives, as sent."""
        self.local = local
        local.taps.append(self._tap)

    def _spent(self, step: int | None, start: float) -> None:
        if step is not None:
            self.hook_seconds[step] = self.hook_seconds.get(step, 0.0) + time.perf_counter() - start

    def next_batch(self, groups: int) -> int:
        """The dataset hands out a batch of ``groups`` groups: the previous step's events first; its step."""
        start = time.perf_counter()
        step = self.start_step + self._calls
        try:
            return self._next_batch(groups)
        finally:
            self._spent(step, start)

    def _next_batch(self, groups: int) -> int:
        with self._lock:
            step = self.start_step + self._calls
            self._calls += 1
            if self.engine is not None and self._last_step is not None:
                self._finish_steps(upto=step - 1, final=False)
            self._batches[step] = _Batch(step, groups)
            if self.stop is not None and not self._stop_seen:  # a strategy swallowed it in compute_group_rewards
                self._stop_seen = True
                raise self.stop
            return step

    def _finish_steps(self, upto: int, final: bool) -> None:
        """Decide what is still open up to ``upto``, end the step, and tell the engine of new checkpoints."""
        assert self.engine is not None
        for step in sorted(s for s in self._batches if s <= upto):
            batch = self._batches.pop(step)
            if not batch.decided and batch.groups:
                self._decide(batch, late=True)
        last = self._last_step
        if last is None:
            return
        try:
            self.engine.step_end(last, final=final)
            for checkpoint in C.written(self.spec.log_path):
                if checkpoint["name"] in self._checkpoints_seen:
                    continue
                self._checkpoints_seen.add(checkpoint["name"])
                folder = str(Path(self.spec.log_path) / f"checkpoint-{checkpoint['batch']}")
                self.engine.saved(last, folder)
                C.save_state(self.engine, self._folder, checkpoint["name"], last)
        except GuardError as exc:
            self.stop = self.stop or exc

    # ----- S2: a group's rewards ------------------------------------------------------------------------------------
    def record_group(self, step: int, trajectories: Sequence[Any], envs: Sequence[Any]) -> list[Any]:
        """The group's rollouts as sampled (before the recipe's compute_group_rewards may touch them)."""
        start = time.perf_counter()
        try:
            return [record(t, e) for t, e in zip(trajectories, envs, strict=True)]
        finally:
            self._spent(step, start)

    def group_done(self, step: int, *args: Any) -> list[tuple[float, dict[str, Any]]]:
        """The group's rewards as the recipe computed them (plus the stray-think penalty when on); the last group of
        a batch decides the batch (raising its stop here). See :meth:`_group_done` for the arguments."""
        start = time.perf_counter()
        try:
            return self._group_done(step, *args)
        finally:
            self._spent(step, start)

    def _group_done(
        self,
        step: int,
        position: int,
        builder: Any,
        trajectories: Sequence[Any],
        envs: Sequence[Any],
        rollouts: list[Any],
        rewards_and_metrics: Sequence[tuple[float, dict[str, Any]]],
    ) -> list[tuple[float, dict[str, Any]]]:
        if not self._renderer_from_envs:
            self._use_env_renderer(envs)
        final = [float(r) for r, _ in rewards_and_metrics]
        dicts = [dict(m) for _, m in rewards_and_metrics]
        for rollout, trajectory in zip(rollouts, trajectories, strict=True):  # the rewards the loop will sum
            rollout.env_reward = float(sum(float(t.reward) for t in trajectory.transitions))
        penalties = self._penalties(rollouts) if self.penalty is not None else None
        if penalties is not None:
            final = [f + p for f, p in zip(final, penalties, strict=True)]
            for d, p in zip(dicts, penalties, strict=True):
                d[PENALTY] = p
        loss_rows = expected_rows(rollouts)
        if self.local is None:
            advantages, loss_rows = D.rebuilt_rows(trajectories, final, dicts, loss_rows)
        else:  # the datums are checked as sent, at forward_backward
            advantages = D.advantages_of(trajectories, final, dicts)
        tasks = self.config.tasks
        task = task_of(builder, envs[0] if envs else None, tasks.task_column, tasks.default_task)
        group_reward = any(float(r) != 0.0 for r, _ in rewards_and_metrics)
        calls = [
            GraderCall(
                row=i,
                env=env,
                action=r.turns[0][1] if r.turns else [],
                turns=len(r.turns),
                group_reward=group_reward,
                prompt_ids=r.prompt_ids,
            )
            for i, (r, env) in enumerate(zip(rollouts, envs, strict=True))
        ]
        result = GroupResult(position, task, rollouts, [float(r) for r, _ in rewards_and_metrics], penalties, dicts,
                             advantages, loss_rows, calls)  # fmt: skip
        with self._lock:
            batch = self._batches.get(step)
            if batch is None or batch.decided:  # a group of a batch already decided late: nothing to add it to
                return list(zip(final, dicts, strict=True))
            batch.groups[position] = result
            if len(batch.groups) >= batch.expected:
                self._decide(batch)
                if self.stop is not None and not self._stop_seen:  # before the batch trains (FailFast ends the loop)
                    raise self.stop
        return list(zip(final, dicts, strict=True))

    def _penalties(self, rollouts: Sequence[Any]) -> list[float]:
        """The stray-think penalty of each rollout, in the renderer's mode, knowing whether the group's prompt
        already opens the block (a prefill)."""
        assert self.engine is not None
        ctx = self.engine.ctx
        opened = bool(prompts_open_block([rollouts[0].prompt_ids], ctx.decode, self.markup)[0]) if rollouts else False
        self.penalty.set_prompt_opened(opened, opened)
        texts = [ctx.decode_text(r.completion_ids) for r in rollouts]
        column = [ctx.chat_template_kwargs.get("enable_thinking")] * len(rollouts)
        return [float(v) for v in self.penalty(texts, [r.completion_ids for r in rollouts], enable_thinking=column)]

    # ----- deciding a batch -----------------------------------------------------------------------------------------
    def _decide(self, batch: _Batch, *, late: bool = False) -> None:
        assert self.engine is not None
        batch.decided = True
        groups = [batch.groups[p] for p in sorted(batch.groups)]
        self._last_step = batch.step
        try:
            if not self._begun:
                self._begun = True
                self.engine.ctx.rendered_prompts = _distinct([r.prompt_ids for g in groups for r in g.rollouts])
                self.engine.begin(max(batch.step - 1, 0))
            penalty = self.penalty is not None
            rows = local_rows(batch.step, groups, self.engine.ctx, self.markup, self.spec.max_tokens, penalty)
            self._follow_columns(rows.reward_names)
            self._probe_able(rows.reward_inputs or [])
            self._time_env_steps()
            self.engine.submit(rows)
        except GuardError as exc:
            self.stop = self.stop or exc
        self._deliver(groups, late)

    def _follow_columns(self, names: Sequence[str]) -> None:
        """The context's reward columns named after the batch's; guards that size themselves by the column count
        (the reward probes: a verdict mask per column) are set up again when a batch brings a new one."""
        from rl_guards.tinker.context import follow_columns

        assert self.engine is not None
        if not follow_columns(self.engine.ctx, names):
            return
        self.engine.join()  # nothing in flight while the gathered columns change (a no-op on one process)
        for guard in self.engine.guards:
            if isinstance(guard, RewardProbeGuard):
                guard.setup(self.engine.ctx)
        self.engine.assembly.declare_features()

    def _probe_able(self, calls: Sequence[GraderCall]) -> None:
        """The env reward is callable by the probes on a batch with at least one row they can step again (a
        ``ProblemEnv``'s single turn, no group reward: :attr:`GraderCall.stateful`); the others raise there."""
        assert self.engine is not None
        ctx = self.engine.ctx
        if ctx.checked_calls is None or not ctx.reward_funcs:
            return
        able = any(c.stateful is None for c in calls)
        ctx.checked_calls.callers[0] = ctx.reward_funcs[0] if able else None
        if not able and calls and not self._said_unprobed:
            self._said_unprobed = True
            self.notes.append(f"reward probes: the env reward is not probed on batches like step {self._last_step}'s "
                              f"({calls[0].stateful})")  # fmt: skip

    def _time_env_steps(self) -> None:
        """What the env's reward costs, from the loop's own timing: the cookbook's rollout runner times each
        ``env.step`` as an ``env_step`` span of the iteration's window (``trace_iteration``, its ``time/env_step``
        metrics), which the last group's ``compute_group_rewards`` still sees. The batch's steps are fed to the env
        column's timer as one call of that many texts (the probes size their rounds and deadlines from it: a slow
        judge's probe is sized before its first call). A probe's step costs more than the loop's (the caller also
        tokenizes the text, and probe texts run longer), so a text is fed as at least ``UNTIMED``, what the probes
        assume of an untimed function."""
        calls = self.engine.ctx.checked_calls if self.engine is not None else None
        if calls is None or not calls.usable(0):
            return
        try:
            from tinker_cookbook.utils import trace

            window = trace._iteration_window.get(None)  # read only (the loop's own timing of env.step)
            spans = [s for s in list(getattr(window, "spans", None) or []) if s.name == "env_step"]
        except Exception:  # another cookbook version: the probes time the env themselves
            return
        seconds = [s.end_time - s.start_time for s in spans if s.end_time >= s.start_time > self._steps_timed_until]
        if seconds:
            self._steps_timed_until = max(s.end_time for s in spans)
            calls.timer(0).add(len(seconds), max(sum(seconds), UNTIMED * len(seconds)))

    def _use_env_renderer(self, envs: Sequence[Any]) -> None:
        """The renderer the envs prompt with (a ProblemEnv's ``renderer``) is the run's, whatever the config names
        (read from the first group that has one)."""
        from rl_guards.chat.renderer_check import renderer_thinking

        env = next((e for e in envs if getattr(e, "renderer", None) is not None), None)
        if env is None or self.engine is None:
            return
        self._renderer_from_envs = True
        ctx = self.engine.ctx
        ctx.renderer = self.renderer = env.renderer
        ctx.chat_template_kwargs = {**ctx.chat_template_kwargs, "enable_thinking": renderer_thinking(env.renderer)}

    # ----- metrics back to the cookbook -----------------------------------------------------------------------------
    def _sink(self, mode: str, metrics: dict[str, list[float]]) -> None:
        for key, values in metrics.items():
            self._pending.setdefault(key, []).extend(values)

    def _deliver(self, groups: list[GroupResult], late: bool) -> None:
        """The batch's metrics into its trajectories' metrics (:func:`.metrics.deliver`); a batch decided late (its
        row is already logged) leaves them for the next batch's."""
        if late or not groups:
            return
        values = {k: sum(v) / len(v) for k, v in self._pending.items() if v}
        self._pending = {}
        if not values:
            return
        batch = self.engine.last_batch if self.engine is not None else None
        labels, start = [], 0
        for g in groups:
            labels.append(batch.tasks[start] if batch is not None and start < len(batch.tasks) else g.task)
            start += len(g.rollouts)
        M.deliver(values, groups, labels, self.spec.remove_constant_reward_groups)

    # ----- the local backend's tap ----------------------------------------------------------------------------------
    def _tap(self, event: Any) -> None:
        if event.name != "forward_backward" or event.data.get("forward_only"):
            return
        start = time.perf_counter()
        try:
            self._check_sent(event)
        finally:
            self._spent(self._last_step, start)

    def _check_sent(self, event: Any) -> None:
        with self._lock:
            if self.engine is None or self._last_step is None:
                return
            inputs = TrainInputs([D.datum_view(d) for d in event.data["datums"]], D.SENT)
            try:
                self.engine.train_inputs(self._last_step, inputs)
            except GuardError as exc:
                self.stop = self.stop or exc
                self._stop_seen = True  # raised here: the backend fails the request with its message
                raise

    # ----- the end ----------------------------------------------------------------------------------------------------
    def end(self) -> None:
        """Finish the run's guards once: the open batch, the last step's end and checkpoints (the final dump), the
        end-of-run findings. Never raises; called by :meth:`main`, else at interpreter exit."""
        with self._lock:
            if self._ended or self.engine is None:
                return
            self._ended = True
            try:
                self._finish_steps(upto=self.start_step + self._calls, final=True)
                if self._last_step is not None:
                    self.engine.end(self._last_step)
                    self.engine.flush(self._last_step)
            except GuardError as exc:
                self.stop = self.stop or exc
            except Exception as exc:  # the guards' own bug never hides the run's outcome
                logger.warning("rl_guards: ending the tinker run's guards failed: %s: %s", type(exc).__name__, exc)
            finally:
                _RUNS.pop(self.run_id, None)
                if self.local is not None and self._tap in self.local.taps:
                    self.local.taps.remove(self._tap)

    async def main(self, rollout_executor: Any = None) -> None:
        """``tinker_cookbook.rl.train.main`` on the guarded config, then :meth:`end`; a guard's stop raises its own
        error (also when it reached the loop as a failed backend request)."""
        from tinker_cookbook.rl import train

        if self.cookbook_config is None:
            raise RuntimeError("TinkerRun.main needs the config rl_guards.tinker.guard() returned")
        try:
            await train.main(self.cookbook_config, rollout_executor=rollout_executor)
        except GuardError:
            raise
        except Exception as exc:
            if self.stop is not None:
                raise self.stop from exc
            raise
        finally:
            self.end()
        if self.stop is not None:
            raise self.stop

    # ----- the handle ------------------------------------------------------------------------------------------
    @property
    def findings(self) -> list[Any]:
        return self.engine.session.findings if self.engine is not None else []

    @property
    def session(self) -> Any:
        return self.engine.session if self.engine is not None else None

    def guard(self, name: str) -> Guard:
        if self.engine is None:
            raise KeyError(f"the run has not started: no guard {name!r} yet")
        return self.engine.guard(name)

    def grader_calls(self) -> list[GraderCall]:
        """The last decided batch's rows as grader calls (see :mod:`rl_guards.tinker.graders`)."""
        batch = self.engine.last_batch if self.engine is not None else None
        calls = batch.reward_inputs if batch is not None else None
        return list(calls) if isinstance(calls, list) else []

    def metrics_history(self) -> list[dict[str, Any]]:
        """The cookbook's ``metrics.jsonl`` rows as the engine logs its keys (see :func:`.metrics.history`)."""
        labels = list(self.engine.task_labels.kept) if self.engine is not None else []
        return M.history(self.spec.log_path, labels[0] if len(labels) == 1 else None)

    def summary(self) -> str:
        """Findings, per-task curves (first -> last), notes."""
        if self.engine is None:
            return "rl_guards: the run has not started (no batch was seen)"
        text = self.engine.summary(self.metrics_history())
        for note in self.notes:
            text += f"\nnote: {note}"
        return text


def _distinct(rows: list[list[int]], limit: int = 8) -> list[list[int]]:
    out: list[list[int]] = []
    for row in rows:
        if row not in out:
            out.append(row)
        if len(out) >= limit:
            break
    return out


def _end_at_exit(ref: weakref.ref[TinkerRun]) -> None:
    run = ref()
    if run is not None:
        run.end()


__all__ = ["COOKBOOK_TWINS", "RunSpec", "TinkerRun", "live_run"]
