"""The trainer-side hook (VerlGuardRun) on one step's rows laid out as verl's trainer holds them: the legacy
trainer's padded batch (``agent_loop.py`` ``_postprocess``: prompts left-padded, responses right-padded, the reward
at ``valid_length - 1``) and the V1 trainer's TransferQueue fields (unpadded rows). No Ray here: the slow tests run
verl's own rollout and reward loop (test_v1_loop.py, test_legacy_loop.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl.protocol")  # "verl" alone would find this folder (tests/ is on sys.path)

from _verl_rows import legacy_batch

from rl_guards.errors import MaskingError
from rl_guards.verl.records import RECORD_KEY, ScoreRecord, VerlScoreCall
from rl_guards.verl.rows import from_fields, step_rows
from rl_guards.verl.run import STATE_FILE, VerlGuardRun


@pytest.fixture
def run_for(verl_config: Any) -> Any:
    def make(*overrides: str, **kwargs: Any) -> VerlGuardRun:
        return VerlGuardRun(verl_config("actor_rollout_ref.rollout.n=4", "data.max_response_length=12", *overrides,
                                        **kwargs))  # fmt: skip

    return make


CLEAN = ["7", "8", "so 7", "I think 7", "cat", "dog", "cat", "cat!"]
CLEAN_SCORES = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def kinds(run: VerlGuardRun) -> set[tuple[str, str]]:
    return {(f.guard, f.kind) for f in run.findings if f.severity != "info"}


def test_a_clean_step_is_silent_and_logs_the_guards_metrics(run_for: Any, tiny: Any) -> None:
    run = run_for()
    metrics = run.process(legacy_batch(tiny.tokenizer, CLEAN, CLEAN_SCORES))
    assert kinds(run) == set()
    assert metrics["rl_guards/masking/checked_batches"] == 1.0
    assert metrics["rl_guards_task/tiny%2Farith/reward_mean"] == pytest.approx(0.75)
    assert metrics["rl_guards_task/tiny%2Fecho/reward_mean"] == pytest.approx(0.75)
    assert all(isinstance(v, float) for v in metrics.values())
    batch = run.engine.last_batch
    assert batch is not None and batch.reward_names == ["compute_score"] and batch.num_generations == 4
    assert batch.completions[2] == "so 7" and batch.completion_ids[2][-1] == tiny.tokenizer.eos_token_id


def test_the_rows_carry_the_compute_score_call_for_the_reward_probes(run_for: Any, tiny: Any) -> None:
    run = run_for()
    run.process(legacy_batch(tiny.tokenizer, CLEAN, CLEAN_SCORES))
    calls = run.engine.last_batch.reward_inputs
    assert isinstance(calls, tuple) and len(calls) == 8 and all(isinstance(c, VerlScoreCall) for c in calls)
    call = calls[4]
    assert (call.data_source, call.solution_str, call.ground_truth) == ("tiny/echo", "cat", "cat")
    assert call.observed and call.score == 1.0 and call.extra_info == {"index": 1}
    assert call.response_ids[-1] == tiny.tokenizer.eos_token_id and tiny.tokenizer.decode(call.prompt_ids).endswith(
        "assistant\n"
    )
    assert call.prompt == [{"role": "user", "content": "Repeat the word: cat"}] and call.seconds == 0.0


def test_rows_come_in_group_order_and_incomplete_groups_are_left_out(run_for: Any, tiny: Any) -> None:
    batch = legacy_batch(tiny.tokenizer, CLEAN, CLEAN_SCORES)
    order = [4, 0, 5, 1, 6, 2, 7, 3]  # groups interleaved, as a balanced batch may hold them
    for key, values in batch.columns.items():
        batch.columns[key] = [values[i] for i in order]
    for name in ("prompts", "prompt_mask", "responses", "response_attention", "response_mask", "rm_scores"):
        setattr(batch, name, getattr(batch, name)[order])
    run = run_for()
    rows = step_rows(batch, ctx=run.engine.ctx, markup=run.markup, group_size=4, response_length=12)
    assert rows.rows.columns["uid"] == ["u1"] * 4 + ["u0"] * 4 and rows.left_out == 0
    batch.columns["uid"][0] = "u9"  # one row of u1 lost its group (a failed session on V1)
    rows = step_rows(batch, ctx=run.engine.ctx, markup=run.markup, group_size=4, response_length=12)
    assert rows.rows.columns["uid"] == ["u0"] * 4 and rows.left_out == 4


def test_an_empty_responses_reward_on_padding_stops_the_run(run_for: Any, tiny: Any) -> None:
    """verl 0.9.1 puts an empty response's reward on its last padding column (PR #6310, not merged): a scorer that
    pays an empty answer (a format credit) puts reward where no token learns."""
    run = run_for()
    replies = [None, *CLEAN[1:]]
    with pytest.raises(MaskingError, match="reward_position: 1 of 8 rows carry their reward on a position"):
        run.process(legacy_batch(tiny.tokenizer, replies, [0.5, *CLEAN_SCORES[1:]]))
    twin = run_for()  # the clean twin: an empty response scored 0 leaves no reward anywhere
    twin.process(legacy_batch(tiny.tokenizer, replies, [0.0, *CLEAN_SCORES[1:]]))
    assert ("masking", "reward_position") not in kinds(twin)


def test_truncation_is_read_from_the_ids_including_the_rows_verl_counts_as_unclipped(run_for: Any, tiny: Any) -> None:
    """A response cut by the context limit ends before max_response_length without EOS: verl's clip ratio counts only
    rows at max length (#7823); the guard counts every response without EOS."""
    run = run_for("+reward.rl_guards.truncation.min_rows=4")
    batch = legacy_batch(
        tiny.tokenizer, ["1 2 3 4 5 6 7 8 9 10 11 12 13"] * 4 + CLEAN[4:], [0.0] * 4 + CLEAN_SCORES[4:]
    )
    batch.responses[4, 1] = tiny.tokenizer.pad_token_id  # a response of 1 token without EOS (cut by the context)
    batch.response_attention[4, 1:] = 0
    batch.response_mask[4, 1:] = 0
    batch.rm_scores[4] = 0
    run.process(batch)
    rows = run.engine.last_batch
    assert rows.truncated == [True] * 5 + [False] * 3
    assert sum(1 for n in rows.completion_lengths if n == 12) == 4  # what verl's clip ratio sees: 4 of 8
    assert ("truncation", "truncation_rate") in kinds(run)


def test_from_fields_pads_the_v1_rows_as_verl_does(run_for: Any, tiny: Any) -> None:
    """TransferQueue's rows (unpadded, reward at the last response token, extra keys in extra_fields) give the same
    engine rows as the legacy layout."""
    import torch

    legacy = legacy_batch(tiny.tokenizer, CLEAN, CLEAN_SCORES)
    n = len(legacy)
    valid = legacy.response_attention.sum(1).tolist()
    prompt_counts = legacy.prompt_mask.sum(1).tolist()
    nested = torch.nested.as_nested_tensor
    fields = {
        "prompts": nested([legacy.prompts[i, -prompt_counts[i] :] for i in range(n)], layout=torch.jagged),
        "responses": nested([legacy.responses[i, : valid[i]] for i in range(n)], layout=torch.jagged),
        "response_mask": nested([legacy.response_mask[i, : valid[i]] for i in range(n)], layout=torch.jagged),
        "rm_scores": nested([legacy.rm_scores[i, : valid[i]] for i in range(n)], layout=torch.jagged),
        "session_id": [i % 4 for i in range(n)],
        "extra_fields": [{"reward_extra_info": {RECORD_KEY: r, "acc": 0.0}} for r in legacy.columns[RECORD_KEY]],
        **{k: v for k, v in legacy.columns.items() if k != RECORD_KEY},
    }
    v1 = from_fields(fields, step=1, pad_token_id=tiny.tokenizer.pad_token_id)
    a, b = run_for(), run_for()
    a.process(legacy)
    b.process(v1)
    x, y = a.engine.last_batch, b.engine.last_batch
    assert x.completion_ids == y.completion_ids and x.prompt_ids == y.prompt_ids and x.rewards == y.rewards


def test_state_is_saved_with_a_checkpoint_and_restored_on_resume(run_for: Any, tiny: Any, tmp_path: Path) -> None:
    dead = [0.0] * 8
    run = run_for("+reward.rl_guards.dead_groups.warn_after_steps=3")
    run.process(legacy_batch(tiny.tokenizer, CLEAN, dead, step=1))
    run.process(legacy_batch(tiny.tokenizer, CLEAN, dead, step=2))
    folder = Path(run.config.trainer.default_local_dir) / "global_step_2"
    run.saved(2, str(folder))
    saved = json.loads((folder / STATE_FILE).read_text())
    assert saved["attributes"]["guards"]["dead_groups"]["streaks"] == {"tiny%2Farith": 2, "tiny%2Fecho": 2}
    resumed = run_for("+reward.rl_guards.dead_groups.warn_after_steps=3")
    resumed.process(legacy_batch(tiny.tokenizer, CLEAN, dead, step=3))  # verl resumes at step 3 from global_step_2
    assert ("dead_groups", "dead_task") in kinds(resumed)
    fresh = run_for(
        "+reward.rl_guards.dead_groups.warn_after_steps=3", "trainer.default_local_dir=" + str(tmp_path / "x")
    )
    fresh.process(legacy_batch(tiny.tokenizer, CLEAN, dead, step=3))
    assert ("dead_groups", "dead_task") not in kinds(fresh)


def test_findings_go_to_the_run_folder_in_the_trl_runs_format(run_for: Any, tiny: Any) -> None:
    from rl_guards.rollouts.findings import find_findings_file, load_findings

    run = run_for("+reward.rl_guards.routing.mode=warn")
    batch = legacy_batch(tiny.tokenizer, CLEAN, CLEAN_SCORES)
    records = [ScoreRecord.from_json(r) for r in batch.columns[RECORD_KEY]]
    for r in records[:4]:  # the first group's scorer returned None
        assert r is not None
        r.score, r.returned_none = None, True
    batch.columns[RECORD_KEY] = [r.to_json() for r in records if r is not None]
    run.process(batch)
    folder = Path(run.config.trainer.default_local_dir)
    path = find_findings_file(folder)
    assert path == folder / "rl_guards" / "findings.jsonl"
    log = load_findings(path)
    assert [(f["guard"], f["kind"]) for f in log.findings] == [("routing", "unscored_rows")]


def test_the_sampler_without_the_verl_config_samples_as_verls_own_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("transfer_queue")
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from rl_guards.verl.replay import GuardedReplayBuffer

    with caplog.at_level("WARNING", logger="rl_guards"):
        buffer = GuardedReplayBuffer(
            trainer_mode="sync",
            trainer_config={},
            max_off_policy_threshold=None,
            max_off_policy_strategy="drop",
            sampler_kwargs={},  # a plain dict: no parent to reach the verl config through
        )
    assert buffer.run is None and isinstance(buffer.inner, ReplayBuffer)
    assert buffer.max_off_policy_strategy == "drop"  # verl's attributes through the wrapper
    assert "without the guards" in caplog.text


def test_verl_builds_the_guarded_sampler_from_its_config_with_dapo_filtering_kept(verl_config: Any) -> None:
    """verl's own ``_build_replay_buffer`` loads the custom sampler from the config; verl gives a custom sampler no
    group filtering, the guarded one reads it from the config as verl would have passed it to its own buffer."""
    pytest.importorskip("transfer_queue")
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rl_guards.verl.replay import GuardedReplayBuffer

    config = verl_config("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc")
    trainer = PPOTrainerSync.__new__(PPOTrainerSync)  # its __init__ starts GPU workers: the fields the method reads
    trainer.config, trainer.trainer_mode = config, "sync"
    buffer = trainer._build_replay_buffer()
    assert isinstance(buffer, GuardedReplayBuffer) and isinstance(buffer.inner, ReplayBuffer)
    assert buffer.filter_groups_metric == "acc" and buffer.gen_batch_size == 1
    assert buffer.run is not None and buffer.run.group_size == 4
