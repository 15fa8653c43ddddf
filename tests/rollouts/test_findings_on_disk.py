"""Issue 23 #3: findings live on disk next to the dumps as they happen (``findings.jsonl``), a stopped run keeps them
and its stop reason, and the HTML report shows them first (stop, findings, drift), one colour per task, in Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import rl_guards
from rl_guards.config import GuardConfig
from rl_guards.engine.findings_file import FindingsFile
from rl_guards.errors import GuardError
from rl_guards.guards.base import GuardSession
from rl_guards.rollouts.findings import FINDINGS_FILE, find_findings_file, load_findings
from rl_guards.testing.logs import shows


def _lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / FINDINGS_FILE).read_text().splitlines()]


def test_findings_are_appended_as_they_happen_and_read_back_per_kind(tmp_path: Path) -> None:
    folder = tmp_path / "rl_guards" / "rollouts"
    session = GuardSession()
    file = FindingsFile(session, lambda: folder)
    file.begin(0)
    assert not folder.exists()  # a healthy run writes nothing
    warn = session.reporter("think_tags", GuardConfig(mode="warn"), 3)
    with shows():
        warn.violation("stray_close", "2 stray </think> at step 3")
    assert [(r["type"], r.get("kind"), r.get("count")) for r in _lines(folder)] == [
        ("begin", None, None),
        ("finding", "stray_close", 1),
    ]  # fmt: skip  (the first finding once: the begin record carries only the counts restored before the start)
    for step in range(4, 40):  # the same kind every step: a few lines (powers of two), not one per step
        session.reporter("think_tags", GuardConfig(mode="warn"), step).violation("stray_close", f"again at {step}")
    assert len(_lines(folder)) == 2 + 5  # counts 2, 4, 8, 16, 32
    file.snapshot()  # the end of training: exact counts
    log = load_findings(find_findings_file(tmp_path))
    assert log.stop is None and log.bad_lines == 0
    [found] = log.findings
    assert (found["guard"], found["kind"], found["severity"], found["first_step"], found["count"]) == (
        "think_tags", "stray_close", "warning", 3, 37
    )  # fmt: skip
    assert found["message"] == "2 stray </think> at step 3"  # the first message, kept by count updates

    raising = session.reporter("masking", GuardConfig(mode="raise"), 41)
    with pytest.raises(GuardError):
        raising.violation("post_eos", "loss on 3 tokens after EOS")
    with open(folder / FINDINGS_FILE, "a") as handle:
        handle.write('{"type": "finding", "guard": "cut')  # a kill mid-line
    log = load_findings(find_findings_file(tmp_path))
    assert log.bad_lines == 1
    assert [f["kind"] for f in log.findings] == ["post_eos", "stray_close"]  # most severe first
    assert log.stop is not None and (log.stop["guard"], log.stop["step"]) == ("masking", 41)
    assert log.stop["message"] == "loss on 3 tokens after EOS"

    # A resumed run in the same folder: a begin record, then the restored counts; older lines no longer count.
    resumed = GuardSession()
    resumed.load_state_dict(session.state_dict())
    FindingsFile(resumed, lambda: folder).begin(20)
    log = load_findings(find_findings_file(tmp_path))
    assert log.stop is None and {f["kind"]: f["count"] for f in log.findings} == {"post_eos": 1, "stray_close": 37}


def test_a_stop_found_elsewhere_is_on_disk_once(tmp_path: Path) -> None:
    """A stop this process has no finding for (decided on another rank, or a guard that raised its own error) still
    gets its stop record; a stop that a raise-mode finding already recorded is not written twice."""
    folder = tmp_path / "rl_guards" / "rollouts"
    session = GuardSession()
    file = FindingsFile(session, lambda: folder)
    file.begin(0)
    file.stop(GuardError("[rl_guards/masking] post_eos\n(stopped on another rank; this rank stops with it)",
                         guard="masking", step=5), 5)  # fmt: skip
    log = load_findings(find_findings_file(tmp_path))
    assert log.stop is not None and (log.stop["guard"], log.stop["step"]) == ("masking", 5)
    assert "another rank" in log.stop["message"]
    from rl_guards.rollouts.report import collect, render_html

    assert "Stopped by masking at step 5" in render_html(collect(tmp_path))  # no kind known here: the guard alone

    other = tmp_path / "b" / "rl_guards" / "rollouts"
    session = GuardSession()
    file = FindingsFile(session, lambda: other)
    file.begin(0)
    with pytest.raises(GuardError) as raised:
        session.reporter("masking", GuardConfig(mode="raise"), 7).violation("post_eos", "loss after EOS")
    file.stop(raised.value, 7)
    assert [r["type"] for r in _lines(other)].count("stop") == 1


def test_a_findings_file_that_cannot_be_written_never_stops_the_run(tmp_path: Path, caplog: Any) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    session = GuardSession()
    FindingsFile(session, lambda: blocked / "rollouts")
    for step in range(3):
        session.reporter("truncation", GuardConfig(mode="log"), step).violation("truncated", "cut short")
    assert session.counts[("truncation", "truncated")] == 3
    assert sum("could not write the findings" in r.message for r in caplog.records) == 1


def test_two_stops_in_one_batch_name_one_finding_everywhere(tmp_path: Path) -> None:
    """Issue 38 #5: two tasks dead in one batch (raise mode): e1b9f62 wrote a stop record for each, so the report's
    stop box named the second task while the error that stopped the run named the first."""
    from rl_guards.errors import DeadGradientError
    from rl_guards.rollouts.report import collect, render_html

    folder = tmp_path / "rl_guards" / "rollouts"
    session = GuardSession()
    session.defer = True  # as the engine runs the guards: the stop is settled after every guard of the batch
    file = FindingsFile(session, lambda: folder)
    file.begin(0)
    report = session.reporter("dead_groups", GuardConfig(mode="raise"), 4)
    report.violation("dead_task", "task 'arith' contributed no gradient", DeadGradientError)
    report.violation("dead_task", "task 'echo' contributed no gradient", DeadGradientError)
    error = session.settle()
    assert isinstance(error, DeadGradientError) and "'arith'" in str(error)
    assert [r["type"] for r in _lines(folder)].count("stop") == 1
    log = load_findings(find_findings_file(tmp_path))
    assert log.stop is not None and log.stop["message"] == "task 'arith' contributed no gradient"
    page = render_html(collect(tmp_path))
    box = page[page.index('id="stop"') : page.index('id="findings"')]
    assert "arith" in box and "echo" not in box


def test_a_raise_mode_finding_is_said_once_by_its_error(tmp_path: Path) -> None:
    """Issue 38 #1: the finding that stops the run is said by the error only (e1b9f62: a Python warning, a log line
    and the error); a second blocking finding of the batch, which no error says, is said in full on the logger."""
    session = GuardSession()
    session.defer = True
    report = session.reporter("routing", GuardConfig(mode="raise"), 2)
    with shows(None) as said:
        report.violation("unscored_rows", "rows of task 'x' left unscored")
        report.violation("misrouted_score", "task 'y' scored by the wrong function")
        error = session.settle()
    assert error is not None and "unscored" in str(error)
    assert said.messages == ["[rl_guards/routing] blocking: task 'y' scored by the wrong function"]


STOP_STEP = 3  # TRL's step of the batch generated at global step 2


def _fails_from_step_3(completions: list[Any], trainer_state: Any = None, **kwargs: Any) -> list[float]:
    if trainer_state is not None and trainer_state.global_step >= STOP_STEP - 1:
        raise ValueError("planted reward failure")
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real GRPO run that a guard stops at step 3, with rollouts every step, drift probes and a checkpoint."""
    from trl import GRPOTrainer

    from rl_guards.testing import arith_correct, echo_match, make_dataset, tiny_grpo_config, tiny_setup

    out = tmp_path_factory.mktemp("stopped") / "run"
    tiny = tiny_setup()
    trainer = GRPOTrainer(
        model=tiny.model_dir,
        processing_class=tiny.tokenizer,
        reward_funcs=[arith_correct, echo_match, _fails_from_step_3],
        args=tiny_grpo_config(out, max_steps=5, save_strategy="steps", save_steps=2),
        train_dataset=make_dataset(),
    )
    config = {"reward_errors": {"mode": "raise"}, "rollouts": {"every_steps": 1, "wandb_rows_per_task": 0}}
    rl_guards.install(trainer, config)
    with pytest.raises(GuardError, match="planted reward failure"):
        trainer.train()
    return out


@pytest.mark.slow
def test_a_stopped_run_leaves_its_findings_and_stop_reason_next_to_the_dumps(stopped_run: Path) -> None:
    folder = stopped_run / "rl_guards" / "rollouts"
    assert find_findings_file(stopped_run) == folder / FINDINGS_FILE
    log = load_findings(folder / FINDINGS_FILE)
    assert log.stop is not None and log.stop["guard"] == "reward_errors" and log.stop["step"] == STOP_STEP
    assert "planted reward failure" in log.stop["message"]
    first = log.findings[0]
    assert (first["guard"], first["severity"], first["first_step"], first["count"]) == (
        "reward_errors", "blocking", STOP_STEP, 1
    )  # fmt: skip
    assert first["kind"] == log.stop["kind"]


@pytest.mark.slow
def test_the_report_shows_the_stop_and_findings_first_in_headless_chromium(stopped_run: Path, tmp_path: Path) -> None:
    import numpy as np
    from test_rollouts_report import decode_png

    from rl_guards.rollouts.report import collect, page_colours, render_html, write_report

    start = time.perf_counter()
    data = collect(stopped_run)
    page = render_html(data)
    print(f"report built in {time.perf_counter() - start:.2f} s ({len(page)} characters)")  # measured, not asserted
    stop_at, findings_at = page.index('id="stop"'), page.index('id="findings"')
    assert stop_at < findings_at < page.index("Behaviour drift") < page.index("Curves from the training log")
    assert f"Stopped by reward_errors/{data.findings.stop['kind']} at step {STOP_STEP}" in page
    assert "planted reward failure" in page[stop_at:findings_at]
    assert "the run stopped at step 3" in page or "trainer state: " + str(stopped_run) in page
    # One colour per task on every chart: the legend entry of a task has the same colour wherever it appears.
    legends: dict[str, set[str]] = {}
    for chart in page.split("<svg")[1:]:
        for colour, name in zip(
            [c.split('"')[0] for c in chart.split('width="12" height="12" fill="')[1:]],
            [t.split("<")[0] for t in chart.split('class="lg">')[1:]],
            strict=True,
        ):
            legends.setdefault(name, set()).add(colour)
    assert {"arith", "echo"} <= set(legends) and all(len(c) == 1 for c in legends.values()), legends

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    html_path = write_report(stopped_run, tmp_path / "report.html", data)
    png = tmp_path / "shot.png"
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1200,1600",
        html_path.resolve().as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    width, height, bpp, pixels = decode_png(png.read_bytes())
    rgb = np.frombuffer(pixels, dtype=np.uint8).reshape(height, width, bpp)[:, :, :3].astype(int)

    def rows_with(colour: str, tolerance: int = 6) -> np.ndarray:
        target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        return np.nonzero(np.all(np.abs(rgb - target) <= tolerance, axis=2).sum(axis=1) > 40)[0]

    stop_box = rows_with("#fde7ea")  # the stop banner's background
    error_row = rows_with("#f8c9cf")  # the findings table's error row
    chart = rows_with(page_colours(data)["arith"], 12)  # task arith's colour on the charts
    assert len(stop_box) > 20, "no stop banner on screen"
    assert len(error_row) > 10, "no error row of the findings table on screen"
    assert stop_box.min() < 300, f"the stop banner starts at y={stop_box.min()}: not first on the page"
    assert stop_box.max() < error_row.min(), "the findings table is not right below the stop banner"
    assert len(chart) and error_row.max() < chart.min(), "no chart, or a chart drawn above the findings"
