"""The reward probes on verl: the scorer called in the trainer process as verl's reward manager calls it, each call
bounded in time (a stalled scorer never hangs the trainer, on its main thread or off it), the per-call timer fed
with the scorer's own times from the reward workers; and verl's own ``default_compute_score`` on gsm8k rows, on
verl's V1 path with the tiny model generating."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.protocol")  # "verl" alone would find this folder (tests/ is on sys.path)

from _verl_rows import legacy_batch

from rl_guards.errors import RewardProbeError
from rl_guards.reward_calls.verl import VerlCaller
from rl_guards.verl.records import RECORD_KEY, ScoreRecord
from rl_guards.verl.run import VerlGuardRun

PROBES = "+reward.rl_guards.probes.budget=100"  # the tiny steps take milliseconds: 2 % of that fits no probe
THINKING = ["<think>\nadd them\n</think>\n\n7", "<think>\nsum\n</think>\n\n8", "<think>\nok\n</think>\n\n9", "6"]
THINKING_SCORES = [1.0, 0.25, 0.5 / 3, 0.25]  # the tiny scorer's


@pytest.fixture
def run_for(verl_config: Any) -> Any:
    def make(*overrides: str, **kwargs: Any) -> VerlGuardRun:
        return VerlGuardRun(verl_config("actor_rollout_ref.rollout.n=4", "data.max_response_length=12", *overrides,
                                        **kwargs))  # fmt: skip

    return make


def kinds(run: VerlGuardRun) -> set[tuple[str, str]]:
    return {(f.guard, f.kind) for f in run.findings if f.severity != "info"}


def rolled_out(run: VerlGuardRun, batch: Any) -> dict[str, float]:
    """``batch`` processed as a hook does, after a rollout of 0.2 s (the run's clock the probes' budget is a share of
    starts before the first rollout)."""
    run.starting(batch.step)
    time.sleep(0.2)
    return run.process(batch)


def arith_batch(tok: Any, source: str, *, step: int = 1, seconds: float = 0.0) -> Any:
    """Two groups of one arithmetic task (``source``), completions that think, scored as the tiny scorer does."""
    batch = legacy_batch(tok, THINKING * 2, THINKING_SCORES * 2, step=step, seconds=seconds)
    batch.columns["data_source"] = [source] * 8
    batch.columns["reward_model"] = [{"ground_truth": "7"}] * 8
    batch.columns["raw_prompt"] = [[{"role": "user", "content": "What is 3+4? Answer with the number."}]] * 8
    return batch


def test_the_rows_call_row_is_verls_compute_score_call(run_for: Any, tiny: Any) -> None:
    """``VerlScoreCall.call_row()``: what the probes call the scorer with; called through VerlCaller it is the call
    verl's naive manager made (the same keywords, extra_info as the scorer received it, the same score)."""
    run = run_for()
    batch = legacy_batch(tiny.tokenizer, ["7", "8", "so 7", "I think 7", "cat", "dog", "cat", "cat!"], [1.0] * 8)
    records = [ScoreRecord.from_json(r) for r in batch.columns[RECORD_KEY]]
    for r in records:  # the reward worker recorded extra_info as the scorer got it: verl's keys set
        assert r is not None
        r.extra_info = {"index": 0, "num_turns": 2, "rollout_reward_scores": {}}
    batch.columns[RECORD_KEY] = [r.to_json() for r in records if r is not None]
    run.process(batch)
    call = run.engine.last_batch.reward_inputs[0].call_row()
    assert call.columns == {
        "data_source": "tiny/arith",
        "extra_info": {"index": 0, "num_turns": 2, "rollout_reward_scores": {}},
        "ground_truth": "7",
    }
    assert call.reference == "7" and call.original == "7"
    assert call.prompt == [{"role": "user", "content": "What is 3+4? Answer with the number."}]
    assert tiny.tokenizer.decode(call.prompt_ids).endswith("assistant\n")
    seen: list[dict[str, Any]] = []

    def scorer(**kwargs: Any) -> float:
        seen.append(kwargs)
        return 1.0

    assert VerlCaller(scorer)([call], ["7"]) == [1.0]
    extra = call.columns["extra_info"]
    assert seen == [{"data_source": "tiny/arith", "solution_str": "7", "ground_truth": "7", "extra_info": extra}]
    assert seen[0]["extra_info"] is not call.columns["extra_info"]  # a copy: the scorer may change its own


def test_the_probes_call_the_run_scorer_and_their_timer_holds_its_own_times(run_for: Any, tiny: Any) -> None:
    """The trainer-side caller wraps the scorer verl builds (``custom_reward_function``); each row's time in the
    scorer, measured in the reward worker, goes to the probes' timer: one text per call, as verl calls it."""
    run = run_for()
    ctx = run.engine.ctx
    calls = ctx.checked_calls
    assert ctx.reward_func_names == ["compute_score", "manager_terms"]  # the columns a step can hold
    assert isinstance(calls.callers[0], VerlCaller) and calls.callers[1:] == [None] and calls.cap == 30.0
    assert calls.callers[0].fn is ctx.reward_funcs[0]
    run.process(legacy_batch(tiny.tokenizer, ["7", "8", "7", "7", "cat", "dog", "cat", "cat"], [1.0] * 8, seconds=0.2))
    samples = calls.timer(0).samples
    assert samples[:8] == [(1, 0.2)] * 8  # the run's own calls, timed in the worker
    assert all(n > 1 for n, _ in samples[8:])  # then the guards' own merged calls on this batch (sanity, probes)
    estimate = calls.timer(0).estimate(1)
    assert estimate is not None and 0.0 < estimate <= 0.2
    assert calls.deadline(0, 1) == pytest.approx(20 * estimate)  # 20x the expected time
    big = calls.timer(0).estimate(10_000)
    assert big is not None and calls.deadline(0, 10_000) == pytest.approx(min(30.0, 20 * big))  # capped at call_timeout


def test_a_reward_model_run_leaves_the_scorer_out_of_the_probes(run_for: Any) -> None:
    """With ``reward.reward_model.enable`` verl hands the scorer a reward router only its workers know (or scores with
    a discriminative model and no compute_score at all): the trainer process cannot make that call."""
    run = run_for("reward.reward_model.enable=true")
    assert run.engine.ctx.checked_calls.callers == [None, None]


def test_a_scorer_reading_the_thinking_is_found_with_a_penalty_column_beside_it(run_for: Any, tiny: Any) -> None:
    """score_terms [stray_think_penalty] adds a reward column the trainer cannot call: the probes judge the scorer
    with the run's total (scorer + penalty) and leave the penalty alone."""
    run = run_for(PROBES, "+reward.rl_guards.score_terms=[stray_think_penalty]")
    assert run.engine.ctx.reward_func_names == ["compute_score", "stray_think_penalty", "manager_terms"]
    batch = arith_batch(tiny.tokenizer, "plant/thinking")
    records = [ScoreRecord.from_json(r) for r in batch.columns[RECORD_KEY]]
    for r in records:
        assert r is not None
        r.penalty = 0.0
    batch.columns[RECORD_KEY] = [r.to_json() for r in records if r is not None]
    rolled_out(run, batch)
    assert run.engine.last_batch.reward_names == ["compute_score", "stray_think_penalty"]
    assert kinds(run) == {("probes", "reads_thinking:compute_score")}, run.summary()


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
def test_a_scorer_that_stalls_on_a_probe_text_never_hangs_the_trainer(run_for: Any, tiny: Any, where: str) -> None:
    """``plant/stall`` sleeps an hour on texts over 1,000 characters (the probes' long variants): the call is cut at
    its deadline (20x the time the scorer is expected to take on the call's texts, at least 2 s), the scorer is left
    out of later probes with a ``stalled`` finding naming the text, and the step goes on. On the main thread (where
    Ray runs the trainer actor's methods) the call is interrupted; off it, it runs on a worker thread left behind at
    the deadline."""
    run = run_for(PROBES)
    done: dict[str, Any] = {}

    def step() -> None:
        start = time.perf_counter()
        done["metrics"] = rolled_out(run, arith_batch(tiny.tokenizer, "plant/stall", seconds=1e-4))
        done["seconds"] = time.perf_counter() - start

    if where == "main thread":
        step()
    else:
        worker = threading.Thread(target=step, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "the step hung on the stalled scorer"
    assert ("probes", "stalled:compute_score") in kinds(run), run.summary()
    assert done["seconds"] < 20
    stalled = next(f for f in run.findings if f.kind == "stalled:compute_score")
    assert "did not return within" in stalled.message
    assert "the last text it read: 'Thinking about the question." in stalled.message  # the repeated-line variant
    rolled_out(run, arith_batch(tiny.tokenizer, "plant/stall", step=2))  # the next step: not called again
    assert 0 in run.engine.ctx.checked_calls.stalled and run.steps_seen == 2


@pytest.mark.slow
def test_in_a_ray_actor_as_verls_trainer_runs_a_stalled_call_is_interrupted_on_its_main_thread(
    verl_ray: Any, verl_config: Any, tiny: Any
) -> None:
    """verl's trainer runs in a Ray actor (``TaskRunnerV1.run``; the legacy ``TaskRunner.run``): a sync actor's
    methods run on the actor process's main thread, so the probes' calls are interrupted there, not left running."""
    config = verl_config("actor_rollout_ref.rollout.n=4", "data.max_response_length=12", PROBES)
    batch = arith_batch(tiny.tokenizer, "plant/stall", seconds=1e-4)

    @verl_ray.remote
    class Trainer:  # as verl's TaskRunnerV1: a plain actor, its method holding the trainer's loop
        def step(self, config: Any, batch: Any) -> tuple[bool, list[str], float, int]:
            from rl_guards.verl.run import VerlGuardRun

            run = VerlGuardRun(config)
            start = time.perf_counter()
            run.starting(batch.step)
            time.sleep(0.2)
            run.process(batch)
            alive = sum(t.name == "rl_guards-reward-call" for t in threading.enumerate())  # calls left behind
            main = threading.current_thread() is threading.main_thread()
            return main, sorted(f.kind for f in run.findings), time.perf_counter() - start, alive

    main, found, seconds, left_behind = verl_ray.get(Trainer.remote().step.remote(config, batch), timeout=120)
    assert main and left_behind == 0
    assert "stalled:compute_score" in found and seconds < 20


def test_raise_mode_of_the_probes_stops_the_step(run_for: Any, tiny: Any) -> None:
    run = run_for(PROBES, "+reward.rl_guards.probes.mode=raise")
    with pytest.raises(RewardProbeError, match="reads the thinking"):
        rolled_out(run, arith_batch(tiny.tokenizer, "plant/thinking"))
    twin = run_for(PROBES, "+reward.rl_guards.probes.mode=raise")
    rolled_out(twin, arith_batch(tiny.tokenizer, "tiny/arith"))
    assert kinds(twin) == set(), twin.summary()


@pytest.mark.parametrize("source", ["plant/inverted", "tiny/arith"])
def test_reward_sanity_checks_the_first_steps_calls_and_stops_an_inverted_scorer(
    run_for: Any, tiny: Any, source: str
) -> None:
    """The hook reads no dataset rows at start: reward sanity scores right against wrong references (another row's)
    in every answer form on the first step's compute_score calls, as verl calls the scorer; a sign error stops the
    step (mode raise), the tiny scorer passes."""
    from rl_guards.errors import RewardSanityError

    run = run_for()
    batch = arith_batch(tiny.tokenizer, source)
    batch.columns["reward_model"] = [{"ground_truth": "7"}] * 4 + [{"ground_truth": "9"}] * 4
    if source == "plant/inverted":
        with pytest.raises(RewardSanityError, match="pays a wrong answer more than the right one"):
            run.process(batch)
        return
    run.process(batch)
    assert kinds(run) == set(), run.summary()
    notes = run.engine.session.notes
    assert "reference answers more than other rows' answers on 2 row(s)" in notes[("reward_sanity", "reward_sanity_ok")]


# ----- verl's own default_compute_score on gsm8k rows, verl's V1 path ------------------------------------------------

GSM8K_LONG = (  # a completion of ~470 characters that ends with verl's gsm8k answer format
    "<think>\n" + "Add the units first, then check the sum once more by counting up from the larger one. " * 5
    + "\n</think>\n\nThe sum is seven.\n#### 7"
)  # fmt: skip


@pytest.fixture(scope="module")
def gsm8k_chain(verl_ray: Any, tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """verl's V1 path with no custom_reward_function: verl's default_compute_score scores, in the reward workers and
    in the probes."""
    from rl_guards.testing.verl_run import TinyV1Trainer, compose_config
    from rl_guards.testing.verl_server import TinyRolloutServer

    out = tmp_path_factory.mktemp("gsm8k")
    config = compose_config(tiny.model_dir, out, scorer="verl", response_length=160)
    server = TinyRolloutServer(tiny.model_dir, 32, seed=1, canned={"[long]": (GSM8K_LONG, True)})
    trainer = TinyV1Trainer(config, tiny.model_dir, server=server)
    yield trainer
    trainer.close()


def gsm8k_rows(*prompts: str) -> list[dict[str, Any]]:
    from rl_guards.testing.verl_run import verl_row

    return [verl_row(p, "openai/gsm8k", 7, i) for i, p in enumerate(prompts)]


@pytest.mark.slow
def test_gsm8k_tail_is_not_reported_while_no_completion_reaches_it(gsm8k_chain: Any, tmp_path: Path) -> None:
    """verl's gsm8k scorer keeps the last 300 characters. The tiny model's completions are under 40: the probes'
    texts stop at 64 characters or the batch's longest completion, so the window is never reached and no cut is
    reported (true: in this run the clip drops nothing; later rounds, on longer completions, find it). The scorer
    also grades a '#### 7' inside the thinking when the answer after the block is not in that form: a fallback,
    which a run does not report. It never pays these completions (no '#### 7'): dead groups, not a probe finding."""
    run = gsm8k_chain.fresh_guards({"output_dir": str(tmp_path), "probes": {"budget": 100.0}})
    gsm8k_chain.step(gsm8k_rows("What is 3+4? Answer with the number.", "What is 2+5?"))
    assert run.engine.ctx.reward_func_names[0] == "default_compute_score"
    assert max(len(c) for c in run.engine.last_batch.completions) < 64
    assert {f.guard for f in run.findings} <= {"dead_groups"}, run.summary()
    assert "probes: 1 round(s)" in run.summary() and "default_compute_score: openai/gsm8k 8 rows" in run.summary()


@pytest.mark.slow
def test_gsm8k_tail_is_reported_once_completions_are_longer_than_it(gsm8k_chain: Any, tmp_path: Path) -> None:
    """The same scorer on a batch whose completions reach 470 characters: the probes find the window, to the
    character (the answer '#### 7' and 294 characters after it are read, 295 are not)."""
    run = gsm8k_chain.fresh_guards({"output_dir": str(tmp_path), "probes": {"budget": 100.0}})
    gsm8k_chain.step(gsm8k_rows("What is 3+4? Answer with the number. [long]", "What is 2+5?"))
    found = [f for f in run.findings if f.guard == "probes"]
    assert [f.kind for f in found] == ["reads_suffix:default_compute_score"], run.summary()
    assert "with 294 characters after it, but not with 295" in found[0].message
    assert "no completion of this run is that long yet" not in found[0].message
