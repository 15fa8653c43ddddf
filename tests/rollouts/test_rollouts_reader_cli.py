"""RolloutStore filters, the terminal views, and ``rl-guards rollouts list | show | compare``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _rollouts_data import Harness, make_batch

import rl_guards.cli.main as cli_main
from rl_guards.console import side_by_side
from rl_guards.rollouts.reader import RolloutStore, filter_rows, find_rollouts_dir
from rl_guards.rollouts.render import visible_whitespace


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Dumps at steps 0 (periodic) and 3 (checkpoint-4); step 3's completions carry a marker."""
    h = Harness(str(tmp_path), every_steps=10)
    h.begin(0)
    h.batch(make_batch(0))
    h.batch(make_batch(3, marker=" later"))
    h.save(4)
    return tmp_path


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Run ``rl-guards`` through the real entry point with this area's subcommands registered."""
    names = list(dict.fromkeys([*cli_main.COMMAND_MODULES, "rollouts", "report"]))
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", names)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli_main.main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_store_finds_the_folder_and_lists_steps(run_dir: Path) -> None:
    folder = run_dir / "rl_guards" / "rollouts"
    assert find_rollouts_dir(run_dir) == folder and find_rollouts_dir(folder) == folder
    store = RolloutStore(run_dir)
    assert store.steps() == [0, 3]
    assert store.checkpoint_steps() == {4: 3}
    assert [e["reason"] for e in store.index()] == ["periodic", "checkpoint"]
    assert store.table(3).num_rows == 6
    with pytest.raises(FileNotFoundError, match=r"dumped steps: \[0, 3\]"):
        store.table(7)


def test_missing_dumps_name_the_places_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="rl_guards/rollouts"):
        RolloutStore(tmp_path)


def test_load_gathers_rewards_and_columns(run_dir: Path) -> None:
    row = RolloutStore(run_dir).load(0)[2]
    assert row["rewards"] == {"arith_correct": None, "echo_match": 1.0}
    assert row["columns"] == {"answer": "2"}


@pytest.mark.parametrize(
    ("filters", "rows"),
    [
        ({}, [0, 1, 2, 3, 4, 5]),
        ({"task": "echo"}, [2, 3]),
        ({"task": "nope"}, []),
        ({"min_reward": 0.5}, [0, 2, 4]),
        ({"max_reward": 0.5}, [1, 3, 5]),
        ({"min_reward": 0.5, "task": "arith"}, [0, 4]),
        ({"anomaly": "unclosed_open"}, [3]),
        ({"anomaly": "any"}, [3]),
        ({"anomaly": "stray_close"}, []),
        ({"truncated": True}, [3]),
        ({"truncated": False}, [0, 1, 2, 4, 5]),
        ({"limit": 2}, [0, 1]),
    ],
)
def test_filters(run_dir: Path, filters: dict, rows: list[int]) -> None:
    got = RolloutStore(run_dir).rows(0, **filters)
    assert [r["row"] for r in got] == rows


def test_unscored_rows_fail_reward_bounds() -> None:
    rows = [{"row": 0, "reward": None}, {"row": 1, "reward": float("nan")}, {"row": 2, "reward": 0.0}]
    assert [r["row"] for r in filter_rows(rows, min_reward=-1.0)] == [2]
    assert [r["row"] for r in filter_rows(rows, max_reward=1.0)] == [2]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain words", "plain words"),
        ("a\nb", "a↵\nb"),
        (" lead", "·lead"),
        ("trail  \nnext", "trail··↵\nnext"),
        ("tab\there", "tab⇥here"),
        ("cr\r\n", "cr␍↵\n"),
        ("   ", "···"),
        ("two  spaces", "two··spaces"),
        ("a \tb", "a·⇥b"),
        ("nb\u00a0sp zw\u200bsp", "nb⟨NBSP⟩sp zw⟨ZWSP⟩sp"),
        ("<think>\n</think><|im_end|>", "<think>↵\n</think><|im_end|>"),
    ],
)
def test_visible_whitespace(text: str, shown: str) -> None:
    assert visible_whitespace(text) == shown


def test_side_by_side_wraps_both_columns_at_word_boundaries() -> None:
    """Issue 38 #4: columns were cut every N characters, mid-word; now words wrap whole (a word longer than its
    column is folded) and line breaks are kept."""
    out = side_by_side("alpha beta gamma delta", "xy\nz", width=27).split("\n")
    left = [line.split("│")[0].strip() for line in out]
    right = [line.split("│")[1].strip() for line in out]
    assert [w for line in left for w in line.split()] == ["alpha", "beta", "gamma", "delta"]  # no word cut
    assert len(left) > 1 and right[:2] == ["xy", "z"]
    folded = side_by_side("a" * 30, "b", width=27).split("\n")
    assert "".join(line.split("│")[0].strip() for line in folded) == "a" * 30


def test_cli_compare_never_cuts_a_word(tmp_path: Path, cli) -> None:
    """Issue 38 #4: ``rollouts compare`` at a narrow width wraps completions at word boundaries (e1b9f62 cut the
    column every N characters, so long words straddling a cut came out in two pieces)."""
    words = ["chrysanthemum", "bookkeeping", "onomatopoeia"]
    text = " ".join(words * 3)
    h = Harness(str(tmp_path), every_steps=1)
    h.batch(make_batch(0, [("echo", "Repeat the word: fox", [text, text])]))
    h.batch(make_batch(1, [("echo", "Repeat the word: fox", [text, text])]))
    code, out, _ = cli("rollouts", str(tmp_path), "compare", "--steps", "0", "1", "--per-prompt", "1", "--width", "60")
    assert code == 0
    cells = [part for line in out.split("\n") if "│" in line for part in line.split("│")]
    whole = sum(len(re.findall(r"\b(?:" + "|".join(words) + r")\b", cell)) for cell in cells)
    assert whole == 2 * len(words) * 3, out  # every word of both columns whole on some line


def test_cli_list(run_dir: Path, cli) -> None:
    code, out, _ = cli("rollouts", str(run_dir), "list")
    assert code == 0
    lines = out.strip().split("\n")
    assert "2 dumps" in lines[0]
    assert lines[2].split() == ["0", "6", "periodic", "arith,", "echo"]
    assert lines[3].split() == ["3", "6", "checkpoint", "4", "arith,", "echo"]


def test_cli_show_filters_and_makes_whitespace_visible(run_dir: Path, cli) -> None:
    code, out, _ = cli("rollouts", str(run_dir), "show", "--step", "0", "--task", "arith", "--max-reward", "0.5")
    assert code == 0
    assert "2 of 6 rollouts match" in out
    headers = [line for line in out.split("\n") if line.startswith("────────")]
    assert len(headers) == 2
    assert (
        "step 0 | arith | group 0 row 1 | reward 0.000 (arith_correct=0.000, echo_match=—) | adv -0.500" in headers[0]
    )
    assert "<think>↵" in out and "<|im_end|>" in out  # special tokens and line breaks visible
    assert "·4·⇥<|im_end|>" in out  # leading space, trailing space and tab of " 4 \t"
    assert "assistant↵" in out  # prompt tail

    code, out, _ = cli("rollouts", str(run_dir), "show", "--step", "0", "--truncated")
    assert "1 of 6 rollouts match" in out and "TRUNCATED" in out and "anomalies=unclosed_open" in out
    assert "[cut at max_completion_length" in out


def test_cli_show_missing_step_is_a_clear_error(run_dir: Path, cli) -> None:
    code, _, err = cli("rollouts", str(run_dir), "show", "--step", "99")
    assert code == 2 and "dumped steps: [0, 3]" in err


def test_cli_compare_matches_prompts(run_dir: Path, cli) -> None:
    code, out, _ = cli("rollouts", str(run_dir), "compare", "--steps", "0", "3", "--task", "echo", "--width", "120")
    assert code == 0
    assert "1 prompts in both dumps" in out
    assert "Repeat the word: apple" in out
    pairs = [line for line in out.split("\n") if "│" in line and "apple" in line]
    # Left: step 0's completion; right: the same prompt's completion at step 3.
    assert any(
        line.split("│")[0].strip() == "apple<|im_end|>" and "apple later<|im_end|>" in line.split("│")[1]
        for line in pairs
    )
    assert "step 0: 2 rollouts, mean reward 0.500" in out and "step 3: 2 rollouts, mean reward 0.500" in out


def test_cli_compare_without_shared_prompts(tmp_path: Path, cli) -> None:
    h = Harness(str(tmp_path), every_steps=1)
    h.batch(make_batch(0, [("arith", "What is 1+1?", ["2", "3"])]))
    h.batch(make_batch(1, [("arith", "What is 5+5?", ["10", "11"])]))
    code, out, _ = cli("rollouts", str(tmp_path), "compare", "--steps", "0", "1")
    assert code == 0 and "0 prompts in both dumps" in out and "No rendered prompt appears" in out
