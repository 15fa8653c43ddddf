"""Issue 22 item 7: readers never break on bad data.

The crafted-file suite: every field of a rollout dump (each Parquet column, each metadata field, the elements of the
id and anomaly lists) and of a drift probe record, given each wrong type (null, negative, huge, string, inf, NaN,
list, dict), goes through every reader: ``RolloutStore`` (index, unreadable, load, rows with filters),
``rl-guards rollouts list | show | compare``, ``rl-guards drift`` and ``rl-guards report``. None may crash: a file a
reader cannot use is named once and skipped, the others are read. Also: inf rewards are counted, never logged as a
huge finite number, and the report is written; a task name holding a lone surrogate costs nothing at a checkpoint.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _rollouts_data import Harness, make_batch

from rl_guards.cli.main import main as cli
from rl_guards.config import GuardsConfig
from rl_guards.core.behaviour import BehaviourStats
from rl_guards.core.metric_keys import decode_task, encode_task, parse_task_metric_key, task_metric_key
from rl_guards.core.task_labels import TaskLabels
from rl_guards.core.task_stats import task_stats
from rl_guards.guards.base import GuardSession, run_hook
from rl_guards.guards.dead_groups import DeadGroupGuard
from rl_guards.guards.task_rewards import TaskRewardMonitor
from rl_guards.rollouts.drift_records import find_drift_dir, load_records
from rl_guards.rollouts.reader import RolloutStore, UnreadableDumpError
from rl_guards.rollouts.report import collect, write_report
from rl_guards.rollouts.store import METADATA_KEY, step_file_name

WRONG: dict[str, Any] = {
    "null": None,
    "negative": -1,
    "huge": 2**62,
    "string": "x",
    "inf": math.inf,
    "nan": math.nan,
    "list": [1],
    "dict": {"a": 1},
}
META_FIELDS = ("schema_version", "step", "rows", "reason", "checkpoint", "tasks", "reward_names", "repaired_rows")
LIST_COLUMNS = ("prompt_ids", "completion_ids", "think_anomalies")
DRIFT_FIELDS = (
    "step", "baseline", "source", "stats", "stats.arith", "stats.arith.length", "stats.arith.rewards",
    "stats.arith.reward_total", "probes", "probes.0", "probes.0.task", "probes.0.prompt", "probes.0.completion",
    "alarms", "alarms.0", "alarms.0.task", "train_reward",
)  # fmt: skip


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with dumps of steps 0 and 1 (each with its tokenizer) and drift records of steps 0 and 2."""
    run = tmp_path_factory.mktemp("good_run")
    h = Harness(str(run), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    h.batch(make_batch(1))
    drift = run / "rl_guards" / "rollouts" / "drift"
    drift.mkdir()
    for step, length in ((0, 12.0), (2, 30.0)):
        stats = {**BehaviourStats(completions=2, length=length).to_dict(), "rewards": {"arith_correct": 0.5}}
        stats["reward_total"] = 0.5
        record = {
            "step": step,
            "baseline": step == 0,
            "source": "train",
            "stats": {"arith": stats, "echo": BehaviourStats(completions=2).to_dict()},
            "probes": [
                {"index": 0, "task": "arith", "prompt": "What is 3+4?", "completion": f"<think>{step}</think>7"}
            ],
            "alarms": [{"task": "arith", "drifts": ["length 12 -> 30"]}] if step else [],
            "train_reward": {"arith": 0.5},
        }
        (drift / f"step_{step:06d}.json").write_text(json.dumps(record))
    return run


def _dump_variants() -> list[tuple[str, str, str]]:
    """(where, field, kind): a Parquet column's values, a list column's elements, a metadata field."""
    columns = [
        "schema_version", "step", "epoch", "mode", "row", "group", "task", "prompt_ids", "completion_text",
        "completion_ids", "prompt_tokens", "completion_tokens", "reward", "advantage", "truncated", "think_kind",
        "think_anomalies", "thinking", "columns", "reward/arith_correct",
    ]  # fmt: skip
    out = [("column", c, k) for c in columns for k in WRONG]
    out += [("element", c, k) for c in LIST_COLUMNS for k in WRONG]
    out += [("meta", f, k) for f in META_FIELDS for k in WRONG]
    return out


DUMP_VARIANTS = _dump_variants()
DRIFT_VARIANTS = [(f, k) for f in DRIFT_FIELDS for k in WRONG]


def _craft_dump(path: Path, where: str, name: str, kind: str) -> None:
    table = pq.read_table(str(path))
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    value = WRONG[kind]
    n = table.num_rows
    if where == "meta":
        meta[name] = value
    else:
        at = table.column_names.index(name)
        old = table.schema.field(at).type
        if where == "element":
            values = [[value, *(row or [])] for row in table.column(name).to_pylist()]
        else:
            values = [value] * n
        try:
            array = pa.array(values, type=old) if value is None else pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            array = pa.array([json.dumps(v) for v in values])  # no Arrow type holds it: a string column instead
        table = table.set_column(at, name, array)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    pq.write_table(table, str(path))


def _set(data: Any, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data[int(part)] if isinstance(data, list) else data[part]
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def _no_traceback(capsys: pytest.CaptureFixture[str], *calls: list[str]) -> list[tuple[int, str, str]]:
    results = []
    for argv in calls:
        code = cli(argv)  # a crash is an exception here: the test fails with it
        out = capsys.readouterr()
        assert code in (0, 1, 2), argv
        assert "Traceback" not in out.err, (argv, out.err[-2000:])
        results.append((code, out.out, out.err))
    return results


@pytest.mark.parametrize(("where", "name", "kind"), DUMP_VARIANTS, ids=[f"{w}-{n}-{k}" for w, n, k in DUMP_VARIANTS])
def test_a_crafted_dump_breaks_no_reader(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, name: str, kind: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    folder = run / "rl_guards" / "rollouts"
    _craft_dump(folder / step_file_name(0), where, name, kind)

    store = RolloutStore(run)
    steps = store.steps()
    unreadable = store.unreadable()
    assert 1 in steps  # the good dump is always read
    if 0 not in steps:  # skipped: named once, with the reason
        assert len(unreadable) == 1 and step_file_name(0) in unreadable[0]
    for step in steps:
        try:
            rows = store.load(step)
            store.rows(step, task="arith", min_reward=0.5, max_reward=2.0, anomaly="any", truncated=False, limit=3)
        except UnreadableDumpError as exc:  # a value page that cannot be read: one named error
            assert step_file_name(step) in str(exc)
            continue
        for row in rows:
            assert isinstance(row["task"], str) and isinstance(row["prompt"], str)
            assert isinstance(row["completion"], str) and isinstance(row["think_anomalies"], list)
            for value in (row.get("reward"), row.get("advantage"), *row["rewards"].values()):
                assert value is None or (isinstance(value, float) and math.isfinite(value))

    (listed, *_) = _no_traceback(
        capsys,
        ["rollouts", str(run), "list"],
        ["rollouts", str(run), "show", "--step", "0", "--min-reward", "0", "--anomaly", "any"],
        ["rollouts", str(run), "show", "--step", "1"],
        ["rollouts", str(run), "compare", "--steps", "0", "1"],
        ["report", str(run), "-o", str(tmp_path / "r.html")],
    )
    assert listed[0] == 0 and listed[2].count(step_file_name(0)) == (0 if 0 in steps else 1)
    assert (tmp_path / "r.html").is_file()


@pytest.mark.parametrize(("name", "kind"), DRIFT_VARIANTS, ids=[f"{n}-{k}" for n, k in DRIFT_VARIANTS])
def test_a_crafted_drift_record_breaks_no_reader(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, kind: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    path = run / "rl_guards" / "rollouts" / "drift" / "step_000002.json"
    record = json.loads(path.read_text())
    _set(record, name, WRONG[kind])
    path.write_text(json.dumps(record))  # Infinity / NaN as Python's json writes them

    records, bad = load_records(find_drift_dir(run))
    assert records[0]["step"] == 0 and len(records) + len(bad) == 2  # the good record is always read
    assert bad in ([], ["step_000002.json"])
    (drift, report) = _no_traceback(
        capsys,
        ["drift", str(run)],
        ["drift", str(run), "--task", "arith"],
        ["report", str(run), "-o", str(tmp_path / "r.html")],
    )[0::2]
    assert drift[0] == 0 and drift[2].count("step_000002.json") == len(bad)
    assert report[0] == 0


def test_the_crafted_suite_size() -> None:
    # 20 columns + 3 list columns' elements + 8 metadata fields, and 17 drift record fields; 8 wrong types each
    assert len(DUMP_VARIANTS) == (20 + 3 + 8) * 8 == 248
    assert len(DRIFT_VARIANTS) == 17 * 8 == 136


def test_a_newer_schema_dump_is_named_and_skipped(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    folder = run / "rl_guards" / "rollouts"
    table = pq.read_table(str(folder / step_file_name(1)))
    version = table.column_names.index("schema_version")
    table = table.set_column(version, "schema_version", pa.array([99] * table.num_rows, pa.int16()))
    pq.write_table(table, str(folder / step_file_name(1)))  # the column says 99, the metadata does not say
    table = pq.read_table(str(folder / step_file_name(0)))
    meta = {**json.loads(table.schema.metadata[METADATA_KEY]), "schema_version": 99}
    pq.write_table(
        table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), str(folder / "step_000000.parquet")
    )
    store = RolloutStore(run)
    assert store.steps() == [1] and "upgrade rl_guards" in store.unreadable()[0]
    with pytest.raises(UnreadableDumpError, match="schema version 99"):  # 437f4ff: a bare ValueError
        store.load(1)
    [(code, _, err)] = _no_traceback(capsys, ["rollouts", str(run), "show", "--step", "1"])
    assert code == 1 and "Upgrade rl_guards" in err


# ----- non-finite rewards -----------------------------------------------------------------------------------
def test_inf_rewards_are_counted_never_logged_as_huge_numbers(tmp_path: Path) -> None:
    scores = [math.inf, 0.0, -math.inf, 1.0, 1.0, 0.0]  # rows 0-1, 4-5 are arith; 2-3 echo
    batch = make_batch(0, scores=scores)
    stats = task_stats(batch)
    assert stats["arith"].reward_mean == pytest.approx(1 / 3)  # 437f4ff: 4.5e307 (inf became 1.8e308)
    assert stats["arith"].nonfinite_rows == 1 and stats["arith"].scored_rows == 4
    assert stats["echo"].reward_mean == pytest.approx(1.0) and stats["echo"].nonfinite_rows == 1
    assert stats["arith"].func_values["arith_correct"] == [0.0, 1.0, 0.0]
    totals = batch.weighted_totals
    assert math.isinf(totals[0]) and totals[0] > 0 and math.isinf(totals[2]) and totals[2] < 0

    session = GuardSession()
    guard = TaskRewardMonitor(GuardsConfig())
    run_hook(guard, "on_batch", session, 0, batch)
    logged = {k: v for k, v in session.metrics.items() if k.startswith("rl_guards_task/arith/")}
    assert logged[task_metric_key("arith", "nonfinite_rewards")] == [1.0]
    assert all(math.isfinite(v) and abs(v) < 1e300 for vs in logged.values() for v in vs), logged

    # The run's report: a dump with inf rewards and a log whose curve was 4.5e307 (437f4ff: no page was written)
    h = Harness(str(tmp_path), every_steps=1)
    h.begin(0)
    h.batch(batch)
    history = [
        {"step": 1, "reward": 4.5e307, "rl_guards_task/arith/reward_mean": 4.5e307},
        {"step": 2, "reward": 0.5, "rl_guards_task/arith/reward_mean": 0.5},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    data = collect(tmp_path)
    assert data.skipped == {"reward_mean": 2}  # beyond float32: it was inf in TRL's math
    assert "2 non-finite value(s)" in write_report(tmp_path).read_text()
    assert cli(["report", str(tmp_path)]) == 0


# ----- a task name with a lone surrogate ------------------------------------------------------------------
def test_a_lone_surrogate_task_name_costs_nothing_at_a_checkpoint() -> None:
    task = "arith\ud800"
    assert decode_task(encode_task(task)) == task  # 437f4ff: UnicodeEncodeError
    key = task_metric_key(task, "reward_mean")
    assert key.isascii() and parse_task_metric_key(key) == (task, "reward_mean")
    groups = [(task, "What is 3+4?", ["7", "8"]), ("echo", "Repeat the word: apple", ["apple", "pear"])]
    batch = make_batch(0, groups)
    session = GuardSession()
    config = GuardsConfig()
    guards = [TaskRewardMonitor(config), DeadGroupGuard(config)]
    for guard in guards:
        run_hook(guard, "on_batch", session, 0, batch)
    assert not [f for f in session.findings if f.kind == "internal_error"]
    labels = TaskLabels(8)
    labels.labels([task, "echo"])
    saved = json.loads(json.dumps({"labels": labels.state_dict(), **{g.name: g.state_dict() for g in guards}}))
    restored = DeadGroupGuard(config)
    restored.load_state_dict(saved["dead_groups"])  # the checkpoint round trip (437f4ff: crashed at the save)
    assert restored.state_dict() == guards[1].state_dict()
    again = TaskLabels(8)
    again.load_state_dict(saved["labels"])
    assert again.labels([task]) == labels.labels([task])


def _any_length(completions: list[Any], **kwargs: Any) -> list[float]:
    return [float(len(str(c)) % 2) for c in completions]


@pytest.mark.slow
def test_a_lone_surrogate_task_from_an_iterable_dataset_trains_through_a_checkpoint(tmp_path: Path) -> None:
    import datasets
    from trl import GRPOTrainer

    import rl_guards
    from rl_guards.testing import make_dataset, tiny_grpo_config, tiny_setup

    rows = [dict(r) for r in make_dataset(thinking=True)]
    for row in rows:
        row["task"] = row["task"] + ("\ud800" if row["task"] == "echo" else "")
    dataset = datasets.IterableDataset.from_generator(lambda: iter(rows))  # Arrow never sees the names
    tiny = tiny_setup()
    out = tmp_path / "run"
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.tokenizer,
        reward_funcs=[_any_length],
        args=tiny_grpo_config(out, max_steps=2, save_strategy="steps", save_steps=2),
        train_dataset=dataset,
    )
    run = rl_guards.install(trainer)
    trainer.train()  # 437f4ff: UnicodeEncodeError in quote() at the first checkpoint
    assert not [f.message for f in run.session.findings if f.kind == "internal_error"]  # 437f4ff: guards failed inside
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    labels = state["stateful_callbacks"]["GuardRunState"]["attributes"]["task_labels"]["kept"]
    assert [decode_task(t) for t in labels] == ["arith", "echo\ud800"]
    logged = {parse_task_metric_key(k) for e in state["log_history"] for k in e if parse_task_metric_key(k)}
    assert ("echo\ud800", "reward_mean") in logged


# ----- issue 41 item 3: one non-finite reward never costs the drift records --------------------------------
def _probe_with_an_inf_reward(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Two completions per probe prompt; the first completion's score is inf (a reward that divides by zero)."""
    n = 2 * len(rows)
    rewards: list[list[float | None]] = [[math.inf]] + [[float(i % 2)] for i in range(1, n)]
    return {"group_size": 2, "completion_ids": [[5, 6, 7, 8]] * n, "terminated": [True] * n, "rewards": rewards,
            "reward_names": ["arith_correct"], "reward_weights": [1.0]}  # fmt: skip


def test_an_inf_reward_keeps_the_baseline_and_every_checkpoint_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rl_guards.guards.base import RunContext
    from rl_guards.guards.drift import DriftGuard
    from rl_guards.testing import make_dataset

    guard = DriftGuard(GuardsConfig.from_dict({"drift": {"mode": "warn", "prompts_per_task": 2}}))
    dataset = make_dataset(n_per_task=4)
    guard.setup(RunContext(output_dir=str(tmp_path), train_dataset=dataset, probe_generate=_probe_with_an_inf_reward,
                           decode=lambda ids: "7" * len(ids)))  # fmt: skip
    session = GuardSession()
    run_hook(guard, "on_train_begin", session, 0)
    for step in (1, 2, 3, 4):  # train batches with an inf reward: the training reward windows stay finite
        run_hook(guard, "on_batch", session, step, make_batch(step, scores=[math.inf, 0.0, 1.0, 0.0, 1.0, 0.0]))
    run_hook(guard, "before_save", session, 4, str(tmp_path / "checkpoint-4"))
    assert not [f for f in session.findings if f.kind == "internal_error"]

    folder = find_drift_dir(tmp_path)
    for path in folder.glob("step_*.json"):
        assert "Infinity" not in path.read_text() and "NaN" not in path.read_text()  # e1b9f62: Infinity
    records, bad = load_records(folder)
    assert bad == [] and [r["step"] for r in records] == [0, 4]  # e1b9f62: both records skipped as unreadable
    arith = records[0]["stats"]["arith"]
    assert arith["nonfinite_rewards"] == 1 and arith["rewards"] == {"arith_correct": pytest.approx(2 / 3)}
    assert records[1]["train_reward"]["arith"] == [pytest.approx(1 / 3), pytest.approx(1 / 3)]  # e1b9f62: inf

    assert cli(["drift", str(tmp_path)]) == 0  # e1b9f62: exit 2, "no readable record"
    out = capsys.readouterr()
    rows = [w[0] for w in (line.split() for line in out.out.splitlines()) if w and (w[0] == "step" or w[0].isdigit())]
    assert rows == ["step", "0", "4", "step", "0", "4"]  # both tasks: the baseline and the checkpoint
    assert "completions with an infinite reward, left out of the reward means: arith 1" in out.err
    assert cli(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Behaviour drift on the probe prompts" in page and "infinite reward" in page  # e1b9f62: no drift section


def test_a_record_with_one_bad_statistic_keeps_the_rest(good_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    path = run / "rl_guards" / "rollouts" / "drift" / "step_000002.json"
    record = json.loads(path.read_text())
    record["stats"]["arith"]["length"] = math.inf
    record["stats"]["arith"]["rewards"]["arith_correct"] = "x"
    path.write_text(json.dumps(record))
    records, bad = load_records(find_drift_dir(run))
    assert bad == [] and len(records) == 2  # e1b9f62: the whole record was skipped
    last = records[1]
    assert last["unreadable_fields"] == ["stats.arith.length", "stats.arith.rewards.arith_correct"]
    assert "length" not in last["stats"]["arith"] and last["stats"]["arith"]["completions"] == 2
    assert last["probes"][0]["completion"] == "<think>2</think>7"
    from rl_guards.rollouts.drift_records import changes

    assert [d.stat for _, _, drifts in changes(records) for d in drifts] == []  # a left-out length is no change
