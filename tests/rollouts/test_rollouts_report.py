"""The HTML report: data it collects, escaping, self-containment, and a real render in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from _rollouts_data import Harness, make_batch

import rl_guards.cli.main as cli_main
from rl_guards.rollouts.report import collect, find_trainer_state, page_colours, svg_line_chart

EVIL = "<script>alert('x')</script></pre><img src=http://example.com/a.png>"


def _groups(step: int) -> list[tuple[str, str, list[str]]]:
    # The same two prompts at every step; the arith answers get better with the step.
    right = "7" if step >= 3 else "6"
    return [
        ("arith", "What is 3+4?", [f"<think>\nadd\n</think>\n\n{right}", "<think>\nhmm\n</think>\n\n8"]),
        ("echo", "Repeat the word: apple", ["apple", f"no {EVIL}"]),
    ]


def _history(steps: range) -> list[dict]:
    return [
        {
            "step": s,
            "reward": 0.1 * s,
            "rl_guards_task/arith/reward_mean": 0.1 * s,
            "rl_guards_task/echo/reward_mean": 0.5,
            "rl_guards_task/arith/dead_share": 0.5 - 0.1 * s,
            "rl_guards_task/arith/truncated_rate": 0.0,
        }
        for s in steps
    ]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    h = Harness(str(tmp_path), every_steps=3)
    h.begin(0)
    for step in range(5):
        h.batch(make_batch(step, _groups(step), scores=[float(step >= 3), 0.0, 1.0, 0.0]))
        if step + 1 in (2, 4):
            h.save(step + 1)
    for ckpt, steps in ((2, range(1, 3)), (4, range(1, 5))):
        folder = tmp_path / f"checkpoint-{ckpt}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": ckpt, "log_history": _history(steps)}))
    return tmp_path


def test_collect_reads_dumps_and_newest_trainer_state(run_dir: Path) -> None:
    assert find_trainer_state(run_dir) == run_dir / "checkpoint-4" / "trainer_state.json"
    data = collect(run_dir)
    assert [e["step"] for e in data.index] == [0, 1, 3]
    assert [title for title, _ in data.columns] == ["checkpoint-2 (step 1)", "checkpoint-4 (step 3)"]
    assert data.log_curves["reward_mean"]["arith"] == [(1.0, 0.1), (2.0, 0.2), (3.0, 0.30000000000000004), (4.0, 0.4)]
    assert data.log_curves["reward_mean"]["(all, TRL)"][-1] == (4.0, 0.4)
    assert data.log_curves["dead_share"]["arith"][0] == (1.0, 0.4)
    # From the dumps: arith reward rises from 0 to 0.5 once step 3 answers 7; echo groups are never dead.
    assert data.dump_curves["reward_mean"]["arith"] == [(0.0, 0.0), (1.0, 0.0), (3.0, 0.5)]
    assert data.dump_curves["dead_share"]["arith"] == [(0.0, 1.0), (1.0, 1.0), (3.0, 0.0)]
    assert data.dump_curves["dead_share"]["echo"] == [(0.0, 0.0), (1.0, 0.0), (3.0, 0.0)]


def test_svg_chart_maps_points_inside_the_plot() -> None:
    svg = svg_line_chart({"a": [(0, 0.0), (10, 1.0)], "b": [(5, 0.5)]}, "t & <u>")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "t &amp; &lt;u&gt;" in svg
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 3
    points = sorted((float(x), float(y)) for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg))
    # Plot area x 52..370, y 28..224: step 0 -> left edge, 10 -> right edge; value 0 -> bottom, 1 -> top.
    assert points == [(52.0, 224.0), (211.0, 126.0), (370.0, 28.0)]
    assert "no data" in svg_line_chart({}, "empty")


def _run_cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", list(dict.fromkeys([*cli_main.COMMAND_MODULES, "report"])))
    return cli_main.main(list(argv))


def test_report_is_self_contained_and_escaped(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_dir / "r.html"
    assert _run_cli(monkeypatch, "report", str(run_dir), "-o", str(out)) == 0
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page  # escaped by the template (jinja2 autoescape)
    # No fetches: the only URLs are the SVG namespace and the escaped text of the completion.
    assert set(re.findall(r"https?://[^\s\"'<>&]+", page)) <= {"http://www.w3.org/2000/svg", "http://example.com/a.png"}
    assert not re.search(r"<[a-zA-Z][^>]*\s(src|href)\s*=", page)  # no tag loads anything
    assert page.count("<svg") == 7  # 3 log charts (no anomaly key in the log) + 4 dump charts
    assert "checkpoint-2 (step 1)" in page and "checkpoint-4 (step 3)" in page
    assert 'class="tok">&lt;|im_end|&gt;' in page  # special tokens highlighted
    # The shared prompt is one row, its completions side by side across the checkpoints.
    row = page[page.index("What is 3+4?") : page.index("</tr>", page.index("What is 3+4?"))]
    assert row.count("<td>") == 2 and "6" in row and "7" in row


def test_default_output_path(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run_cli(monkeypatch, "report", str(run_dir)) == 0
    assert (run_dir / "rl_guards_report.html").is_file()


def test_a_folder_that_is_no_run_exits_2_and_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38 #5: an empty folder (or a typo'd one) used to give exit 0 and a page saying the guards found nothing."""
    (tmp_path / "notes.txt").write_text("not a run")
    assert _run_cli(monkeypatch, "report", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "is not a run folder" in err and "no trainer_state.json" in err and "findings.jsonl" in err
    assert not (tmp_path / "rl_guards_report.html").exists()


def test_report_with_only_a_trainer_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": _history(range(1, 3))}))
    assert _run_cli(monkeypatch, "report", str(tmp_path)) == 0
    page = (tmp_path / "rl_guards_report.html").read_text()
    assert "no rollout dumps" in page and "trainer_state.json" in page


# ----- a real render -----------------------------------------------------------------------------------------
def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw pixels) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    import numpy as np

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, bpp = 8, [], 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = np.zeros(stride, dtype=np.int64)
    out = bytearray()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int64)
        if kind == 1:  # Sub: running sum per channel
            cur = np.cumsum(line.reshape(width, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            cur = (line + prev) % 256
        elif kind in (3, 4):  # Average, Paeth: sequential in x
            cur_l = [0] * stride
            p = prev.tolist()
            lv = line.tolist()
            for i in range(stride):
                a = cur_l[i - bpp] if i >= bpp else 0
                b = p[i]
                if kind == 3:
                    cur_l[i] = (lv[i] + (a + b) // 2) & 255
                else:
                    c = p[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    cur_l[i] = (lv[i] + pred) & 255
            cur = np.array(cur_l, dtype=np.int64)
        else:
            cur = line
        out += cur.astype(np.uint8).tobytes()
        prev = cur
    return width, height, bpp, bytes(out)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    from rl_guards.rollouts.report import write_report

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    page = write_report(run_dir, tmp_path / "report.html")
    png = tmp_path / "shot.png"
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={png}",
        "--window-size=1200,1600",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    width, height, bpp, pixels = decode_png(png.read_bytes())
    assert (width, height) == (1200, 1600)
    rgb = np.frombuffer(pixels, dtype=np.uint8).reshape(height, width, bpp)[:, :, :3]
    non_background = np.any(rgb < 240, axis=2).mean()
    colours = len(np.unique(rgb.reshape(-1, 3), axis=0))
    assert non_background > 0.02, f"page looks blank: {non_background:.1%} non-white pixels"
    assert colours > 50, f"only {colours} distinct colours"
    # The colour of task arith (one colour per task on every chart) is on screen: the charts were drawn.
    colour = page_colours(collect(run_dir))["arith"]
    first = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    near = np.all(np.abs(rgb.astype(int) - np.array(first)) <= 12, axis=2).sum()
    assert near > 200, f"chart colour {colour} found on {near} pixels only"


def test_axis_ticks_cover_the_data_range() -> None:
    from rl_guards.rollouts.report import _nice_ticks

    for lo, hi in [(-0.37, 0.62), (0.0, 0.05), (-1.3, 4.01), (3.0, 3.0), (0.1, 0.52)]:
        ticks = _nice_ticks(lo, hi)
        assert ticks[0] <= lo and ticks[-1] >= hi, (lo, hi, ticks)
        assert ticks == sorted(ticks) and len(ticks) <= 8


# ----- issue 38 #5 -----------------------------------------------------------------------------------------------
def _drift_run(tmp_path: Path, alarm: bool) -> Path:
    """Two drift records (the baseline and checkpoint-6): task arith's completions 3x as long at step 6."""
    from rl_guards.core.behaviour import BehaviourStats

    folder = tmp_path / "rl_guards" / "rollouts" / "drift"
    folder.mkdir(parents=True)
    for step, length in ((0, 10.0), (6, 30.0)):
        stats = BehaviourStats(completions=4, length=length, terminated=1.0, reward_total=0.1 * step).to_dict()
        record = {
            "step": step, "source": "train", "stats": {"arith": stats},
            "probes": [{"task": "arith", "prompt": "What is 3+4?", "completion": "7" * int(length)}],
            "alarms": [{"task": "arith", "stat": "length"}] if alarm and step else [],
        }  # fmt: skip
        (folder / f"step_{step:06d}.json").write_text(json.dumps(record))
    return tmp_path


@pytest.mark.parametrize("alarm", [True, False])
def test_the_drift_section_has_the_commands_alarm_column_and_verdict(
    tmp_path: Path, alarm: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """e1b9f62: the report's drift table had no alarm column and no verdict (``rl-guards drift`` printed both)."""
    from rl_guards.rollouts.report import render_html

    run = _drift_run(tmp_path, alarm)
    page = render_html(collect(run))
    section = page[page.index("Behaviour drift") : page.index("Curves from the training log")]
    assert "<th>alarm</th>" in section
    verdict = section[section.index('id="drift-verdict"') :].split("</div>")[0]
    assert _run_cli(monkeypatch, "drift", str(run)) == 0
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("verdict: "))
    level, sentence = command[len("verdict: ") :].split(": ", 1)
    assert f'class="word-{level}">{level}</span>: {sentence}' in verdict  # the same verdict, word and sentence
    assert level == ("warning" if alarm else "ok")
    rows = section.split("<h3>task arith</h3>")[1].split("</table>")[0]
    assert rows.count("<tr") == 3 and (rows.count('class="word-warning"') == (1 if alarm else 0))


def test_a_tasks_colour_is_the_same_in_every_report() -> None:
    """e1b9f62: colours went by name order, so a task's colour changed when another task came or went."""
    from rl_guards.rollouts.report import task_colours

    alone = task_colours(["math"])["math"]
    assert task_colours(["code", "math"])["math"] == alone == task_colours(["math", "zzz", "aaa"])["math"]
    many = task_colours([f"task{i}" for i in range(15)])
    assert len(set(many.values())) == 15  # within a page, never two tasks in one colour


def test_the_report_is_a_jinja2_template_with_autoescape() -> None:
    from rl_guards.rollouts.html import environment

    env = environment()
    assert env.autoescape is True and "report.html.j2" in env.list_templates()
