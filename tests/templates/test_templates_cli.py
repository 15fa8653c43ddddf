"""``rl-guards check-template``: rendered prompts with whitespace visible, verdict, exit code."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rl_guards.cli import check_template


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rl-guards")
    check_template.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["check-template", *argv])
    return int(args.func(args))


def test_clean_template_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["qwen3"]) == 0
    out = capsys.readouterr().out
    assert "'<|im_start|>user\\nWhat is 2 + 2?<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'" in out
    assert "verdict: ok" in out


def test_prefill_on_prefilling_template_exits_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["qwen3_5_think", "--prefill", "<think>\\n"]) == 1
    out = capsys.readouterr().out
    assert "your prompt" in out and "verdict: blocking" in out
    assert "the template already adds it" in out


def test_string_prefill_and_ignored_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["deepseek_r1_distill", "--string-prefill", "<think>\\n"]) == 1
    assert "double_open" in capsys.readouterr().out
    assert _run(["deepseek_r1_distill", "--enable-thinking", "false"]) == 1
    assert "thinking_flag_ignored" in capsys.readouterr().out
    assert _run(["deepseek_r1_distill"]) == 0


def test_jinja_file_and_tokenizer_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rl_guards.testing import build_tokenizer, chat_template_text

    path = tmp_path / "t.jinja"
    path.write_text(chat_template_text("qwen3_5_think"), encoding="utf-8")
    assert _run([str(path), "--string-prefill", "<think>\\n"]) == 1
    build_tokenizer(chat_template="qwen3").save_pretrained(tmp_path / "tok")
    assert _run([str(tmp_path / "tok"), "--prompt", "hello"]) == 0
    assert "hello" in capsys.readouterr().out


def test_unknown_source_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["no_such_template_xyz"]) == 2
    assert "cannot load" in capsys.readouterr().out
