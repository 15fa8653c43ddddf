"""``rl-guards probe-lengths`` in the ``trl grpo`` workflow (issue 23 #9): it reads the run's YAML (model, dataset as
``trl grpo`` loads it, chat template kwargs, cap and sampling), takes ``--device`` / ``--dtype``, shows a progress bar
on stderr, and says in one line (exit 2) what it cannot load instead of a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_guards.cli.main import main
from rl_guards.testing import TinySetup, make_dataset

pytestmark = pytest.mark.slow  # every test here builds a real GRPOTrainer on the tiny model


def _json_folder(tmp_path: Path) -> Path:
    """A folder of data files, as ``trl grpo``'s ``dataset_name`` takes it (``load_dataset(folder)``)."""
    folder = tmp_path / "prompts"
    folder.mkdir()
    make_dataset(n_per_task=4).to_json(str(folder / "train.jsonl"))
    return folder


def _yaml(tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(fields), encoding="utf-8")
    return path


@pytest.mark.parametrize("section", ["guards", "rl_guards"])  # the two names rl-guards grpo takes the section under
def test_reads_the_grpo_yaml(
    tiny: TinySetup, tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str
) -> None:
    config = _yaml(
        tmp_path,
        model_name_or_path=tiny.model_dir,
        dataset_name=str(_json_folder(tmp_path)),
        max_completion_length=3,
        chat_template_kwargs={"enable_thinking": False},
        reward_funcs=["accuracy_reward"],
        output_dir=str(tmp_path / "out"),
        **{section: {"think_tags": {"mode": "warn"}}},  # rl-guards grpo's section: ignored here
    )
    out = tmp_path / "probe.json"
    code = main(["probe-lengths", str(config), "--samples", "5", "--device", "cpu", "--dtype", "float32",
                 "--output", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    numbers = json.loads(out.read_text())
    assert numbers["cap"] == 3 and numbers["num_completions"] == 5  # the YAML's max_completion_length
    assert "probe-lengths" in captured.err and "5/5" in captured.err  # the progress bar, on stderr
    assert "completion lengths over 5 samples" in captured.out


def test_a_folder_trl_grpo_accepts(tiny: TinySetup, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _json_folder(tmp_path)  # 437f4ff: FileNotFoundError traceback (load_from_disk on a data-files folder)
    code = main(["probe-lengths", "--model", tiny.model_dir, "--dataset", str(folder), "--samples", "3",
                 "--max-new-tokens", "2", "--json", "--no-progress"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["num_completions"] == 3 and captured.err == ""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--dataset", "{tmp}/nowhere"], "no such dataset folder or file"),
        (["--dataset", "{data}", "--prompt_column", "question"], "no 'question' column"),
        (["--dataset", "{data}", "--split", "test"], "not 'test'"),
        (["--dataset", "{data}", "--device", "cuda"], "CUDA is not available"),
        (["--dataset", "{empty}"], "could not load a dataset"),
        (["{yaml_no_model}"], "not a local folder"),
        (["{yaml_saved}"], "a save_to_disk folder, which trl grpo cannot load either"),
        (["{tmp}/missing.yaml"], "no such YAML file"),
        ([], "no dataset"),
    ],
)
def test_clear_one_line_errors(
    tiny: TinySetup, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    names = {
        "tmp": str(tmp_path),
        "data": str(_json_folder(tmp_path)),
        "empty": str(tmp_path / "empty"),
        "yaml_no_model": str(_yaml(tmp_path, model_name_or_path=str(tmp_path / "no-model"), dataset_name="x")),
    }
    if "{yaml_saved}" in argv:
        saved = tmp_path / "saved"
        make_dataset(n_per_task=2).save_to_disk(str(saved))
        names["yaml_saved"] = str(_yaml(tmp_path, model_name_or_path=tiny.model_dir, dataset_name=str(saved)))
    (tmp_path / "empty").mkdir()
    args = [a.format(**names) for a in argv]
    model = [] if args and args[0].endswith(".yaml") else ["--model", tiny.model_dir]
    code = main(["probe-lengths", *args, *model, "--samples", "2", "--max-new-tokens", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
