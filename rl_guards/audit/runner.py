"""The offline reward audit: the in-run checks of reward functions, driven over a dataset's rows on a CPU.

Every function is called exactly as its framework calls it (:mod:`rl_guards.reward_calls`: argument for argument,
through the framework's own code where it is installed), each call within ``timeout`` seconds. Checks, each timed:

1. **rows**: every row's completions scored; rows that raise, return None, NaN or a value the framework cannot read
   (shown decoded with the exception and where it was raised), the time of each call (rows/s, p50/p99 latency per
   completion, projected seconds per step), calls past the deadline.
2. **nondeterministic**: the first rows scored a second time.
3. **inverted**: a row's reference answer against another row's in every answer form
   (:func:`rl_guards.rewards.reference_pairs.check_reference_pairs`).
4. **probes**: the one probe procedure (:mod:`rl_guards.core.probing`) on ``probe_rows`` rows: reads a prefix / a
   suffix / the thinking, pays a degenerate completion, a verdict needing the quorum.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rl_guards.audit.checks import check_inverted, check_repeat, score_rows, speed
from rl_guards.audit.data import AuditRow, attach_completions, build_completions, load_function, load_rows
from rl_guards.audit.data import read_completions as read_completion_file
from rl_guards.audit.functions import FIXES, KINDS, AuditedFunction, Finding, FunctionAudit
from rl_guards.audit.probing import check_probes
from rl_guards.errors import ConfigError
from rl_guards.reward_calls import caller, detect
from rl_guards.reward_calls.verifiers import is_rubric
from rl_guards.rewards.callables import reward_name


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
        """0: no warning/blocking finding; 1: one; (2, could not check, is the CLI's: a ConfigError before this)."""
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


def expand(rewards: Sequence[Any], weights: Sequence[float] | None) -> list[tuple[Any, float, Any]]:
    """(function, weight, its verifiers rubric or None): a rubric stands for its functions and weights."""
    out = []
    for i, reward in enumerate(rewards):
        weight = float(weights[i]) if weights is not None else 1.0
        if is_rubric(reward):
            for fn, w in zip(reward.funcs, reward.weights, strict=False):
                out.append((fn, weight * float(w), reward))
        else:
            out.append((reward, weight, None))
    return out


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
    timeout: float | None = 60.0,
    batch_size: int = 256,
    slow_step_s: float = 10.0,
    input_key: str = "input",
    label_key: str = "label",
    reference: str | None = None,
    thinking: bool | None = None,
    progress: bool = False,
    status: Any = None,
) -> AuditReport:
    """Audit reward functions (callables, verifiers rubrics, or ``file.py:fn`` / ``pkg.mod:fn``) on a dataset.

    ``weights``: one per reward (the weighted total is audited too); ``framework``: force a calling convention;
    ``completions``: a file of completions (else ``model`` samples, else built from the references); ``timeout``:
    seconds any one call may take; ``status(phase)``: told each check as it starts; ``batch_size``: completions per
    training step for the projected step time; ``slow_step_s``: projected seconds per step above which a function is
    ``slow``; ``thinking``: the policy writes a think block (None: as the completions do; built completions come
    both ways). ConfigError when it cannot check.
    """
    start = time.perf_counter()
    costs: dict[str, float] = {}
    loaded = [load_function(r) if isinstance(r, str) else r for r in rewards]
    if not loaded:
        raise ConfigError("no reward function to audit")
    if weights is not None and len(weights) != len(loaded):
        raise ConfigError(f"{len(weights)} weights for {len(loaded)} reward functions")
    entries = expand(loaded, weights)
    data = (
        load_rows(dataset, [e[0] for e in entries], input_key=input_key, label_key=label_key, reference=reference,
                  rows=rows)
        if isinstance(dataset, str)
        else list(dataset)[:rows]
    )  # fmt: skip
    ref_col = reference or next((r.reference_column for r in data if r.reference_column), None)
    source = "built from the reference answers"
    if completions is not None:
        matched = attach_completions(data, read_completion_file(completions))
        if not matched:
            raise ConfigError(f"--completions {completions}: no completion's prompt matches a dataset row's prompt")
        source = f"{completions} ({matched} of {len(data)} rows matched)"
    elif model is not None:
        from rl_guards.audit.sampling import sample_completions

        sample_completions(data, model, device=device, samples=samples, max_new_tokens=max_new_tokens,
                           progress=progress)  # fmt: skip
        source = f"sampled from {model}"
    build_completions(data, thinking=thinking is not False)
    data = [r for r in data if r.completions]
    if not data:
        raise ConfigError("nothing to score: no row has completions, and none has a reference answer to build them")
    fns: list[AuditedFunction] = []
    names: set[str] = set()
    for fn, weight, rubric in entries:
        fw = framework or detect(rubric if rubric is not None else fn)
        name = reward_name(fn)
        while name in names:
            name += "'"
        names.add(name)
        options = {"rubric": rubric} if fw == "verifiers" else {}
        fns.append(AuditedFunction(FunctionAudit(name, fw, weight), caller(fn, fw, **options), timeout=timeout))
    costs["load"] = time.perf_counter() - start

    def timed(name: str, check: Any) -> Any:
        if status is not None:
            status(name)
        tick = time.perf_counter()
        try:
            return check()
        finally:
            costs[name] = time.perf_counter() - tick

    timed("rows", lambda: score_rows(fns, data, progress))
    timed("nondeterministic", lambda: check_repeat(fns, data[:repeat_rows]))
    blind = timed("inverted", lambda: check_inverted(fns, data))
    total_findings = timed("probes", lambda: check_probes(fns, data, probe_rows, progress, thinking))
    for f in fns:
        speed(f, batch_size, slow_step_s)
    total = None
    if len(fns) > 1:
        total = FunctionAudit("(total)", "-", 1.0, findings=total_findings)
        if blind:
            tasks = f" (tasks {', '.join(blind)})" if any(blind) else ""
            total.add(Finding("blind", f"the weighted total never pays a right answer more than a wrong one{tasks}"))
    elif blind and fns[0].audit.verdict != "blocking":
        fns[0].audit.add(
            Finding(
                "blind",
                "never paid the reference answer more than another row's in the forms tried (bare, 'The answer is "
                "X.', \\boxed{X}, #### X, <answer>X</answer>, $X$, a last line; with and without a think block): a "
                "format or shaping term, or a grader of another answer form (not judged for inverted)",
            )
        )
    if ref_col is None:
        for f in fns:
            f.audit.add(
                Finding(
                    "not_checked",
                    "no reference column: inverted and the reference-answer probes were not checked (pass "
                    "--reference COLUMN)",
                )
            )
    return AuditReport([f.audit for f in fns], total, len(data), source, ref_col, costs, time.perf_counter() - start)


__all__ = ["FIXES", "KINDS", "AuditReport", "Finding", "FunctionAudit", "audit_rewards", "expand"]
