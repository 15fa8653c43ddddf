"""What the audit reads: the reward functions (``file.py:fn`` or ``pkg.mod:fn``), the dataset (each framework's own
shape), and the completions to score (a file the user has, else completions built from the reference answers).

Dataset shapes, read as they are:

- TRL: one column per field; ``prompt`` a string or chat messages; the reference answer in a column the functions
  take by name, else the first of ``answer``, ``solution``, ``ground_truth``, ... present.
- verl (parquet): ``data_source``, ``prompt`` (messages), ``reward_model.ground_truth`` (the reference),
  ``extra_info``.
- OpenRLHF (jsonl): the prompt in ``input_key`` (default ``input``), the label in ``label_key`` (``label``).

Completions, in order of preference: ``--completions`` (a run folder with rl_guards dumps, TRL's
``log_completions`` parquet, or a jsonl/json of prompt/completion rows; matched to the dataset rows by prompt), then
``--model`` samples, else the reference answer and another row's (wrong) answer in the usual answer forms.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_guards.core.completions import completion_text
from rl_guards.errors import ConfigError
from rl_guards.reward_calls.openrlhf import prompt_text
from rl_guards.rewards.reference_pairs import reference_column

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


@dataclass
class AuditRow:
    """One dataset row: its prompt, its columns as the functions get them, its reference answer, its completions."""

    index: int
    prompt: Any  # a string or chat messages
    columns: dict[str, Any]
    reference: str | None
    task: str = ""
    completions: list[str] = field(default_factory=list)  # the completions' texts (thinking put back in its block)
    built: bool = False  # the completions were built from the reference answers (no completions file)
    reference_column: str | None = None  # the column ``reference`` came from

    @property
    def prompt_text(self) -> str:
        """The last user message (or the string prompt): what an echo of the prompt repeats."""
        if isinstance(self.prompt, list):
            users = [m for m in self.prompt if isinstance(m, dict) and m.get("role") == "user"]
            if users:
                return str(users[-1].get("content") or "")
        return prompt_text(self.prompt)


def load_function(spec: str) -> Any:
    """The callable (or verifiers rubric) named by ``path/to/file.py:fn`` or ``pkg.mod:fn`` (ConfigError naming what
    is there). A file is imported under its own name with its folder on ``sys.path``, as ``python file.py`` would:
    a function a process pool pickles is found again by the pool's workers."""
    if ":" not in spec:
        raise ConfigError(f"reward {spec!r}: write it as path/to/file.py:fn or pkg.mod:fn")
    target, _, attr = spec.rpartition(":")
    path = Path(target)
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"reward {spec!r}: no file {target}")
        module = _import_file(spec, path)
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise ConfigError(f"reward {spec!r}: cannot import {target}: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_"))
            raise ConfigError(f"reward {spec!r}: {target} has no {attr!r}; its callables: {', '.join(names)}")
        obj = getattr(obj, part)
    from rl_guards.reward_calls.verifiers import is_rubric

    if not callable(obj) and not is_rubric(obj):
        raise ConfigError(f"reward {spec!r} is a {type(obj).__name__}, not a function")
    return obj


def _import_file(spec: str, path: Path) -> Any:
    folder = str(path.resolve().parent)
    name = path.stem if path.stem.isidentifier() else f"rl_guards_audit_{abs(hash(str(path.resolve())))}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded
    if loaded is not None:  # another module of that name: keep it, load this one under a name of its own
        name = f"rl_guards_audit_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"reward {spec!r}: cannot load {path} as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its own helper modules next to it, in this process and in a pool's workers
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"reward {spec!r}: importing {path} raised {type(exc).__name__}: {exc}") from exc
    return module


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a jsonl / json / parquet / csv file or a ``datasets`` folder saved with ``save_to_disk``."""
    path = Path(path)
    if path.is_dir():
        if not (path / "dataset_info.json").is_file() and not (path / "dataset_dict.json").is_file():
            raise ConfigError(f"{path} is a folder but not a datasets folder (save_to_disk); pass a data file")
        from datasets import DatasetDict, load_from_disk

        data = load_from_disk(str(path))
        if isinstance(data, DatasetDict):
            data = data["train"] if "train" in data else data[next(iter(data))]
        return [dict(r) for r in data]
    if not path.is_file():
        raise ConfigError(f"no file {path}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [data])
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a list of rows")
        return [dict(r) for r in data]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(str(path)).to_pylist())
    if suffix == ".csv":
        import csv

        with path.open(encoding="utf-8", newline="") as handle:
            return [dict(r) for r in csv.DictReader(handle)]
    raise ConfigError(f"{path}: unknown data file type {suffix!r} (one of {', '.join(DATA_SUFFIXES)}, or a folder)")


def find_reference(columns: Sequence[str], funcs: Sequence[Any], label_key: str | None = None) -> str | None:
    """The reference column: verl's ``reward_model.ground_truth``; else a column the functions take by name; else
    OpenRLHF's ``label_key`` when present; else the first usual one (``answer``, ``solution``, ... as the probes)."""
    if "reward_model" in columns:
        return "ground_truth"
    found = reference_column(list(columns), funcs, None)
    if found is not None and any(found in _parameters(fn) for fn in funcs):
        return found  # a column a function takes by name
    if label_key and label_key in columns:
        return label_key
    return found


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def load_rows(
    path: str | Path,
    funcs: Sequence[Any],
    *,
    input_key: str = "input",
    label_key: str = "label",
    reference: str | None = None,
    rows: int | None = None,
) -> list[AuditRow]:
    """The dataset's first ``rows`` rows as :class:`AuditRow` (verl's nested ground truth lifted to a column)."""
    records = read_records(path)
    if rows is not None:
        records = records[:rows]
    if not records:
        raise ConfigError(f"{path} has no rows")
    columns = list(records[0])
    ref = reference or find_reference(columns, funcs, label_key if label_key in columns else None)
    out: list[AuditRow] = []
    for i, record in enumerate(records):
        cols = dict(record)
        if isinstance(cols.get("reward_model"), dict) and "ground_truth" in cols["reward_model"]:
            cols.setdefault("ground_truth", cols["reward_model"]["ground_truth"])
        key = next((k for k in ("prompt", input_key, "question") if k in cols), None)  # TRL/verl, OpenRLHF, verifiers
        if key is None:
            raise ConfigError(f"{path}: no 'prompt' column and no {input_key!r} (--input_key); columns: {columns}")
        prompt = cols[key]
        if hasattr(prompt, "tolist"):
            prompt = prompt.tolist()
        value = cols.get(ref) if ref else None
        ref_text = None if value is None or str(value).strip() == "" else str(value)
        cols.pop("prompt", None)  # TRL passes it as ``prompts``
        task = str(cols.get("task", cols.get("data_source", "")) or "")
        out.append(AuditRow(i, prompt, cols, ref_text, task, reference_column=ref))
    return out


# ----- completions ------------------------------------------------------------------------------------------------
def read_completions(path: str | Path) -> list[tuple[str, Any]]:
    """(prompt text, completion) pairs from a run folder with rl_guards dumps, TRL's ``completions_*.parquet``
    (a file or the folder of them), or a jsonl/json of rows with ``prompt`` and ``completion``."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    if path.is_dir():
        parquets = sorted(path.glob("completions_*.parquet")) or sorted(path.glob("completions/completions_*.parquet"))
        if parquets:
            for file in parquets:
                rows += read_records(file)
        else:
            from rl_guards.rollouts.reader import RolloutStore

            try:
                store = RolloutStore(path)
                for step in store.steps():
                    rows += store.load(step, ["prompt", "completion", "completion_text"])
            except Exception as exc:
                raise ConfigError(f"--completions {path}: no rollout dumps or completions parquet: {exc}") from exc
    else:
        rows = read_records(path)
    out = []
    for row in rows:
        completion = row.get("completion_text") or row.get("completion")
        if completion is None:
            for key in ("response", "output", "solution_str"):
                completion = row.get(key)
                if completion is not None:
                    break
        if completion is None:
            continue
        out.append((prompt_text(row.get("prompt", row.get("input", ""))), completion))
    if not out:
        raise ConfigError(f"--completions {path}: no rows with a prompt and a completion")
    return out


def attach_completions(rows: list[AuditRow], pairs: list[tuple[str, Any]], per_row: int = 8) -> int:
    """Give each dataset row the completions whose prompt holds its prompt text; how many rows got some."""
    keys = sorted(((row, row.prompt_text.strip()) for row in rows), key=lambda k: -len(k[1]))  # longest match first
    exact: dict[str, list[AuditRow]] = {}
    for row, key in keys:
        exact.setdefault(key, []).append(row)
    for prompt, completion in pairs:
        matched = exact.get(prompt.strip())
        if matched is None:
            matched = [row for row, key in keys if key and key in prompt]
        for row in matched[:1]:
            if len(row.completions) < per_row:
                row.completions.append(completion_text(completion))
    return sum(1 for row in rows if row.completions)


THINK_LINE = "Let me work it out step by step."


def build_completions(rows: list[AuditRow], thinking: bool = True) -> None:
    """Completions from the reference answers, for rows that have none: the reference's final answer and another
    row's (wrong) one, in every answer form (:data:`rl_guards.core.probing.forms.FORMS`), each also after a think
    block (``thinking``)."""
    from rl_guards.core.probing.forms import FORMS, admits, final_answer, render, wrong_answers
    from rl_guards.core.probing.variants import compose
    from rl_guards.core.think_markup import THINK

    finals = [final_answer(r.reference) for r in rows]
    for row, right in zip(rows, finals, strict=True):
        if row.completions or right is None:
            continue
        wrong = wrong_answers(right, [f for f in finals if f is not None and f != right], 1)
        texts: list[str] = []
        for answer in [right, *wrong]:
            for form in FORMS:
                if not admits(answer, form):
                    continue
                text = render(form, answer)
                texts += [text, compose(THINK_LINE, text, THINK)] if thinking else [text]
        row.completions = texts
        row.built = True


__all__ = [
    "AuditRow",
    "attach_completions",
    "build_completions",
    "find_reference",
    "load_function",
    "load_rows",
    "read_completions",
    "read_records",
]
