"""The audit's findings and functions: what a finding says, and a function under audit called through its
framework's caller with a deadline per call."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rl_guards.core.severity import INFO, severity_of, worst
from rl_guards.reward_calls import CallRow, CallStalled, Tracked, bounded

# kind -> default severity on the one scale (rl_guards.core.severity): "blocking": the run would crash or learn the
# wrong thing; "warning": a policy can exploit it or it wastes the step; "info": shown, never fails the audit
KINDS: dict[str, str] = {
    "inverted": "blocking",
    "raises": "blocking",
    "wrong_type": "blocking",
    "nan": "blocking",
    "timeout": "blocking",
    "returns_none": "warning",
    "reads_prefix": "warning",
    "reads_suffix": "warning",
    "reads_thinking": "warning",
    "hackable": "warning",
    "nondeterministic": "warning",
    "slow": "warning",
    "blind": "info",
    "not_checked": "info",
}
FIXES = {
    "reads_prefix": "remove the slice (or the start anchor) before scoring: the answer comes after the reasoning",
    "reads_suffix": "remove the slice of the end (text[-N:]) before scoring: an answer followed by its explanation "
    "is not read",
    "reads_thinking": "score the answer after the think block only (rl_guards.rewards.blind_judge does it for a "
    "judge), unless the function is meant to grade the reasoning",
    "hackable": "check what the function pays for (the expected format, the whole answer), cap a shaping term below "
    "the correctness gap, or add a reward that keeps such completions below real answers: a policy finds this within "
    "a few hundred steps",
    "inverted": "flip the sign or the comparison (right answers must score higher), or fix the swapped column",
    "raises": "handle malformed completions (return 0.0 or None) instead of raising: one row ends the run",
    "wrong_type": "return what the framework reads (TRL: a float per completion; verl: a float or a dict with "
    "'score'; OpenRLHF: a dict with 'rewards')",
    "nan": "return a finite number: NaN rewards turn every advantage of the group into NaN",
    "returns_none": "return a score for every completion (None means 'not my task' to TRL, and crashes verl/OpenRLHF)",
    "nondeterministic": "seed the judge or set temperature 0: the same completion must earn the same reward",
    "slow": "batch or cache the calls, make the judge async, or score fewer completions per step",
    "timeout": "give the call a timeout of its own, or make it faster",
    "blind": "add a reward that tells a right answer from a wrong one, if the run should learn correctness",
    "not_checked": "",
}


@dataclass
class Finding:
    """One thing the audit found about a function."""

    kind: str
    message: str
    severity: str = ""
    rows: list[int] = field(default_factory=list)  # dataset row indices that show it

    def __post_init__(self) -> None:
        self.severity = severity_of(self.severity) if self.severity else KINDS[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "fix": FIXES[self.kind],
            "rows": self.rows[:20],
        }


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
        return worst(f.severity for f in self.findings if f.severity != INFO)  # ok, warning or blocking

    def add(self, finding: Finding) -> None:
        """Add a finding, unless one of its kind is there already."""
        if not any(f.kind == finding.kind for f in self.findings):
            self.findings.append(finding)

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


class Dead(Exception):
    """The function ran past its deadline once: it is not called again."""


@dataclass
class AuditedFunction:
    """A function under audit: its caller (its framework's calling code), a deadline per call, and what the checks
    gathered (its scores of each row's completions, its call times)."""

    audit: FunctionAudit
    caller: Any
    timeout: float | None = None
    scores: dict[int, list[float | None]] = field(default_factory=dict)  # row index -> its completions' scores
    latencies: list[float] = field(default_factory=list)  # seconds per completion, one per timed call
    completions: int = 0
    seconds: float = 0.0
    dead: bool = False

    def call(self, rows: list[CallRow], texts: list[str], *, timed: bool = False) -> list[Any]:
        """The function's scores of ``texts`` as its framework calls it, within the deadline (each call gets
        ``timeout`` seconds): its exception raised; past the deadline a ``timeout`` finding, and Dead from then on."""
        if self.dead:
            raise Dead(self.audit.name)
        tracked = Tracked()
        start = time.perf_counter()
        try:
            values = bounded(
                lambda: self.caller(rows, texts, tracked=tracked), self.timeout, inputs=tracked, fork_rng=False
            )
        except CallStalled as exc:
            self.dead = True
            self.audit.add(Finding("timeout", f"a call scoring {len(texts)} completion(s) {exc}"))
            raise Dead(self.audit.name) from exc
        spent = time.perf_counter() - start
        if timed:
            self.seconds += spent
            self.completions += len(texts)
            self.latencies.append(spent / max(len(texts), 1))
        return list(values)


__all__ = ["FIXES", "KINDS", "AuditedFunction", "Dead", "Finding", "FunctionAudit"]
