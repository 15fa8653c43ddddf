"""The one severity scale, its words and its colours: preflight rows, findings, the status line, the audit, the report.

=============  =========================================================================================
word           meaning
=============  =========================================================================================
``ok``         nothing found (a status, never a finding's severity)
``info``       worth knowing; counted, said only in verbose mode (``console.verbose``)
``warning``    likely wrong: said once, in full, and counted; the run goes on
``blocking``   the run stops (or would stop: preflight, the audit) because it would train on something wrong
=============  =========================================================================================

Words written by older versions (``error`` for a finding that stopped the run, the audit's ``block`` / ``warn``)
are read as the words above (:func:`severity_of`). The colours are used on a terminal (``rich`` styles) and in the
HTML report alike.
"""

from __future__ import annotations

from collections.abc import Iterable

OK = "ok"
INFO = "info"
WARNING = "warning"
BLOCKING = "blocking"
SEVERITIES: tuple[str, ...] = (INFO, WARNING, BLOCKING)  # least to most severe
LEVELS: tuple[str, ...] = (OK, *SEVERITIES)  # a status: ok, or the most severe finding's severity

# one colour per level, for terminals (rich accepts hex colours) and the HTML report
COLOURS: dict[str, str] = {OK: "#2e7d32", INFO: "#1565c0", WARNING: "#b26a00", BLOCKING: "#c62828"}
# a light background of the same hue, for table rows in the report
BACKGROUNDS: dict[str, str] = {OK: "#e8f5e9", INFO: "#e3ecf7", WARNING: "#ffe8a8", BLOCKING: "#f8c9cf"}

_OLD_WORDS = {"error": BLOCKING, "block": BLOCKING, "warn": WARNING}


def severity_of(word: object, default: str = WARNING) -> str:
    """``word`` as a level of the scale (older words mapped); ``default`` for anything else."""
    if isinstance(word, str):
        word = word.strip().lower()
        if word in LEVELS:
            return word
        if word in _OLD_WORDS:
            return _OLD_WORDS[word]
    return default


def rank(severity: str) -> int:
    """Position on the scale: ok 0, info 1, warning 2, blocking 3."""
    return LEVELS.index(severity_of(severity))


def worst(severities: Iterable[str]) -> str:
    """The most severe of ``severities``; ``ok`` when there are none."""
    return max((severity_of(s) for s in severities), key=rank, default=OK)


def mode_severity(mode: str) -> str:
    """The severity of a violation in a guard's ``mode``: raise stops (blocking), warn warns, log only counts."""
    return {"raise": BLOCKING, "warn": WARNING}.get(mode, INFO)


__all__ = [
    "BACKGROUNDS",
    "BLOCKING",
    "COLOURS",
    "INFO",
    "LEVELS",
    "OK",
    "SEVERITIES",
    "WARNING",
    "mode_severity",
    "rank",
    "severity_of",
    "worst",
]
