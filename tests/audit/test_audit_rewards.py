"""``rl-guards audit-rewards`` / :mod:`rl_guards.audit`: reward functions written as each framework's users write them
(``tests/audit/audit_rewards/*.py``), each planted failure caught, each clean twin passing; the datasets in each
framework's own shape; completions from the files users have; the command's JSON, HTML and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_guards.audit import audit_rewards, detect_framework, load_function
from rl_guards.errors import ConfigError

HERE = Path(__file__).parent / "audit_rewards"
ROWS = [(f"What is {i} + {i + 7}?", str(2 * i + 7)) for i in range(24)]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same questions in each framework's dataset shape."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("audit_data")
    out = {
        "trl": _write_jsonl(root / "trl.jsonl", [{"prompt": [{"role": "user", "content": q}], "answer": a}
                                                  for q, a in ROWS]),
        "trl_string": _write_jsonl(root / "trl_string.jsonl", [{"prompt": q, "answer": a} for q, a in ROWS]),
        "trl_solution": _write_jsonl(root / "trl_solution.jsonl",
                                     [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in ROWS]),
        "openrlhf": _write_jsonl(root / "openrlhf.jsonl", [{"input": f"Question: {q}\nAnswer:", "label": a}
                                                           for q, a in ROWS]),
        "plain": _write_jsonl(root / "plain.jsonl", [{"prompt": q, "answer": a} for q, a in ROWS]),
        "verifiers": _write_jsonl(root / "verifiers.jsonl", [{"question": q, "answer": a} for q, a in ROWS]),
    }
    verl = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": q + " Let's think step by step and output the final answer."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"split": "train", "index": i},
        }
        for i, (q, a) in enumerate(ROWS)
    ]
    out["verl"] = root / "verl.parquet"
    pq.write_table(pa.Table.from_pylist(verl), out["verl"])
    return out


# (framework, module, function, dataset, kinds the audit must report; empty: clean, verdict ok)
CASES: list[tuple[str, str, str, str, set[str]]] = [
    ("trl", "trl_rewards", "clean_accuracy", "trl", set()),
    ("trl", "trl_rewards", "clean_accuracy", "trl_string", set()),
    ("trl", "trl_rewards", "clean_length_penalty", "trl", set()),
    ("trl", "trl_rewards", "clean_async_judge", "trl", set()),
    ("trl", "trl_rewards", "inverted_accuracy", "trl", {"inverted"}),
    ("trl", "trl_rewards", "prefix_accuracy", "trl", {"reads_prefix"}),
    ("trl", "trl_rewards", "suffix_accuracy", "trl_string", {"reads_suffix"}),
    ("trl", "trl_rewards", "thinking_accuracy", "trl", {"reads_thinking"}),
    ("trl", "trl_rewards", "hackable_accuracy", "trl", {"hackable"}),
    ("trl", "trl_rewards", "raises_accuracy", "trl", {"raises"}),
    ("trl", "trl_rewards", "none_accuracy", "trl", {"returns_none"}),
    ("trl", "trl_rewards", "wrong_count_accuracy", "trl", {"wrong_type"}),
    ("trl", "trl_rewards", "random_accuracy", "trl", {"nondeterministic"}),
    ("trl", "trl_rewards", "nan_accuracy", "trl_string", {"nan"}),
    # issue 39: called as TRL calls it (completion_ids passed; no keyword dropped); a first-line reader found
    ("trl", "trl_rewards", "inverted_by_ids", "trl", {"inverted"}),
    ("trl", "trl_rewards", "first_line_accuracy", "trl", {"reads_prefix"}),
    ("trl", "trl_rewards", "missing_kwargs_accuracy", "trl", {"raises"}),
    ("verl", "verl_rewards", "clean_compute_score", "verl", set()),
    ("verl", "verl_rewards", "clean_dict_score", "verl", set()),
    ("verl", "verl_rewards", "clean_async_score", "verl", set()),
    ("verl", "verl_rewards", "inverted_score", "verl", {"inverted"}),
    ("verl", "verl_rewards", "prefix_score", "verl", {"reads_prefix"}),
    ("verl", "verl_rewards", "suffix_score", "verl", {"reads_suffix"}),
    ("verl", "verl_rewards", "thinking_score", "verl", {"reads_thinking"}),
    ("verl", "verl_rewards", "hackable_score", "verl", {"hackable"}),
    ("verl", "verl_rewards", "raises_score", "verl", {"raises"}),
    ("verl", "verl_rewards", "none_score", "verl", {"returns_none"}),
    ("verl", "verl_rewards", "nan_score", "verl", {"nan"}),
    ("verl", "verl_rewards", "wrong_type_score", "verl", {"wrong_type"}),
    ("verl", "verl_rewards", "random_score", "verl", {"nondeterministic"}),
    # issue 39: verl's batched signature, a GSM8K-style #### grader inverted, a compute_score verl would crash on
    ("verl", "verl_rewards", "clean_batched_score", "verl", set()),
    ("verl", "verl_rewards", "inverted_hash_score", "verl", {"inverted"}),
    ("verl", "verl_rewards", "no_extra_info_score", "verl", {"raises"}),
    ("openrlhf", "openrlhf_rewards", "clean_reward_func", "openrlhf", set()),
    ("openrlhf", "openrlhf_rewards", "clean_tensor_reward_func", "openrlhf", {"wrong_type"}),  # OpenRLHF 0.11
    ("openrlhf", "openrlhf_rewards", "inverted_reward_func", "openrlhf", {"inverted"}),
    ("openrlhf", "openrlhf_rewards", "prefix_reward_func", "openrlhf", {"reads_prefix"}),
    ("openrlhf", "openrlhf_rewards", "suffix_reward_func", "openrlhf", {"reads_suffix"}),
    ("openrlhf", "openrlhf_rewards", "thinking_reward_func", "openrlhf", {"reads_thinking"}),
    ("openrlhf", "openrlhf_rewards", "hackable_reward_func", "openrlhf", {"hackable"}),
    ("openrlhf", "openrlhf_rewards", "raises_reward_func", "openrlhf", {"raises"}),
    ("openrlhf", "openrlhf_rewards", "wrong_type_reward_func", "openrlhf", {"wrong_type"}),
    ("openrlhf", "openrlhf_rewards", "nan_reward_func", "openrlhf", {"nan"}),
    ("openrlhf", "openrlhf_rewards", "random_reward_func", "openrlhf", {"nondeterministic"}),
    ("plain", "plain_rewards", "clean_grader", "plain", set()),
    ("plain", "plain_rewards", "clean_async_grader", "plain", set()),
    ("plain", "plain_rewards", "inverted_grader", "plain", {"inverted"}),
    ("plain", "plain_rewards", "prefix_grader", "plain", {"reads_prefix"}),
    ("plain", "plain_rewards", "thinking_grader", "plain", {"reads_thinking"}),
    ("plain", "plain_rewards", "hackable_grader", "plain", {"hackable"}),
    ("plain", "plain_rewards", "raises_grader", "plain", {"raises"}),
    ("plain", "plain_rewards", "wrong_type_grader", "plain", {"wrong_type"}),
    ("plain", "plain_rewards", "suffix_grader", "plain", {"reads_suffix"}),
    ("plain", "plain_rewards", "none_grader", "plain", {"returns_none"}),
    ("plain", "plain_rewards", "nan_grader", "plain", {"nan"}),
    ("verifiers", "verifiers_rewards", "clean_correct_answer", "verifiers", set()),
    ("verifiers", "verifiers_rewards", "clean_judge", "verifiers", set()),
    ("verifiers", "verifiers_rewards", "clean_parsed", "trl", set()),
    ("verifiers", "verifiers_rewards", "inverted_answer", "verifiers", {"inverted"}),
    ("verifiers", "verifiers_rewards", "thinking_answer", "trl", {"reads_thinking"}),
    ("verifiers", "verifiers_rewards", "hackable_answer", "verifiers", {"hackable"}),
    ("verifiers", "verifiers_rewards", "raises_judge", "trl", {"raises"}),
    ("verifiers", "verifiers_rewards", "prefix_answer", "verifiers", {"reads_prefix"}),
    ("verifiers", "verifiers_rewards", "wrong_type_answer", "verifiers", {"wrong_type"}),
    ("verifiers", "verifiers_rewards", "random_answer", "verifiers", {"nondeterministic"}),
]


@pytest.mark.parametrize(("framework", "module", "name", "dataset", "kinds"), CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in CASES])
def test_planted_failure_caught_and_clean_twin_passes(
    data: dict[str, Path], framework: str, module: str, name: str, dataset: str, kinds: set[str]
) -> None:
    fn = load_function(f"{HERE / (module + '.py')}:{name}")
    assert detect_framework(fn) == framework
    report = audit_rewards([fn], str(data[dataset]), probe_rows=8)
    audit = report.functions[0]
    found = {f.kind for f in audit.findings if f.severity != "info"}
    assert audit.framework == framework
    if kinds:
        assert kinds <= found, [f.message for f in audit.findings]
        assert audit.verdict in ("warning", "blocking") and report.exit_code == 1
    else:
        assert found == set(), [f.message for f in audit.findings]
        assert audit.verdict == "ok" and report.exit_code == 0
        assert audit.rows_scored == len(ROWS) and audit.speed["rows_per_s"] > 0


def test_row_errors_are_shown_decoded_with_the_exception_and_where(data: dict[str, Path]) -> None:
    fn = load_function(f"{HERE / 'verl_rewards.py'}:raises_score")
    finding = next(f for f in audit_rewards([fn], str(data["verl"])).functions[0].findings if f.kind == "raises")
    assert "AttributeError" in finding.message and "verl_rewards.py:" in finding.message
    assert "completion '7'" in finding.message and "(prompt \"What is 0 + 7?" in finding.message
    assert finding.severity == "blocking" and len(finding.rows) == len(ROWS)  # bare answers in every row


@pytest.mark.parametrize(
    ("factory", "thinking"),
    [("accuracy_reward", False), ("reasoning_accuracy_reward", None), ("think_format_reward", None),
     ("soft_overlong", None)],
)
def test_trl_own_reward_functions_pass(data: dict[str, Path], factory: str, thinking: bool | None) -> None:
    import trl.rewards as trl_rewards

    fn = (trl_rewards.get_soft_overlong_punishment(max_completion_len=512, soft_punish_cache=64)
          if factory == "soft_overlong" else getattr(trl_rewards, factory))
    report = audit_rewards([fn], str(data["trl_solution"]), rows=8, probe_rows=4, thinking=thinking)
    assert report.exit_code == 0, [f.message for f in report.functions[0].findings]


def test_trl_accuracy_reward_reads_the_thinking_of_a_thinking_policy(data: dict[str, Path]) -> None:
    """TRL's accuracy_reward parses the whole completion (reasoning_accuracy_reward is the thinking one)."""
    from trl.rewards import accuracy_reward

    report = audit_rewards([accuracy_reward], str(data["trl_solution"]), rows=8, probe_rows=4, thinking=True)
    assert {f.kind for f in report.functions[0].findings} == {"reads_thinking"}


def test_a_functions_findings_do_not_change_with_the_functions_beside_it(data: dict[str, Path]) -> None:
    """A partial-credit term that pays a list of candidates is hackable on its own and beside a correctness reward
    alike; only the weighted total's verdict depends on the mix (here it keeps candidates below a right answer)."""
    hackable = load_function(f"{HERE / 'trl_rewards.py'}:hackable_accuracy")
    clean = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
    alone = audit_rewards([hackable], str(data["trl"]), probe_rows=6)
    both = audit_rewards([clean, hackable], str(data["trl"]), weights=[1.0, 0.5], probe_rows=6)

    def kinds(audit: object) -> set[str]:
        return {f.kind for f in audit.findings if f.severity != "info"}  # type: ignore[attr-defined]

    assert "hackable" in kinds(alone.functions[0])
    assert kinds(both.functions[1]) == kinds(alone.functions[0]), [f.message for f in both.functions[1].findings]
    assert kinds(both.functions[0]) == set()
    assert both.total is not None and both.total.verdict == "ok", [f.message for f in both.total.findings]
    # two terms that both pay a list of candidates: the total pays it as much as a right answer
    other = load_function(f"{HERE / 'trl_rewards.py'}:thinking_accuracy")
    both_bad = audit_rewards([other, hackable], str(data["trl"]), weights=[1.0, 0.5], probe_rows=6)
    assert both_bad.total is not None and "hackable" in {f.kind for f in both_bad.total.findings}
    assert both_bad.exit_code == 1


def test_slow_and_timeout(data: dict[str, Path]) -> None:
    slow = load_function(f"{HERE / 'verl_rewards.py'}:slow_score")
    report = audit_rewards([slow], str(data["verl"]), rows=4, probe_rows=3, slow_step_s=0.1, batch_size=256)
    audit = report.functions[0]
    assert {f.kind for f in audit.findings} == {"slow"}
    assert audit.speed["p50_ms"] >= 2.0 and audit.speed["step_s"] > 0.1
    fast = audit_rewards([load_function(f"{HERE / 'verl_rewards.py'}:clean_compute_score")], str(data["verl"]),
                         slow_step_s=0.1)
    assert fast.exit_code == 0
    hanging = load_function(f"{HERE / 'verl_rewards.py'}:hanging_score")
    report = audit_rewards([hanging], str(data["verl"]), rows=4, timeout=0.02)
    assert [f.kind for f in report.functions[0].findings] == ["timeout"]
    assert report.functions[0].verdict == "blocking" and report.seconds < 3


def test_openrlhf_input_and_label_keys(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"question": q, "gold": a} for q, a in ROWS])
    fn = load_function(f"{HERE / 'openrlhf_rewards.py'}:clean_reward_func")
    report = audit_rewards([fn], str(path), input_key="question", label_key="gold")
    assert report.reference == "gold" and report.exit_code == 0
    inverted = load_function(f"{HERE / 'openrlhf_rewards.py'}:inverted_reward_func")
    assert "inverted" in {f.kind for f in audit_rewards([inverted], str(path), input_key="question",
                                                          label_key="gold").functions[0].findings}


def test_completions_from_a_jsonl_and_a_trl_completions_parquet(data: dict[str, Path], tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for q, a in ROWS:
        rows += [{"prompt": q, "completion": f"<think>\nadding\n</think>\n\nThe answer is {a}."},
                 {"prompt": q, "completion": f"<think>\nadding\n</think>\n\nThe answer is {int(a) + 1}."}]
    jsonl = _write_jsonl(tmp_path / "c.jsonl", rows)
    parquet = tmp_path / "completions"
    parquet.mkdir()
    templated = [{"step": 5, "prompt": f"<|im_start|>user\n{r['prompt']}<|im_end|>\n<|im_start|>assistant\n",
                  "completion": r["completion"], "reward": 0.0} for r in rows]
    pq.write_table(pa.Table.from_pylist(templated), parquet / "completions_00005.parquet")
    # as GRPOTrainer(log_completions=True) writes a conversational run: messages, through pandas
    import pandas as pd

    pd.DataFrame({
        "step": [7] * len(rows),
        "prompt": [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": r["prompt"]}]
                   for r in rows],
        "completion": [[{"role": "assistant", "content": r["completion"]}] for r in rows],
        "clean_accuracy": [0.0] * len(rows),
        "advantage": [0.0] * len(rows),
    }).to_parquet(parquet / "completions_00007.parquet")
    for source in (jsonl, parquet / "completions_00005.parquet", parquet / "completions_00007.parquet", tmp_path):
        clean = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
        report = audit_rewards([clean], str(data["trl"]), completions=str(source))
        assert f"{len(ROWS)} of {len(ROWS)} rows matched" in report.completions
        assert report.exit_code == 0 and report.functions[0].rows_scored == len(ROWS)
        raising = load_function(f"{HERE / 'trl_rewards.py'}:raises_accuracy")  # "The answer is N." is not an int
        assert "raises" in {f.kind for f in audit_rewards([raising], str(data["trl"]), completions=str(source))
                            .functions[0].findings}


def test_completions_from_an_rl_guards_dump(tmp_path: Path) -> None:
    from _rollouts_data import Harness, make_batch

    h = Harness(str(tmp_path / "run"), every_steps=1)
    h.begin(0)
    h.batch(make_batch(0))
    dataset = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": [{"role": "user", "content": "What is 3+4?"}],
                                                    "answer": "7"},
                                                   {"prompt": [{"role": "user", "content": "What is 2+2?"}],
                                                    "answer": "4"}])
    fn = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
    report = audit_rewards([fn], str(dataset), completions=str(tmp_path / "run"))
    assert "2 of 2 rows matched" in report.completions and report.functions[0].rows_scored == 2


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rl_guards.cli.main", "audit-rewards", *argv],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_exit_codes_json_and_html(data: dict[str, Path], tmp_path: Path) -> None:
    verl = HERE / "verl_rewards.py"
    ok = _cli(f"{verl}:clean_compute_score", "--dataset", str(data["verl"]), "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    fn = out["functions"][0]
    assert set(fn) >= {"name", "framework", "verdict", "findings", "speed"}
    assert (fn["name"], fn["framework"], fn["verdict"], fn["findings"]) == ("clean_compute_score", "verl", "ok", [])
    assert set(fn["speed"]) >= {"rows_per_s", "p50_ms", "p99_ms"}
    html = tmp_path / "audit.html"
    bad = _cli(f"{verl}:suffix_score", f"{verl}:inverted_score", "--dataset", str(data["verl"]),
               "--framework", "verl", "--rows", "12", "--json", "--html", str(html))
    assert bad.returncode == 1, bad.stderr
    functions = json.loads(bad.stdout)["functions"]
    verdicts = {f["name"]: (f["verdict"], {x["kind"] for x in f["findings"]}) for f in functions}
    assert verdicts["suffix_score"][0] == "warning" and "reads_suffix" in verdicts["suffix_score"][1]
    assert verdicts["inverted_score"][0] == "blocking" and "inverted" in verdicts["inverted_score"][1]
    page = html.read_text(encoding="utf-8")
    assert "<style>" in page and "reads_suffix" in page and "<script" not in page
    table = _cli(f"{verl}:inverted_score", "--dataset", str(data["verl"]))
    assert table.returncode == 1 and "blocking" in table.stdout and "fix:" in table.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["no_such_file.py:fn"],
        ["json:dumps"],  # a function with no reward signature
        [f"{HERE / 'verl_rewards.py'}:no_such_function"],
    ],
)
def test_cli_exit_2_when_it_cannot_check(data: dict[str, Path], argv: list[str]) -> None:
    result = _cli(*argv, "--dataset", str(data["verl"]))
    assert result.returncode == 2 and "could not check" in result.stderr, result.stderr


@pytest.mark.slow
def test_cli_exit_2_on_an_unreadable_dataset(tmp_path: Path) -> None:
    result = _cli(f"{HERE / 'plain_rewards.py'}:clean_grader", "--dataset", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "no file" in result.stderr


def test_unknown_signature_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--framework"):
        detect_framework(lambda x: x)


@pytest.mark.slow
def test_completions_sampled_from_a_local_model(tiny, tmp_path: Path) -> None:
    """``--model DIR``: the tiny model's samples are what the functions score (rows, speed, probes on them)."""
    dataset = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": [{"role": "user", "content": q}], "answer": a}
                                                   for q, a in ROWS[:4]])
    fn = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
    report = audit_rewards([fn], str(dataset), model=tiny.model_dir, samples=2, max_new_tokens=8, probe_rows=4)
    assert report.completions == f"sampled from {tiny.model_dir}"
    assert report.functions[0].speed["rows_per_s"] > 0 and report.functions[0].rows_scored == 4
    assert report.exit_code == 0, [f.message for f in report.functions[0].findings]


@pytest.mark.parametrize(
    ("name", "kinds"),
    [("clean_correct", set()), ("clean_keyed", set()), ("hackable_contains", {"hackable"}),
     ("thinking_contains", {"reads_thinking"}), ("inverted_correct", {"inverted"}), ("raises_boxed", {"raises"})],
)
def test_verifiers_v1_rewards_with_the_installed_trace(data: dict[str, Path], name: str, kinds: set[str]) -> None:
    """The installed verifiers' own API (0.4: ``@vf.reward (task, trace)``), called with a real ``Trace``."""
    pytest.importorskip("verifiers.v1")
    fn = load_function(f"{HERE / 'verifiers_v1_rewards.py'}:{name}")
    assert detect_framework(fn) == "verifiers"
    report = audit_rewards([fn], str(data["verifiers"]), probe_rows=8)
    found = {f.kind for f in report.functions[0].findings if f.severity != "info"}
    assert (kinds <= found and report.exit_code == 1) if kinds else (found == set() and report.exit_code == 0), found


@pytest.mark.slow
def test_the_audit_and_its_help_never_import_torch() -> None:
    """Auditing a plain grader must not pay torch/transformers' import (only --model needs them)."""
    code = (
        "import sys\n"
        "from rl_guards.cli.main import build_parser\n"
        "import rl_guards.audit, rl_guards.audit.render\n"
        "build_parser()\n"
        "print(','.join(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("thinking", [None, False])
def test_healthy_graders_of_the_in_run_precision_suite_are_silent(tmp_path: Path, thinking: bool | None) -> None:
    """rl_guards.testing.healthy's graders (the in-run probes' precision suite) on the two-task tiny dataset: every
    function and the total ok (each task's function returns None on the other task's rows: not its task)."""
    from rl_guards.testing import healthy, make_dataset
    from rl_guards.testing.rewards import arith_correct, echo_match, length_penalty

    path = tmp_path / "tiny.jsonl"
    _write_jsonl(path, [dict(r) for r in make_dataset(n_per_task=12)])
    suites = [
        [healthy.last_number_reward],
        [healthy.exact_match_reward],
        [healthy.boxed_reward],
        [healthy.xml_correctness_reward, healthy.strict_format_reward, healthy.soft_format_reward,
         healthy.xmlcount_reward],
        [arith_correct, echo_match, length_penalty],
    ]
    for funcs in suites:
        report = audit_rewards(funcs, str(path), thinking=thinking, probe_rows=8)
        loud = [(a.name, f.kind) for a in [*report.functions, *([report.total] if report.total else [])]
                for f in a.findings if f.severity != "info"]
        assert report.exit_code == 0 and loud == [], loud


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "datasets"])
def test_every_dataset_format(tmp_path: Path, fmt: str) -> None:
    import datasets

    records = [{"prompt": q, "answer": a} for q, a in ROWS]
    ds = datasets.Dataset.from_list(records)
    path = tmp_path / f"d.{fmt}" if fmt != "datasets" else tmp_path / "saved"
    if fmt == "jsonl":
        _write_jsonl(path, records)
    elif fmt == "json":
        path.write_text(json.dumps(records), encoding="utf-8")
    elif fmt == "csv":
        ds.to_csv(str(path), index=False)
    elif fmt == "parquet":
        ds.to_parquet(str(path))
    else:
        datasets.DatasetDict({"train": ds}).save_to_disk(str(path))
    fn = load_function(f"{HERE / 'plain_rewards.py'}:clean_grader")
    report = audit_rewards([fn], str(path))
    assert report.rows == len(ROWS) and report.reference == "answer" and report.exit_code == 0
    inverted = load_function(f"{HERE / 'plain_rewards.py'}:inverted_grader")
    assert audit_rewards([inverted], str(path)).functions[0].verdict == "blocking"


@pytest.mark.slow
def test_nothing_to_score_is_could_not_check(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": q} for q, _ in ROWS])
    with pytest.raises(ConfigError, match="nothing to score"):
        audit_rewards([load_function(f"{HERE / 'trl_rewards.py'}:clean_length_penalty")], str(path))
    result = _cli(f"{HERE / 'trl_rewards.py'}:clean_length_penalty", "--dataset", str(path))
    assert result.returncode == 2 and "nothing to score" in result.stderr


def test_callable_objects_and_partials(data: dict[str, Path]) -> None:
    """TRL's parameterised rewards are small classes with a fixed __name__; partials bind a parameter."""
    import functools

    class MatchReward:
        __name__ = "match_reward"

        def __init__(self, flip: bool) -> None:
            self.flip = flip

        def __call__(self, completions: list, answer: list, **kwargs: object) -> list[float]:
            grader = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
            return [1.0 - r if self.flip else r for r in grader(completions, answer)]

    def scaled(completion: str, answer: str, scale: float) -> float:
        return scale * load_function(f"{HERE / 'plain_rewards.py'}:clean_grader")(completion, answer)

    report = audit_rewards([MatchReward(False), functools.partial(scaled, scale=2.0)], str(data["trl"]),
                           probe_rows=6)
    assert [(a.name, a.framework, a.verdict) for a in report.functions] == [
        ("match_reward", "trl", "ok"), ("scaled", "plain", "ok")]
    flipped = audit_rewards([MatchReward(True)], str(data["trl"]), probe_rows=6)
    assert "inverted" in {f.kind for f in flipped.functions[0].findings}


def test_reference_column_is_the_one_the_function_takes_by_name(tmp_path: Path) -> None:
    """A TRL dataset with an unrelated ``label`` column: the function's ``answer`` is the reference."""
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": q, "answer": a, "label": "math"} for q, a in ROWS])
    report = audit_rewards([load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")], str(path))
    assert report.reference == "answer" and report.exit_code == 0


def test_a_negative_weight_inverts_the_total(data: dict[str, Path]) -> None:
    """Each function is fine; the rubric's sign is flipped in the weights: only the total says so."""
    clean = load_function(f"{HERE / 'trl_rewards.py'}:clean_accuracy")
    length = load_function(f"{HERE / 'trl_rewards.py'}:clean_length_penalty")
    flipped = audit_rewards([clean, length], str(data["trl"]), weights=[-1.0, 1.0], probe_rows=6)
    messages = [f.message for a in flipped.functions for f in a.findings]
    assert [a.verdict for a in flipped.functions] == ["ok", "ok"], messages
    assert flipped.total is not None and flipped.total.verdict == "blocking"
    assert "inverted" in {f.kind for f in flipped.total.findings}
    right = audit_rewards([clean, length], str(data["trl"]), weights=[1.0, 1.0], probe_rows=6)
    assert right.total is not None and right.total.verdict == "ok" and right.exit_code == 0
