"""What the reward probes say: their findings' messages, and what they covered (the run summary's lines)."""

from __future__ import annotations

import json
from typing import Any

from rl_guards.core.batch import RolloutBatch
from rl_guards.core.probing.calls import RAISED, STALLED
from rl_guards.core.probing.tally import decode
from rl_guards.core.probing.variants import FALLBACK, HACKABLE, PREFIX, SUFFIX, THINKING
from rl_guards.errors import RewardProbeError
from rl_guards.guards import probe_views
from rl_guards.guards.base import Reporter

KINDS = {PREFIX: "reads_prefix", SUFFIX: "reads_suffix", THINKING: "reads_thinking", HACKABLE: "hackable"}
FIXES = {
    PREFIX: "Fix: remove the slice (or the start anchor) before scoring, or list the function in probes.prefix_ok "
    "if it is meant to read only the start.",
    SUFFIX: "Fix: remove the slice of the end (text[-N:]) before scoring, or list the function in probes.prefix_ok "
    "if it is meant to read only the end.",
    THINKING: "Fix: score the answer after the think block only (rl_guards.rewards.blind_judge does it for any "
    "judge), or list the function in probes.process_rewards if it is meant to grade the reasoning.",
    HACKABLE: "Fix: make the function check what it pays for (the expected format, the reference answer), cap a "
    "shaping term below the correctness gap, or add a reward that keeps such completions below real answers; a "
    "policy finds this within a few hundred steps.",
}


def stalled(guard: Any, batch: RolloutBatch, report: Reporter, fn: int, row: int) -> None:
    """A function that ran past its deadline on a probe's call: said once, with the text it was on."""
    fname = batch.reward_names[fn]
    shown = detail(guard, batch, row, fname, STALLED) or "(on another rank)"
    report.violation(
        f"stalled:{fname}",
        f"reward function {fname!r} ran past its deadline on a probe's call and is left out of later probes (the "
        f"run's own calls are not affected): {shown}. Fix: give the function a timeout of its own (a judge's "
        "HTTP call, a sandbox), or list it in probes.skip.",
        RewardProbeError,
        rows=[row],
    )


def detail(guard: Any, batch: RolloutBatch, row: int, fname: str, key: str) -> str | None:
    """A finding's text on ``row``, from the rank that probed it (None: that rank's text did not come over)."""
    text = batch.evidence.get((guard.name, row))
    if text is None and batch.holds(row):
        text = guard.row_evidence(batch, row)
    for d in json.loads(text) if text else []:
        if d["function"] == fname and d["key"] == key:
            return str(d["detail"])
    return None


def message(guard: Any, batch: RolloutBatch, found: list[int], tried: list[int], fname: str, key: str) -> str:
    """A verdict's message: the function, the finding on a row, how many rows showed it, a prompt, the fix."""
    row = found[0]
    shown = detail(guard, batch, row, fname, key) or "(on another rank)"
    prompt = probe_views.prompt_text(batch.prompts[row]) if row < len(batch.prompts) else ""
    probe = HACKABLE if key not in KINDS and key != FALLBACK else key
    fix = FIXES.get(THINKING if probe == FALLBACK else probe, "")
    return (
        f"reward function {fname!r} {shown}.\n  seen on {len(found)} of the {len(tried)} rows probed for this "
        f"({len({batch.group_of(r) for r in found})} group(s)); e.g. row {row} (task {batch.tasks[row]!r}, step "
        f"{batch.step}), prompt: {(prompt or '')[-160:]!r}\n  {fix}"
    )


def cover(
    coverage: dict[str, Any],
    batch: RolloutBatch,
    probed: list[int],
    feats: dict[str, Any],
    usable: set[int] | None = None,
) -> dict[str, Any]:
    """What the probes covered: per function, rows scored per task, tasks it raised or stalled on, tasks it
    returned None on (not its task); a column the driver has no caller for (``usable``) is only named."""
    cov = coverage or {"steps": [], "functions": {}}
    cov["steps"].append(batch.step)
    for fn, fname in enumerate(batch.reward_names):
        if usable is not None and fn not in usable:
            cov["functions"].setdefault(fname, {"rows": {}, "failed": [], "not_its_task": []})
            continue
        masks = [int(v) for v in feats.get(f"fn{fn}", [0.0] * len(batch))]
        entry = cov["functions"].setdefault(fname, {"rows": {}, "failed": [], "not_its_task": []})
        for r in probed:
            task = str(batch.tasks[r])
            if decode(masks[r], "scored")[0]:
                entry["rows"][task] = entry["rows"].get(task, 0) + 1
                kind = None
            elif decode(masks[r], RAISED)[0] or decode(masks[r], STALLED)[0]:
                kind = "failed"
            else:
                kind = "not_its_task"
            if kind is not None and task not in entry[kind] and task not in entry["rows"]:
                entry[kind].append(task)
    return cov


def summary(guard: Any) -> str:
    """What the probes covered (functions x tasks x rows), what they could not and why, and their cost."""
    lines = [
        f"probes: {guard.rounds} round(s), {guard.spent:.2f} s, {guard.spent / max(guard.elapsed, 1e-9):.1%} of the "
        f"run's time on this rank (budget {guard.config.budget:.0%})"
    ]
    if getattr(guard, "aborted", 0):
        lines[0] += f"; {guard.aborted} round(s) stopped by the budget before a row finished"
    if not guard.coverage:
        return lines[0] + "; nothing probed yet"
    lines[0] += f", at step(s) {', '.join(str(s) for s in guard.coverage['steps'])}"
    calls = getattr(guard.ctx, "checked_calls", None)
    for fname, entry in guard.coverage["functions"].items():
        if fname in guard.config.skip:
            lines.append(f"  {fname}: not probed (listed in probes.skip)")
            continue
        index = guard.ctx.reward_func_names.index(fname) if fname in guard.ctx.reward_func_names else -1
        if calls is not None and index in calls.stalled:
            lines.append(f"  {fname}: left out after it stalled ({calls.stalled[index]})")
        parts = [f"{t or '(no task)'} {n} rows" for t, n in sorted(entry["rows"].items())]
        if entry["failed"]:
            parts.append(f"raised on the variants of {', '.join(entry['failed'])} (not judged there)")
        if entry["not_its_task"]:
            parts.append(f"None on {', '.join(entry['not_its_task'])} (not its task)")
        lines.append(f"  {fname}: " + "; ".join(parts or ["not probed (a reward model, or not callable here)"]))
    return "\n".join(lines)


__all__ = ["FIXES", "KINDS", "cover", "detail", "message", "stalled", "summary"]
