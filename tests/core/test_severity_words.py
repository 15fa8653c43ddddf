"""Issue 38 #3: one severity scale and one set of words everywhere (e1b9f62 had info/warning/blocking in the
preflight report, info/warning/error in findings, ok/WARN/BLOCK in the audit, error/warning/info for templates)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rl_guards.config import GuardConfig
from rl_guards.core.severity import LEVELS, SEVERITIES, rank, severity_of, worst
from rl_guards.core.templates import TemplateFinding
from rl_guards.errors import GuardError
from rl_guards.guards.session import GuardSession
from rl_guards.rollouts.findings import load_findings
from rl_guards.testing.logs import shows


def test_the_scale() -> None:
    assert SEVERITIES == ("info", "warning", "blocking") and LEVELS == ("ok", *SEVERITIES)
    assert [severity_of(w) for w in ("error", "block", "warn", "WARNING", "info")] == [
        "blocking", "blocking", "warning", "warning", "info"
    ]  # fmt: skip  (words written by older versions)
    assert worst([]) == "ok" and worst(["info", "blocking", "warning"]) == "blocking"
    assert rank("ok") < rank("info") < rank("warning") < rank("blocking")


def test_findings_take_the_scale_words_by_mode() -> None:
    session = GuardSession()
    for mode in ("log", "warn"):
        with shows(None):
            session.reporter(f"g_{mode}", GuardConfig(mode=mode), 1).violation("kind", "text")
    with pytest.raises(GuardError):
        session.reporter("g_raise", GuardConfig(mode="raise"), 1).violation("kind", "text")
    assert {r["guard"]: r["severity"] for r in session.summary_rows()} == {
        "g_raise": "blocking", "g_warn": "warning", "g_log": "info"
    }  # fmt: skip
    text = session.summary_text()
    assert "blocking" in text and "error" not in text


def test_the_status_line_names_the_level() -> None:
    from rl_guards.trl.log_routing import SignalRouter

    session = GuardSession()
    router = SignalRouter(SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[])), session, True)
    assert router.status_line(3) == "[rl_guards] step 3: ok"
    with shows(None):
        session.reporter("think_tags", GuardConfig(mode="warn"), 3).violation("stray_close", "x")
    assert router.status_line(4) == "[rl_guards] step 4: warning: 1 finding kind(s): think_tags/stray_close x1"


def test_the_status_line_is_said_on_change_and_every_n_steps() -> None:
    """Issue 38 #2: e1b9f62 printed it at every logging step."""
    from rl_guards.config import ConsoleConfig
    from rl_guards.console import capture
    from rl_guards.trl.log_routing import SignalRouter

    session = GuardSession()
    handler = SimpleNamespace(callbacks=[])
    router = SignalRouter(SimpleNamespace(callback_handler=handler), session, True, ConsoleConfig(status_every=5))
    import logging

    with capture(logging.INFO) as said:
        for step in range(1, 13):
            if step == 7:
                with shows(None):
                    session.reporter("truncation", GuardConfig(mode="warn"), 7).violation("truncated", "cut")
            router.say_status(step)
    steps = [m.split(":")[0] for m in said.messages if m.startswith("[rl_guards] step ")]
    assert steps == ["[rl_guards] step 1", "[rl_guards] step 5", "[rl_guards] step 7", "[rl_guards] step 10"]


def test_preflight_templates_audit_and_files_use_the_same_words(tmp_path: Path) -> None:
    from rl_guards.audit.functions import KINDS, Finding, FunctionAudit
    from rl_guards.core.preflight import SEVERITIES as PREFLIGHT

    assert set(PREFLIGHT) == set(SEVERITIES)
    assert TemplateFinding("k", "error", "m").severity == "blocking"  # a caller's old word, read on the scale
    assert set(KINDS.values()) <= set(SEVERITIES)
    audit = FunctionAudit("f", "trl", findings=[Finding("hackable", "m")])
    assert audit.verdict == "warning" and FunctionAudit("g", "trl").verdict == "ok"
    lines: list[dict[str, Any]] = [
        {"type": "finding", "guard": "masking", "kind": "post_eos", "severity": "error", "count": 1, "message": "m"},
        {"type": "finding", "guard": "think_tags", "kind": "x", "severity": "warning", "count": 2, "message": "n"},
    ]
    path = tmp_path / "findings.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))  # written before the one scale
    assert [f["severity"] for f in load_findings(path).findings] == ["blocking", "warning"]
