"""The engine: drives the guards through a run, with no trainer in sight.

A driver (the TRL adapter :mod:`rl_guards.trl.hook`, a replay, a test) builds the :class:`RunContext`, hands the
engine each generation batch as :class:`~rl_guards.engine.assembly.LocalRows` (plus the trainer's loss tensors,
when it has them) and tells it the trainer's events. Per generation batch, on every rank::

    check_tensors(tensors)           # guards that read the loss tensors stage per-row bits on the device
    batch = assembly.assemble(rows)  # one gather of numbers: every rank holds every row's numbers
    on_batch(batch)                  # every guard decides from the same numbers
    agreement.decide(...)            # one all_reduce: stop (all ranks together) or not, fetch text or not
    fill_rows(...)                   # text moves only for a message that shows rows, and for a dump
    after_batch(batch); settle()     # messages rendered now that their rows are here
    metrics -> metrics_sink          # the driver puts them where its trainer logs

A batch's decision (from the gather on), each event's agreement and every guard hook that runs collectives
(``Guard.COLLECTIVE_HOOKS``) run in lockstep sections (:mod:`rl_guards.tensors.lockstep`): an exception on one rank
leaves the section on every rank at the same collective, the batch (or hook) skipped and the failing rank's error
recorded on every rank. A stop raises the guard's :class:`~rl_guards.errors.GuardError` from :meth:`Engine.process`
(or the event) on every rank. Metrics go to ``metrics_sink(mode, {key: [values]})``; on a stop ``log_now(step)``
lets the driver log the failing batch's metrics at once (the trainer will not).

A driver whose framework builds the loss inputs only after the batch was decided (tinker-cookbook's datums, seen by a
local backend as they are sent) hands them to :meth:`Engine.train_inputs`, an event whose guards decide before the
step trains.

With several ranks (and ``engine.background``), :meth:`Engine.submit` hands a train batch from the rows on to a
background thread, whose collectives run on a process group of the engine's own, so that waiting for the other ranks
and deciding over every rank's rows overlap the step's training; the next call into the engine (the step's end, at
the latest) waits for it, hands its metrics to the sink and raises its stop. Only one batch is ever in flight, and
nothing else in the engine runs while it is.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rl_guards.config import GuardsConfig
from rl_guards.core.batch import RolloutBatch
from rl_guards.core.metric_set import MetricFilter
from rl_guards.core.run_summary import task_summary_text
from rl_guards.core.task_labels import TaskLabels, task_hash
from rl_guards.engine.agreement import Agreement
from rl_guards.engine.assembly import Assembly, LocalRows, Prepared
from rl_guards.engine.findings_file import FindingsFile
from rl_guards.engine.ranks import Ranks
from rl_guards.engine.start_checks import run_begin
from rl_guards.errors import GuardError
from rl_guards.guards.base import Finding, Guard, RunContext, overrides, run_hook
from rl_guards.guards.session import GuardSession

logger = logging.getLogger("rl_guards")


class _InFlight:
    """A batch being decided on a background thread of its own (started here): what :meth:`Engine.join` hands on."""

    def __init__(self, step: int, mode: str, work: Callable[[], Any]) -> None:
        self.step = step
        self.mode = mode
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), name="rl_guards-batch", daemon=True)
        self.thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        time.sleep(0)  # hands the GIL back at once: the hook returns without waiting out a switch interval
        try:
            work()
        except BaseException as exc:  # handed to the training thread by Engine.join
            self.error = exc


class Engine:
    """Holds the guards, the findings (``session``) and the per-run numbers; one instance per run and rank."""

    def __init__(
        self,
        config: GuardsConfig,
        guards: Sequence[Guard],
        ctx: RunContext,
        *,
        ranks: Ranks | None = None,
        session: GuardSession | None = None,
        task_counts: dict[str, int] | None = None,
        single_task: bool = False,
        framework_twins: frozenset[str] = frozenset(),
        findings_folder: Callable[[], Path] | None = None,
    ) -> None:
        self.config = config
        self.guards = [g for g in guards if g.enabled]
        self.ctx = ctx
        self.ranks = ranks or Ranks(ctx.world_size, ctx.process_index, ctx.is_main_process)
        self.session = session or GuardSession()
        self.session.defer = True  # stops and row-showing messages settle once the batch's text is in place
        self.session.verbose = config.console.verbose  # info findings and notes on the console too
        self.session.metric_filter = MetricFilter(
            config.metrics.level, single_task=single_task, framework_twins=frozenset(framework_twins)
        )
        self.task_labels = TaskLabels(config.tasks.max_tasks)
        self.assembly = Assembly(config, self.guards, self.session, self.ranks, self.task_labels)
        self.agreement = Agreement(self.ranks, self.session, [g.name for g in self.guards])
        self.batches_seen = 0
        self.last_batch: RolloutBatch | None = None
        self.metrics_sink: Callable[[str, dict[str, list[float]]], None] | None = None
        self.log_now: Callable[[int | None], None] = lambda step: None
        self.current_mode: Callable[[], str] = lambda: "train"  # the driver's: where metrics outside a batch go
        self._step_batches: list[RolloutBatch] = []  # this step's train batches (a checkpoint dumps them)
        self._held_stop: GuardError | None = None  # found between batches; raised at the next agreement
        counts = task_counts or {}
        self.task_labels.seed(counts)
        self.assembly.task_registry.update({task_hash(name): name for name in counts})
        # findings on disk as they happen, next to the dumps unless the driver names a folder (main process; the
        # file only once something is found)
        folder = findings_folder or self.rollouts_folder
        self.findings_file = FindingsFile(self.session, folder) if self.ranks.is_main_process else None
        if self.findings_file is not None:
            self.agreement.on_stop.append(self.findings_file.stop)
        self._tensor_guards = [g for g in self.guards if overrides(g, "check_tensors")]
        # A background thread decides train batches when there are ranks to wait for; its collectives (and from
        # then on all of the engine's) run on a group of their own, never interleaved with the trainer's.
        self.background = bool(config.engine.background) and self.ranks.several
        self._no_group: Any = None
        if self.background:
            with self.ranks.section("own group") as section:
                self.ranks.own_group()
            if section.failure is not None:  # no gloo here (or no new group) on some rank: every rank decides inline
                self.background = False
                self.ranks.group = None
                self._no_group = section.failure  # recorded at setup(), once the guards know where findings go
                logger.warning(
                    "rl_guards: could not make a process group of its own %s (%s); batches are decided in the hook, "
                    "waiting for every rank (engine.background: false).",
                    section.failure.where,
                    section.failure.message,
                )
        self._in_flight: _InFlight | None = None
        self._raised: GuardError | None = None  # this rank's stop of the batch being decided (kept if that fails)

    def setup(self) -> None:
        """Hand every guard the (complete) run context."""
        for guard in self.guards:
            guard.setup(self.ctx)
        self.assembly.declare_features()
        if self._no_group is not None:
            self._rank_failure("no process group of its own (engine.background off)", self._no_group, None)

    # ----- per batch -----------------------------------------------------------------------------------------
    def check_tensors(self, step: int, tensors: Any) -> None:
        """The trainer's loss tensors of this rank's rows, before the batch is assembled (every rank)."""
        self.join()
        self._run("check_tensors", step, tensors, guards=self._tensor_guards)

    def submit(self, local: LocalRows, device: Any = None) -> None:
        """One generation batch, as :meth:`process` takes it: decided on the background thread when the engine has
        one (train batches), its outcome raised by the next call into the engine; else processed now."""
        self.join()
        if not self.background or local.mode != "train":
            self.process(local, device)
            return
        prepared = self.assembly.prepare(local, device)  # this rank's rows: the run's reward functions, if any, here
        setup = self.ranks.thread_setup()

        def decide() -> None:
            setup()
            self._decide_together(prepared, device)

        self._in_flight = _InFlight(local.step, local.mode, decide)

    def join(self) -> None:
        """Wait for the batch on the background thread (if any): its metrics to the sink, its stop raised."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.thread.join()
            self._hand_on(in_flight.step, in_flight.mode, in_flight.error)

    def process(self, local: LocalRows, device: Any = None) -> RolloutBatch | None:
        """One generation batch, on every rank: assemble, decide, agree; raises the agreed stop on every rank.

        Collectives, in the same order on every rank whatever happens locally: the per-row feature gather, a name
        exchange (only when a task name is new), the decision all_reduce, and only when a message or a dump needs
        it, the text of the rows concerned.
        """
        self.join()
        batch, stop = None, None
        try:
            batch = self._decide_together(self.assembly.prepare(local, device), device)
        except GuardError as exc:
            stop = exc
        self._hand_on(local.step, local.mode, stop)
        return batch

    def _hand_on(self, step: int, mode: str, error: BaseException | None) -> None:
        """A decided batch's metrics to the sink, then its error raised (a stop logs the failing batch first)."""
        self.flush_metrics(mode)
        if error is not None:
            if isinstance(error, GuardError):
                self.log_now(step)
            raise error

    def _decide_together(self, prepared: Prepared, device: Any) -> RolloutBatch | None:
        """:meth:`_decide` in a lockstep section: an exception on any rank skips the batch on every rank (recorded
        on every rank with that rank's error); a stop agreed before it still stops, one not yet agreed is held."""
        self._raised = self.agreement.agreed = None
        step = prepared.local.step
        with self.ranks.section("batch", passthrough=(GuardError,)) as section:
            batch = self._decide(prepared, device)
        if section.failure is None:  # (a failure may be another rank's: this rank's batch is then dropped too)
            return batch
        self._rank_failure(f"batch guards skipped at step {step}", section.failure, step)
        stop = self._after_failure(self._raised)
        if stop is not None:
            raise stop
        return None

    def _after_failure(self, raised: GuardError | None) -> GuardError | None:
        """A section failed: the stop it had agreed on, if any, to raise all the same (every rank agreed on it); a
        stop of this rank's not yet agreed on is held for the next agreement."""
        agreed, self.agreement.agreed = self.agreement.agreed, None
        if agreed is not None:
            return raised or agreed
        self._held_stop = self._held_stop or raised
        return None

    def _rank_failure(self, what: str, failure: Any, step: int | None) -> None:
        """A lockstep section failed: the same finding on every rank (the main process's summary names the rank)."""
        where = f" {failure.where}" if self.ranks.several else ""
        self.session.record(
            Finding("hook", "internal_error", "warning", f"{what}: rl_guards failed{where}: {failure.message}", step),
            warn=True,
        )

    def _decide(self, prepared: Prepared, device: Any) -> RolloutBatch | None:
        """:meth:`process` from this rank's prepared rows on, without handing on metrics: the part the background
        thread runs (collectives, the guards' decisions over every rank's rows, agreement, text for messages)."""
        step = prepared.local.step
        batch = self.assembly.finish(prepared, device)
        if batch is None:  # some rank could not build its rows: skipped on every rank, no hang
            held = self._raised = self._take_held_stop()
            stop, _ = self.agreement.decide(held, step, need_text=False)
            if stop is not None:
                raise self.agreement.share(held, stop)
            return None
        self.batches_seen += 1
        self.last_batch = batch
        if batch.mode == "train":
            self._step_batches = [b for b in self._step_batches if b.step == step] + [batch]
        raised = self._raised = self._run("on_batch", step, batch) or self._take_held_stop()
        needed = self.session.pending_rows()
        stop, need_text = self.agreement.decide(raised, step, need_text=any(not batch.holds(r) for r in needed))
        if need_text:
            self.assembly.fill_rows([batch], everywhere=True, rows=needed)
        if stop is not None or any(g.wants_rows(batch) for g in self.guards if overrides(g, "wants_rows")):
            self.assembly.fill_rows([batch], everywhere=False)
        self._run("after_batch", step, batch)
        error = self.session.settle()  # messages rendered now that their rows are here
        if stop is not None:
            stop = self.agreement.share(raised or error, stop)
            for guard in self.guards:  # let the others save evidence (the recorder dumps the batch)
                if overrides(guard, "on_stop"):
                    try:
                        run_hook(guard, "on_stop", self.session, step, batch)
                    except GuardError:  # already stopping; a second stop adds nothing
                        pass
            raise stop
        return batch

    # ----- events --------------------------------------------------------------------------------------------
    def begin(self, step: int) -> None:
        """Training starts (or resumes) at ``step``: the start-of-training checks, agreed on by every rank."""
        self.join()
        if self.findings_file is not None:
            self.findings_file.begin(step)
        raised = run_begin(self.guards, self.session, step, around=self._hook_section) or self._take_held_stop()
        stop = self._settle_together("train begin", raised, step)
        self.share_template_verdict()
        self.flush_metrics("train")  # the model is not in train mode yet; these belong to the first training log
        if stop is not None:
            self.log_now(None)
            raise stop

    def train_inputs(self, step: int, inputs: Any) -> None:
        """The inputs the trainer is about to train on for ``step``'s train batch, seen after the batch was decided
        (a driver whose framework builds them later: tinker's datums): the guards that read them decide now, all
        ranks together; a stop raises here, before the step trains. Their metrics go with the next batch's."""
        self.join()
        batch = next((b for b in reversed(self._step_batches) if b.step == step), None)
        self._dispatch("on_train_inputs", step, batch, inputs)

    def step_end(self, step: int, *, final: bool, checkpoint_dir: str | None = None) -> None:
        """After an optimizer step, before the trainer logs it; ``checkpoint_dir``: a checkpoint is saved next."""
        self.join()  # the step's batch, decided while it trained
        if final:
            self._dispatch("on_step_end", step, final)  # no batch follows: agree now
        else:
            # No collective on every step: what a guard finds here (the writer's results, on the main process) is
            # shown now and, if it stops the run, stops every rank at the next agreement (the next batch's).
            raised = self._run("on_step_end", step, final)
            self._held_stop = self._held_stop or raised or self.session.settle()
        if checkpoint_dir is not None:
            if any(overrides(g, "wants_rows") for g in self.guards):  # the checkpoint's dump needs its rows
                with self.ranks.section("checkpoint rows") as section:
                    self.assembly.fill_rows(self._step_batches, everywhere=False)
                if section.failure is not None:
                    self._rank_failure(f"the rows of checkpoint {step} stayed on their ranks", section.failure, step)
            self._dispatch("before_save", step, checkpoint_dir)
        self.flush_metrics("train")  # before the trainer's log of this step

    def saved(self, step: int, checkpoint_dir: str) -> None:
        """The trainer saved ``checkpoint_dir``."""
        self.join()
        self._dispatch("on_save", step, checkpoint_dir)

    def end(self, step: int) -> None:
        """Training ended (once)."""
        self.join()
        self._dispatch("on_train_end", step)
        if self.findings_file is not None:
            self.findings_file.snapshot()

    def flush(self, step: int | None = None) -> None:
        """Wait for the guards' background work (dumps being written) and report it."""
        self.join()
        self._run("flush", step if step is not None else 0)

    # ----- plumbing ------------------------------------------------------------------------------------------
    def _run(self, hook: str, step: int, *args: Any, guards: Sequence[Guard] | None = None) -> GuardError | None:
        """Call ``hook`` on every guard that implements it; the first GuardError a guard raised itself is returned.

        Raise-mode violations do not raise here (the session defers them to :meth:`GuardSession.settle`), so the
        guards after a stopping one still run and the failing batch's metrics and findings are complete.
        """
        stop: GuardError | None = None
        for guard in guards if guards is not None else self.guards:
            if not overrides(guard, hook):
                continue
            try:
                run_hook(guard, hook, self.session, step, *args, settle=False, around=self._hook_section(guard, hook))
            except GuardError as exc:
                stop = stop or exc
        return stop

    def _hook_section(self, guard: Guard, hook: str) -> Any:
        """The lockstep section a guard's collective hook runs in (None for the others: no collective to keep)."""
        return self.ranks.section(f"{guard.name}.{hook}") if hook in guard.COLLECTIVE_HOOKS else None

    def _settle_together(self, what: str, raised: GuardError | None, step: int) -> GuardError | None:
        """:meth:`Agreement.settled` in a lockstep section; when it fails on some rank, the failure is recorded on
        every rank and a stop agreed before it is returned all the same, else this rank's stop is held for the next
        agreement."""
        self.agreement.agreed = None
        with self.ranks.section(what) as section:
            stop = self.agreement.settled(raised, step)
        if section.failure is None:
            return stop
        self._rank_failure(f"{what} at step {step}", section.failure, step)
        return self._after_failure(raised)

    def _dispatch(self, hook: str, step: int, *args: Any) -> None:
        """Run an event's hook on every guard; all ranks stop together if one stops."""
        stop = self._settle_together(hook, self._run(hook, step, *args) or self._take_held_stop(), step)
        if stop is not None:
            self.flush_metrics()
            self.log_now(None)
            raise stop

    def _take_held_stop(self) -> GuardError | None:
        held, self._held_stop = self._held_stop, None
        return held

    def flush_metrics(self, mode: str | None = None) -> None:
        """Hand the session's metrics to the driver's sink (NaNs dropped)."""
        metrics = self.session.pop_metrics()
        if not metrics or self.metrics_sink is None:
            return
        clean = {k: [v for v in values if not math.isnan(v)] for k, values in metrics.items()}
        self.metrics_sink(mode or self.current_mode(), {k: v for k, v in clean.items() if v})

    def share_template_verdict(self) -> None:
        """Tell reward functions that want it whether the generation prompt already opens ``<think>``."""
        verdicts = [g for g in self.guards if overrides(g, "prompt_opened")]
        if not verdicts:
            return
        for fn in self.ctx.reward_funcs:
            setter = getattr(fn, "set_prompt_opened", None)
            if callable(setter):
                try:
                    setter(verdicts[0].prompt_opened(True), verdicts[0].prompt_opened(False))
                except Exception as exc:  # never fatal
                    logger.warning("rl_guards: could not pass the template verdict to %r: %s", fn, exc)

    def rollouts_folder(self) -> Path:
        """The rollouts guard's folder (where ``findings.jsonl`` goes too), or its default when it is off."""
        from rl_guards.guards.recorder import RolloutRecorder
        from rl_guards.rollouts.store import default_rollouts_dir

        recorder = next((g for g in self.guards if isinstance(g, RolloutRecorder)), None)
        return recorder.folder if recorder is not None else default_rollouts_dir(self.ctx.output_dir)

    def guard(self, name: str) -> Guard:
        """The guard with this name."""
        for g in self.guards:
            if g.name == name:
                return g
        raise KeyError(f"no guard named {name!r}; installed: {[g.name for g in self.guards]}")

    def summary(self, log_history: Sequence[dict[str, Any]] = (), unavailable: dict[str, str] | None = None) -> str:
        """Readable table of findings, the per-task curves, what the guards add (probe coverage), unavailable ones."""
        text = self.session.summary_text()
        tasks = task_summary_text(list(log_history))
        if tasks:
            text += "\n" + tasks
        for guard in self.guards:
            if overrides(guard, "summary_text"):
                extra = guard.summary_text()
                if extra:
                    text += "\n" + extra
        if unavailable:
            text += "\nunavailable: " + ", ".join(f"{k} ({v})" for k, v in sorted(unavailable.items()))
        return text

    def record_warning(self, guard: str, kind: str, message: str, step: int | None) -> None:
        """A warning of the engine's own (state not saved or restored): recorded and warned once."""
        self.session.record(Finding(guard, kind, "warning", message, step), warn=True)


__all__ = ["Engine"]
