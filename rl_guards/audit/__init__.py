"""Audit reward functions offline, before a GPU hour: the in-run probes and reward checks over a dataset's rows.

::

    from rl_guards.audit import audit_rewards
    report = audit_rewards(["rewards.py:compute_score"], "train.parquet")
    print(report.exit_code, [f.verdict for f in report.functions])

Each function is called as its framework calls it (:mod:`rl_guards.reward_calls`). The command line is
``rl-guards audit-rewards`` (:mod:`rl_guards.cli.audit`); what each kind and verdict means is in ``docs/audit.md``.
"""

from rl_guards.audit.data import AuditRow, load_function, load_rows
from rl_guards.audit.runner import FIXES, KINDS, AuditReport, Finding, FunctionAudit, audit_rewards
from rl_guards.reward_calls import FRAMEWORKS
from rl_guards.reward_calls import detect as detect_framework

__all__ = [
    "FIXES",
    "FRAMEWORKS",
    "KINDS",
    "AuditReport",
    "AuditRow",
    "Finding",
    "FunctionAudit",
    "audit_rewards",
    "detect_framework",
    "load_function",
    "load_rows",
]
