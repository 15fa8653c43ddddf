"""The offline reward audit: the in-run checks of reward functions, driven over a dataset's rows on a CPU.

Checks, per function (and for the weighted total when there are several), each timed:

1. **rows**: every row's completions scored as the framework calls the function; rows that raise, return None,
   NaN or a value that is not a score (:class:`~rl_guards.rewards.row_errors.CatchRowErrors` finds the rows), the
   time of each call (rows/s, p50/p99 latency per completion, projected seconds per step) and calls past the timeout.
2. **nondeterministic**: the first rows scored a second time.
3. **inverted**: a row's reference answer against another row's in the usual answer forms
   (:func:`rl_guards.rewards.reference_pairs.check_reference_pairs`).
4. **probes**: the variants and rules of :mod:`rl_guards.core.probes` (reads a prefix / suffix, reads the thinking,
   pays a degenerate completion) on ``probe_rows`` rows, a verdict needing :func:`~rl_guards.core.probes.quorum`.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_guards.audit.data import (
    AuditRow,
    attach_completions,
    build_completions,
    load_function,
    load_rows,
    read_completions,
)
from rl_guards.audit.signatures import Adapted, CallTimeout, detect_framework, is_number
from rl_guards.core.completions import completion_text
from rl_guards.core.probe_totals import best_total, format_matters, informative, total_hacks, weighted_totals
from rl_guards.core.probes import (
    HACKABLE,
    HACKS,
    NEUTRAL_LINE,
    PREFIX,
    SUFFIX,
    THINKING,
    Pair,
    ProbeFinding,
    Variant,
    assess,
    compose,
    cut_variants,
    narrow_prefix,
    plan,
    quorum,
    reference_pairs,
    split,
)
from rl_guards.core.think_markup import THINK
from rl_guards.errors import ConfigError
from rl_guards.rewards.callables import reward_name
from rl_guards.rewards.calls import call_reward
from rl_guards.rewards.reference_pairs import ReferenceRow, check_reference_pairs
from rl_guards.rewards.row_errors import RowErrorLog, catch_row_errors

# kind -> default severity ("block": the run would crash or learn the wrong thing; "warn": a policy can exploit it
# or it wastes the step; "info": shown, never fails the audit)
KINDS: dict[str, str] = {
    "inverted": "block",
    "raises": "block",
    "wrong_type": "block",
    "nan": "block",
    "timeout": "block",
    "returns_none": "warn",
    "reads_prefix": "warn",
    "reads_suffix": "warn",
    "reads_thinking": "warn",
    "hackable": "warn",
    "nondeterministic": "warn",
    "slow": "warn",
    "blind": "info",
    "not_checked": "info",
}
_PROBE_KINDS = {PREFIX: "reads_prefix", SUFFIX: "reads_suffix", THINKING: "reads_thinking", HACKABLE: "hackable"}
FIXES = {
    "reads_prefix": "remove the slice (or the start anchor) before scoring: the answer comes after the reasoning",
    "reads_suffix": "remove the slice of the end (text[-N:]) before scoring",
    "reads_thinking": "score the answer after the think block only (rl_guards.rewards.blind_judge does it for a "
    "judge), unless the function is meant to grade the reasoning",
    "hackable": "check what the function pays for (the expected format, the whole answer), or add a reward that keeps "
    "such completions below real answers: a policy finds this within a few hundred steps",
    "inverted": "flip the sign or the comparison (right answers must score higher), or fix the swapped column",
    "raises": "handle malformed completions (return 0.0 or None) instead of raising: one row ends the run",
    "wrong_type": "return a float per completion (verl: a float or a dict with 'score'; OpenRLHF: a tensor or a "
    "dict with 'rewards')",
    "nan": "return a finite number: NaN rewards turn every advantage of the group into NaN",
    "returns_none": "return a score for every completion (None means 'not my task' to TRL, and crashes verl/OpenRLHF)",
    "nondeterministic": "seed the judge or set temperature 0: the same completion must earn the same reward",
    "slow": "batch or cache the calls, make the judge async, or score fewer completions per step",
    "timeout": "give the call a timeout of its own, or make it faster",
    "blind": "add a reward that tells a right answer from a wrong one, if the run should learn correctness",
    "not_checked": "",
}
EPS = 1e-9
MARKUP = THINK
BUILT_LONGEST = 4096  # characters: the probe lengths tried when the completions were built from the references


@dataclass
class Finding:
    """One thing the audit found about a function."""

    kind: str
    message: str
    severity: str = ""
    rows: list[int] = field(default_factory=list)  # dataset row indices that show it

    def __post_init__(self) -> None:
        self.severity = self.severity or KINDS[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "fix": FIXES[self.kind],
                "rows": self.rows[:20]}


@dataclass
class FunctionAudit:
    """One function's verdict: its findings and its speed."""

    name: str
    framework: str
    weight: float = 1.0
    findings: list[Finding] = field(default_factory=list)
    speed: dict[str, float] = field(default_factory=dict)
    rows_scored: int = 0

    @property
    def verdict(self) -> str:
        severities = {f.severity for f in self.findings}
        return "block" if "block" in severities else "warn" if "warn" in severities else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "framework": self.framework,
            "weight": self.weight,
            "verdict": self.verdict,
            "rows_scored": self.rows_scored,
            "findings": [f.to_dict() for f in self.findings],
            "speed": self.speed,
        }


@dataclass
class AuditReport:
    """The audit of every function, the weighted total (several functions), and what each check cost."""

    functions: list[FunctionAudit]
    total: FunctionAudit | None
    rows: int
    completions: str  # where the completions came from
    reference: str | None
    costs: dict[str, float]  # check -> seconds
    seconds: float

    @property
    def exit_code(self) -> int:
        """0: no warn/block finding; 1: one; (2, could not check, is the CLI's: a ConfigError before this)."""
        audits = [*self.functions, *([self.total] if self.total else [])]
        return 1 if any(a.verdict != "ok" for a in audits) else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": [f.to_dict() for f in self.functions],
            "total": self.total.to_dict() if self.total else None,
            "rows": self.rows,
            "completions": self.completions,
            "reference_column": self.reference,
            "costs_s": {k: round(v, 4) for k, v in self.costs.items()},
            "seconds": round(self.seconds, 3),
            "exit_code": self.exit_code,
        }


@dataclass
class _Fn:
    """A function under audit: the user's callable, its adapter and what the checks have gathered."""

    audit: FunctionAudit
    adapted: Adapted
    scores: dict[int, list[float | None]] = field(default_factory=dict)  # row -> its completions' scores
    latencies: list[float] = field(default_factory=list)  # seconds per completion, one per call
    completions: int = 0
    seconds: float = 0.0
    dead: bool = False  # timed out: no further calls


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=None if enabled else True, leave=False, file=sys.stderr)


def audit_rewards(
    rewards: Sequence[Any],
    dataset: str | Sequence[AuditRow],
    *,
    weights: Sequence[float] | None = None,
    framework: str | None = None,
    completions: str | None = None,
    model: str | None = None,
    device: str = "cpu",
    samples: int = 4,
    max_new_tokens: int = 256,
    rows: int = 200,
    probe_rows: int = 12,
    repeat_rows: int = 8,
    timeout: float | None = 10.0,
    batch_size: int = 256,
    slow_step_s: float = 10.0,
    input_key: str = "input",
    label_key: str = "label",
    reference: str | None = None,
    thinking: bool | None = None,
    progress: bool = False,
) -> AuditReport:
    """Audit reward functions (callables or ``file.py:fn`` / ``pkg.mod:fn``) on a dataset (a path or rows).

    ``weights``: one per function (the weighted total is audited too); ``framework``: force a signature;
    ``completions``: a file of completions (else ``model`` samples, else built from the references); ``timeout``:
    seconds per completion scored; ``batch_size``: completions per training step for the projected step time;
    ``slow_step_s``: projected seconds per step above which a function is ``slow``; ``thinking``: the policy writes a
    think block (None: as the completions do; built completions come both ways). ConfigError when it cannot check.
    """
    start = time.perf_counter()
    costs: dict[str, float] = {}
    funcs = [load_function(r) if isinstance(r, str) else r for r in rewards]
    if not funcs:
        raise ConfigError("no reward function to audit")
    if weights is not None and len(weights) != len(funcs):
        raise ConfigError(f"{len(weights)} weights for {len(funcs)} reward functions")
    weight_list = [float(w) for w in weights] if weights is not None else [1.0] * len(funcs)
    data = (
        load_rows(dataset, funcs, input_key=input_key, label_key=label_key, reference=reference, rows=rows)
        if isinstance(dataset, str)
        else list(dataset)[:rows]
    )
    ref_col = reference or _reference_of(data)
    source = "built from the reference answers"
    if completions is not None:
        matched = attach_completions(data, read_completions(completions))
        if not matched:
            raise ConfigError(f"--completions {completions}: no completion's prompt matches a dataset row's prompt")
        source = f"{completions} ({matched} of {len(data)} rows matched)"
    elif model is not None:
        from rl_guards.audit.sampling import sample_completions

        sample_completions(data, model, device=device, samples=samples, max_new_tokens=max_new_tokens,
                           progress=progress)
        source = f"sampled from {model}"
    build_completions(data, thinking=thinking is not False)
    data = [r for r in data if r.completions]
    if not data:
        raise ConfigError("nothing to score: no row has completions, and none has a reference answer to build them")
    fns: list[_Fn] = []
    names: set[str] = set()
    for fn, weight in zip(funcs, weight_list, strict=True):
        fw = framework or detect_framework(fn)
        name = reward_name(fn)
        while name in names:
            name += "'"
        names.add(name)
        adapted = Adapted(fn, fw, reference=ref_col, name=name, timeout=timeout)
        fns.append(_Fn(FunctionAudit(name, fw, weight), adapted))
    costs["load"] = time.perf_counter() - start

    tick = time.perf_counter()
    _score_rows(fns, data, progress)
    costs["rows"] = time.perf_counter() - tick
    tick = time.perf_counter()
    _check_repeat(fns, data[:repeat_rows])
    costs["nondeterministic"] = time.perf_counter() - tick
    tick = time.perf_counter()
    blind = _check_inverted(fns, data)
    costs["inverted"] = time.perf_counter() - tick
    tick = time.perf_counter()
    total_hacks = _check_probes(fns, data, probe_rows, progress, thinking)
    costs["probes"] = time.perf_counter() - tick
    for f in fns:
        _speed(f, batch_size, slow_step_s)
    total = None
    if len(fns) > 1:
        total = FunctionAudit("(total)", "-", 1.0, findings=total_hacks)
        if blind:
            tasks = f" (tasks {', '.join(blind)})" if any(blind) else ""
            total.findings.append(Finding("blind", f"the weighted total never pays a right answer more than a wrong "
                                          f"one{tasks}"))
    elif blind and fns[0].audit.verdict != "block":
        fns[0].audit.findings.append(
            Finding("blind", "never paid the reference answer more than another row's in the forms tried (bare, "
                    "'The answer is X.', \\boxed{X}, with and without a think block): a format or shaping term, or a "
                    "grader of another answer form (not judged for inverted)")
        )
    if ref_col is None:
        for f in fns:
            f.audit.findings.append(Finding("not_checked", "no reference column: inverted and the reference-answer "
                                            "probes were not checked (pass --reference COLUMN)"))
    return AuditReport([f.audit for f in fns], total, len(data), source, ref_col, costs, time.perf_counter() - start)


def _reference_of(rows: Sequence[AuditRow]) -> str | None:
    return next((r.reference_column for r in rows if r.reference_column), None)


def _call_args(row: AuditRow, completions: list[Any]) -> dict[str, Any]:
    n = len(completions)
    return {
        "prompts": [row.prompt] * n,
        "completions": completions,
        "completion_ids": [approx_ids(completion_text(c)) for c in completions],
        **{k: [v] * n for k, v in row.columns.items()},
    }


def approx_ids(text: str) -> list[int]:
    """Stand-in token ids for a completion (one per 4 characters, an English tokenizer's rate): functions that
    count tokens get a length in the right range without a tokenizer."""
    return list(range((len(text) + 3) // 4))


def _shown(row: AuditRow, completion: Any = None) -> str:
    prompt = row.prompt_text.strip().replace("\n", " ")
    text = f"row {row.index} (prompt {prompt[-80:]!r}"
    if completion is not None:
        body = completion_text(completion)
        text += f", completion {body[:120]!r}" + ("…" if len(body) > 120 else "")
    return text + ")"


# ----- 1. rows: raises / None / NaN / wrong type, and speed -------------------------------------------------------
# completions a policy writes early or when truncated, scored on a few rows: a function must not raise, or return
# NaN or a value that is not a score, on them (None is TRL's "not mine"; verl and OpenRLHF cannot take it)
EDGES: tuple[tuple[str, str], ...] = (
    ("empty", ""),
    ("only think tags", compose(NEUTRAL_LINE, "", MARKUP)),
    ("cut inside the thinking", f"{MARKUP.open_tag}\nLet me work out the"),
    ("no answer", "I am not sure."),
)
EDGE_ROWS = 4


def _score_rows(fns: list[_Fn], data: list[AuditRow], progress: bool) -> None:
    bar = _progress(len(fns) * len(data), "audit: scoring rows", progress)
    for index, f in enumerate(fns):
        log = RowErrorLog()
        wrapped = catch_row_errors(f.adapted, index, log)
        raised: list[tuple[AuditRow, Any, str]] = []
        edge_scores: list[tuple[AuditRow, Any, float | None]] = []
        batches = [(row, list(row.completions), False) for row in data]
        batches += [(row, _shaped(row, [t for _, t in EDGES]), True) for row in data[:EDGE_ROWS]]
        for row, completions, edge in batches:
            if not edge:
                bar.update(1)
            if f.dead:
                continue
            tick = time.perf_counter()
            try:
                values = wrapped(**_call_args(row, completions))
            except CallTimeout as exc:
                f.dead = True
                f.audit.findings.append(Finding("timeout", f"a call on {_shown(row)} {exc}", rows=[row.index]))
                continue
            finally:
                spent = time.perf_counter() - tick
            if not isinstance(values, list):
                values = [None] * len(completions)
            scores = [None if v is None else float(v) for v in values]
            errors, failed = log.take()
            if index in failed:
                raised += [(row, c, failed[index]) for c in completions[:1]]
            for error in errors.get(index, []):
                raised.append((row, completions[error.row] if error.row >= 0 else None, error.error))
            if edge:
                edge_scores += [(row, c, v) for c, v in zip(completions, scores, strict=False)]
                continue
            f.seconds += spent
            f.completions += len(completions)
            f.latencies.append(spent / max(len(completions), 1))
            f.scores[row.index] = scores
        f.audit.rows_scored = sum(1 for s in f.scores.values() if any(is_number(v) for v in s))
        _row_findings(f, data, raised, edge_scores)
    bar.close()


def _shaped(row: AuditRow, texts: list[str]) -> list[Any]:
    return [[{"role": "assistant", "content": t}] if isinstance(row.prompt, list) else t for t in texts]


def _row_findings(
    f: _Fn,
    data: list[AuditRow],
    raised: list[tuple[AuditRow, Any, str]],
    edges: list[tuple[AuditRow, Any, float | None]],
) -> None:
    n = len(data)
    typed = [(r, c, e) for r, c, e in raised if e.startswith("RewardTypeError")]
    thrown = [(r, c, e) for r, c, e in raised if not e.startswith("RewardTypeError")]
    for kind, items in (("raises", thrown), ("wrong_type", typed)):
        if not items:
            continue
        rows = sorted({r.index for r, _, _ in items})
        row, completion, error = items[0]
        if kind == "wrong_type":
            error = error.split(" (at ", 1)[0].removeprefix("RewardTypeError: ")
        verb = "raises" if kind == "raises" else "returns a value that is not a score"
        f.audit.findings.append(
            Finding(kind, f"{verb} on {len(items)} completion(s) in {len(rows)} of {n} rows, e.g. "
                    f"{_shown(row, completion)}: {error}", rows=rows)
        )
    nan = [(r, c) for r in data for c, v in zip(r.completions, f.scores.get(r.index, []), strict=False)
           if v is not None and math.isnan(v)]
    nan += [(r, c) for r, c, v in edges if v is not None and math.isnan(v)]
    if nan:
        rows = sorted({r.index for r, _ in nan})
        f.audit.findings.append(
            Finding("nan", f"returns NaN on {len(rows)} of {n} rows, e.g. {_shown(*nan[0])}", rows=rows)
        )
    raised_rows = {r.index for r, _, _ in raised}
    none_rows = [r for r in data if r.index not in raised_rows and any(v is None for v in f.scores.get(r.index, []))]
    strict = f.audit.framework in ("verl", "openrlhf")
    edge_none = [(r, c) for r, c, v in edges if v is None and r.index not in raised_rows]
    if strict and (none_rows or edge_none):
        shown = _shown(*edge_none[0]) if not none_rows else _shown(none_rows[0], _first_none(f, none_rows[0]))
        f.audit.findings.append(
            Finding("returns_none", f"returns None on {len(none_rows)} of {n} rows"
                    f"{' and on degenerate completions' if edge_none else ''}, e.g. {shown}", severity="block",
                    rows=[r.index for r in none_rows])
        )
        return
    if not none_rows:
        return
    # TRL: None for a whole row is "not my task" (left out of the function's mean); None for some completions of a
    # row is a score the policy can move
    mixed = [r for r in none_rows if any(v is not None for v in f.scores[r.index])]
    shown_row = (mixed or none_rows)[0]
    message = (
        f"returns None on {len(none_rows)} of {n} rows ({len(mixed)} of them for some completions only), e.g. "
        f"{_shown(shown_row, _first_none(f, shown_row))}"
    )
    if mixed or len(none_rows) == n:
        f.audit.findings.append(Finding("returns_none", message, rows=[r.index for r in (mixed or none_rows)]))
    else:
        f.audit.findings.append(Finding("returns_none", message + " (whole rows: not its task)", severity="info"))


def _first_none(f: _Fn, row: AuditRow) -> Any:
    return next(c for c, v in zip(row.completions, f.scores[row.index], strict=False) if v is None)


# ----- 2. the same input twice ------------------------------------------------------------------------------------
def _check_repeat(fns: list[_Fn], data: list[AuditRow]) -> None:
    for f in fns:
        if f.dead:
            continue
        for row in data:
            first = f.scores.get(row.index)
            if first is None or not any(is_number(v) for v in first):
                continue
            try:
                again = f.adapted(**_call_args(row, list(row.completions)))
            except (Exception, CallTimeout):
                continue
            changed = [
                i for i, (a, b) in enumerate(zip(first, again, strict=False))
                if is_number(a) and is_number(b) and abs((a or 0.0) - (b or 0.0)) > EPS
            ]
            if changed:
                i = changed[0]
                f.audit.findings.append(
                    Finding("nondeterministic", f"scored the same completion {first[i]:g} then {again[i]:g}: "
                            f"{_shown(row, row.completions[i])}", rows=[row.index])
                )
                break


# ----- 3. right vs wrong reference answers ------------------------------------------------------------------------
def _check_inverted(fns: list[_Fn], data: list[AuditRow]) -> list[str]:
    live = [f for f in fns if not f.dead]
    answers = [r.reference for r in data if r.reference is not None]
    cases = []
    for row in data:
        wrong = next((a for a in answers if a != row.reference), None)
        if row.reference is None or wrong is None:
            continue
        cases.append(ReferenceRow(row.task, row.prompt, dict(row.columns), row.reference, wrong))
        if len(cases) >= 8:
            break
    if not cases or not live:
        return []
    try:
        report = check_reference_pairs([f.adapted for f in live], cases, weights=[f.audit.weight for f in live],
                                       markup=MARKUP)
    except CallTimeout:
        return []
    by_name = {f.audit.name: f for f in live}
    for name, task in report.inverted:
        f = by_name[name]
        if any(x.kind == "inverted" for x in f.audit.findings):
            continue
        down = report.down.get((name, task), 0)
        f.audit.findings.append(
            Finding("inverted", f"pays a wrong answer more than the right one in {down} answer form(s) and never the "
                    f"right one more (task {task or '-'}): {report.examples.get((name, task), '')}")
        )
    return report.total_blind


# ----- 4. the probes ----------------------------------------------------------------------------------------------
@dataclass
class _Tally:
    tried: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (function, key) -> rows
    found: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    detail: dict[tuple[str, str], tuple[ProbeFinding, int]] = field(default_factory=dict)  # first finding, its row

    def add(self, fn: str, key: str, row: int, finding: ProbeFinding | None = None) -> None:
        self.tried.setdefault((fn, key), []).append(row)
        if finding is not None:
            self.found.setdefault((fn, key), []).append(row)
            self.detail.setdefault((fn, key), (finding, row))


def _spread(data: list[AuditRow], k: int) -> list[AuditRow]:
    if len(data) <= k:
        return list(data)
    step = len(data) / k
    return [data[int(i * step)] for i in range(k)]


def _check_probes(
    fns: list[_Fn], data: list[AuditRow], probe_rows: int, progress: bool, thinking: bool | None
) -> list[Finding]:
    live = [f for f in fns if not f.dead]
    rows = _spread([r for r in data if r.reference is not None] or data, probe_rows)
    answers = [r.reference for r in data if r.reference is not None]
    longest = max((len(completion_text(c)) for r in data for c in r.completions), default=0)
    if any(r.built for r in data):
        longest = max(longest, BUILT_LONGEST)
    tally = _Tally()
    total_tally = _Tally()
    probed_rows: dict[int, tuple[AuditRow, list[Pair], bool]] = {}
    bar = _progress(len(rows), "audit: probes", progress)
    for row in rows:
        bar.update(1)
        other = next((a for a in answers if a != row.reference), None) if row.reference is not None else None
        pairs, thinks = _probe_row(live, row, other, longest, tally, total_tally, thinking)
        probed_rows[row.index] = (row, pairs, thinks)
    bar.close()
    group_of = {r.index: r.index for r in rows}
    for f in live:
        name = f.audit.name
        keys = [PREFIX, SUFFIX, THINKING]
        hacks = [h for h in HACKS if quorum(tally.found.get((name, h), []), tally.tried.get((name, h), []), group_of)]
        keys += sorted(hacks, key=lambda h: -len(tally.found[(name, h)]) / len(tally.tried[(name, h)]))[:1]
        for key in keys:
            found, tried = tally.found.get((name, key), []), tally.tried.get((name, key), [])
            if not quorum(found, tried, group_of):
                continue
            finding, at = tally.detail[(name, key)]
            if key == PREFIX and finding.pair:
                row, pairs, thinks = probed_rows[at]
                finding = _bisect(f, finding, row, pairs, thinks)
            kind = _PROBE_KINDS[HACKABLE if key in HACKS else key]
            f.audit.findings.append(
                Finding(kind, f"{finding.detail}; seen on {len(found)} of the {len(tried)} rows probed, e.g. "
                        f"{_shown(probed_rows[at][0])}", rows=found)
            )
    out = []
    if len(live) > 1:
        found, tried = total_tally.found.get(("", "inverted"), []), total_tally.tried.get(("", "inverted"), [])
        if quorum(found, tried, group_of):
            out.append(Finding("inverted", f"{total_tally.detail[('', 'inverted')][0].detail}; seen on {len(found)} "
                               f"of the {len(tried)} rows probed", rows=found))
        hacks = [h for h in HACKS if quorum(total_tally.found.get(("", h), []), total_tally.tried.get(("", h), []),
                                            group_of)]
        for h in hacks[:1]:
            finding, at = total_tally.detail[("", h)]
            found, tried = total_tally.found[("", h)], total_tally.tried[("", h)]
            out.append(Finding("hackable", f"{finding.detail}; seen on {len(found)} of the {len(tried)} rows probed",
                               rows=found))
    return out


def _score(f: _Fn, row: AuditRow, texts: list[str]) -> list[float | None]:
    conversational = isinstance(row.prompt, list)
    completions: list[Any] = [[{"role": "assistant", "content": t}] if conversational else t for t in texts]
    n = len(texts)
    return call_reward(f.adapted, prompts=[row.prompt] * n, completions=completions,
                       completion_ids=[approx_ids(t) for t in texts],
                       columns={k: [v] * n for k, v in row.columns.items()})


def _probe_row(
    live: list[_Fn],
    row: AuditRow,
    other: str | None,
    longest: int,
    tally: _Tally,
    total_tally: _Tally,
    thinking: bool | None,
) -> tuple[list[Pair], bool]:
    """Every function's verdict on ``row`` (added to ``tally``); the row's pairs and whether it thinks."""
    texts = [completion_text(c) for c in row.completions]
    parts = [split(t, MARKUP) for t in texts]
    thinks = thinking if thinking is not None else any(block is not None for block, _ in parts) or not texts
    totals = [
        sum(f.audit.weight * (s if is_number(s) else 0.0) for f in live for s in [f.scores.get(row.index, [])[i]
            if i < len(f.scores.get(row.index, [])) else None])
        for i in range(len(texts))
    ]
    pairs: list[Pair] = []
    if texts and max(totals) > min(totals) + EPS:
        best, worst = totals.index(max(totals)), totals.index(min(totals))
        pairs.append(Pair("real", parts[best][1], parts[worst][1]))
    if row.reference is not None and other is not None:
        pairs += reference_pairs("reference", row.reference, other)
    if not pairs:
        return pairs, thinks
    best_row = totals.index(max(totals)) if texts else 0
    variants: list[Variant] = plan(
        pairs,
        thinks=thinks,
        markup=MARKUP,
        thinking_text=parts[best_row][0] if texts else None,
        prompt_text=row.prompt_text,
        reference=row.reference,
        other_answer=other,
        longest=longest,
        real_has_block=bool(texts) and parts[best_row][0] is not None,
    )
    unique = list(dict.fromkeys(v.text for v in variants))
    scores: dict[int, list[float | None]] = {}
    fallback: dict[int, float] = {}  # a function that cannot score the variants: what it paid the worst real one
    for index, f in enumerate(live):
        try:
            by_text = dict(zip(unique, _score(f, row, unique), strict=True))
        except (Exception, CallTimeout):  # it cannot score a variant: not judged on this row (rows already says why)
            real = [v for v in f.scores.get(row.index, []) if is_number(v)]
            fallback[index] = min(real) if real else 0.0
            continue
        scores[index] = [by_text[v.text] for v in variants]
    totals_of = weighted_totals(variants, scores, [f.audit.weight for f in live], fallback)
    best = best_total(max(totals) if texts else -math.inf, pairs, totals_of)
    strict = not informative(pairs, totals_of)
    matters = format_matters(variants, scores)
    for index, f in enumerate(live):
        if index not in scores or all(v is None for v in scores[index]):
            continue
        real = [v for v in f.scores.get(row.index, []) if is_number(v)]
        assessment = assess(
            variants,
            scores[index],
            real_best=max(real) if real else None,
            real_worst=min(real) if real else None,
            totals=totals_of,
            best_total=best,
            format_matters=matters,
            strict=strict,
        )
        found = {(x.variant if x.probe == HACKABLE else x.probe): x for x in assessment.findings}
        for key in assessment.tried:
            tally.add(f.audit.name, key, row.index, found.get(key))
    worst = min([*totals, *(totals_of[f"{p.name}:bad@0"] for p in pairs if p.name.startswith("reference"))])
    for label, finding in total_hacks(variants, totals_of, best, worst, format_matters=matters).items():
        total_tally.add("", label, row.index, finding)
    # the weighted total itself inverted (a negative weight, a sign flipped between functions)
    gaps = [totals_of[f"{p.name}:good@0"] - totals_of[f"{p.name}:bad@0"] for p in pairs if p.name != "real"]
    if any(abs(g) > EPS for g in gaps):
        down = all(g <= EPS for g in gaps)
        detail = (f"the weighted total pays a wrong answer more than the right one (by up to {-min(gaps):g}) in every "
                  "answer form it tells apart")
        total_tally.add("", "inverted", row.index, ProbeFinding("inverted", detail) if down else None)
    return pairs, thinks


def _bisect(f: _Fn, finding: ProbeFinding, row: AuditRow, pairs: list[Pair], thinks: bool) -> ProbeFinding:
    """The prefix finding with its cut narrowed by bisection between the lengths tried (as the in-run probe does)."""
    pair = next((p for p in pairs if p.name == finding.pair), None)
    if pair is None:
        return finding
    def scores_at(k: int) -> list[float | None]:
        return _score(f, row, list(cut_variants(pair, k, thinks=thinks, markup=MARKUP)))

    try:
        return narrow_prefix(finding, scores_at)
    except CallTimeout:  # a BaseException: the core's narrowing lets it through
        return finding


def _speed(f: _Fn, batch_size: int, slow_step_s: float) -> None:
    if not f.latencies:
        return
    ordered = sorted(f.latencies)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    per = f.seconds / max(f.completions, 1)
    step = per * batch_size
    f.audit.speed = {
        "rows_per_s": round(f.completions / max(f.seconds, 1e-9), 1),
        "p50_ms": round(1000 * statistics.median(ordered), 4),
        "p99_ms": round(1000 * p99, 4),
        "step_s": round(step, 4),
        "batch_size": batch_size,
        "completions": f.completions,
    }
    if step > slow_step_s:
        f.audit.findings.append(
            Finding("slow", f"{per * 1000:.1f} ms per completion: {step:.1f} s of reward scoring per step at "
                    f"{batch_size} completions (over {slow_step_s:g} s)")
        )


__all__ = ["FIXES", "KINDS", "AuditReport", "Finding", "FunctionAudit", "audit_rewards"]
