"""Everything rl_guards shows on a terminal goes through here: the ``rl_guards`` logger and the one table renderer.

Messages: every module logs to the ``rl_guards`` logger (one message per finding, never a Python warning as well).
:func:`configure` (run on ``import rl_guards``) gives that logger level INFO and a handler of its own that prints
on stderr, the severity word coloured on a terminal, while the application has configured no logging of its own (no
handler on the root logger); once it has, the records reach its handlers only (they propagate), so nothing prints
twice. A line carries its level on the :mod:`severity scale <rl_guards.core.severity>` as ``record.severity``
(``extra={"severity": ...}``).

Tables: :func:`render_table` is the one table renderer (``rich``): cells wrap at word boundaries within the width
(a word longer than its column is folded), colours and a ruled header on a terminal, plain aligned columns
otherwise (a pipe, a file, a log, a finding's message). :func:`side_by_side` puts two texts in two columns.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from rl_guards.core.severity import COLOURS, LEVELS, severity_of

LOGGER_NAME = "rl_guards"
DEFAULT_WIDTH = 120  # columns when the output is no terminal (a pipe, a file, a message)

logger = logging.getLogger(LOGGER_NAME)


# ----- messages --------------------------------------------------------------------------------------------------
class ConsoleHandler(logging.Handler):
    """Prints the ``rl_guards`` logger's records on stderr (looked up at each record, so a redirected stderr is
    honoured) while the root logger has no handler; the severity prefix coloured when stderr is a terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:  # the application shows log records itself (they propagate to it)
            return
        try:
            text = self.format(record)
            stream = sys.stderr
            if _tqdm_bars():  # a progress bar on the terminal: written above it, not through it
                from tqdm import tqdm

                tqdm.write(text, file=stream)
                return
            if is_terminal(stream):
                text = _coloured_head(text, getattr(record, "severity", None) or _level_severity(record.levelno))
            stream.write(text + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def _level_severity(levelno: int) -> str | None:
    if levelno >= logging.ERROR:
        return "blocking"
    if levelno >= logging.WARNING:
        return "warning"
    return None


def _tqdm_bars() -> bool:
    module = sys.modules.get("tqdm")
    bars = getattr(getattr(module, "tqdm", None), "_instances", None)
    try:
        return bool(bars)
    except Exception:
        return False


def _coloured_head(text: str, severity: str | None) -> str:
    """The first line's ``[rl_guards...]`` prefix (and the severity word after it) in the severity's colour."""
    if severity not in LEVELS:
        return text
    head, sep, rest = text.partition("] ")
    if not sep or not head.startswith("[rl_guards"):
        return text
    word = rest.split(":", 1)[0] if rest.split(":", 1)[0] in LEVELS else ""
    red, green, blue = (int(COLOURS[severity][i : i + 2], 16) for i in (1, 3, 5))
    on, off = f"\x1b[1;38;2;{red};{green};{blue}m", "\x1b[0m"
    if word:
        return f"{on}{head}] {word}{off}{rest[len(word) :]}"
    return f"{on}{head}]{off} {rest}"


def configure() -> logging.Logger:
    """Give the ``rl_guards`` logger level INFO (unless set) and its console handler (once); returns it."""
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not any(isinstance(h, ConsoleHandler) for h in logger.handlers):
        handler = ConsoleHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    return logger


def say(message: str, *, severity: str | None = None, level: int | None = None) -> None:
    """Log ``message`` on the ``rl_guards`` logger: at WARNING for a warning, ERROR for blocking, else INFO
    (``level`` overrides: DEBUG for what only verbose mode shows)."""
    if level is None:
        level = {"warning": logging.WARNING, "blocking": logging.ERROR}.get(severity or "", logging.INFO)
    logger.log(level, message, extra={"severity": severity} if severity else None)


@dataclass
class Said:
    """What the ``rl_guards`` logger said inside :func:`capture` (records, and their messages)."""

    records: list[logging.LogRecord]

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]

    def text(self) -> str:
        return "\n".join(self.messages)


class _Collect(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def capture(level: int = logging.WARNING) -> Iterator[Said]:
    """Collect what the ``rl_guards`` logger says at ``level`` or above inside the block (tests, the benchmarks:
    warnings and blocking findings are at WARNING and above)."""
    handler = _Collect(level)
    old_level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    try:
        yield Said(handler.records)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@contextmanager
def quiet(level: int = logging.CRITICAL) -> Iterator[None]:
    """Nothing below ``level`` printed by the ``rl_guards`` logger inside the block (a command that prints the
    same findings itself, as a report)."""
    old_level = logger.level
    logger.setLevel(max(level, old_level))
    try:
        yield
    finally:
        logger.setLevel(old_level)


# ----- tables ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A table column: its header, ``justify`` (``left`` / ``right`` for numbers), whether it may wrap."""

    header: str
    justify: str = "left"
    no_wrap: bool = False
    max_width: int | None = None
    min_width: int | None = None


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) is a terminal that takes colours (and ``NO_COLOR`` is not set)."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty()) and not os.environ.get("NO_COLOR")
    except Exception:
        return False


def width_of(stream: TextIO | None = None) -> int:
    """The terminal's width when ``stream`` is one, else ``COLUMNS`` or :data:`DEFAULT_WIDTH`."""
    if is_terminal(stream):
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return DEFAULT_WIDTH


def _console(width: int, styled: bool) -> Any:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=width,
        force_terminal=styled,
        color_system="truecolor" if styled else None,
        no_color=not styled,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
        soft_wrap=False,
    )


def _export(console: Any, renderable: Any) -> str:
    console.print(renderable)
    text = console.file.getvalue()
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n"))


def render_table(
    columns: Sequence[str | Column],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    width: int | None = None,
    styled: bool | None = None,
    severity_column: int | None = None,
) -> str:
    """The table as text: ``styled`` (default: stdout is a terminal) gives a ruled header and colours; else plain
    aligned columns. ``severity_column``: the index of a column holding a severity word, coloured by it."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    styled = is_terminal() if styled is None else styled
    width = width or width_of()
    cols = [c if isinstance(c, Column) else Column(str(c)) for c in columns]
    table = Table(
        box=box.SIMPLE_HEAD if styled else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold" if styled else None,
        expand=False,
    )
    for c in cols:
        table.add_column(
            c.header,
            justify=c.justify,  # type: ignore[arg-type]
            no_wrap=c.no_wrap,
            overflow="fold",
            max_width=c.max_width,
            min_width=c.min_width,
        )
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            text = Text("" if value is None else str(value))
            if styled and i == severity_column:
                level = severity_of(str(value), default="")
                if level:
                    text.stylize(f"bold {COLOURS[level]}")
            cells.append(text)
        table.add_row(*cells)
    text = _export(_console(width, styled), table)
    if title is None:
        return text
    head = f"\x1b[1m{title}\x1b[0m" if styled else title  # a line of its own: never wrapped to the table's width
    return f"{head}\n{text}"


def side_by_side(
    left: str, right: str, *, width: int | None = None, titles: tuple[str, str] | None = None, styled: bool = False
) -> str:
    """Two texts in two equal columns separated by a rule, each wrapped at word boundaries (line breaks kept)."""
    return two_columns([(left, right)], width=width, titles=titles, styled=styled)


def two_columns(
    rows: Sequence[tuple[str, str]],
    *,
    width: int | None = None,
    titles: tuple[str, str] | None = None,
    styled: bool = False,
) -> str:
    """Pairs of texts in two equal columns (a rule between the columns and between the rows), each wrapped at word
    boundaries, line breaks kept: the same prompt's rollouts at two steps."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    width = width or width_of()
    table = Table(
        box=box.MINIMAL,
        show_header=titles is not None,
        show_edge=False,
        pad_edge=False,
        expand=True,
        show_lines=len(rows) > 1,
        header_style="bold" if styled else None,
    )
    for title in titles or ("", ""):
        table.add_column(title, ratio=1, overflow="fold")
    for left, right in rows:
        table.add_row(Text(left), Text(right))
    return _export(_console(width, styled), table)


def print_table(*args: Any, file: TextIO | None = None, **kwargs: Any) -> None:
    """:func:`render_table` printed on ``file`` (stdout), styled when it is a terminal."""
    stream = sys.stdout if file is None else file
    kwargs.setdefault("styled", is_terminal(stream))
    kwargs.setdefault("width", width_of(stream))
    stream.write(render_table(*args, **kwargs) + "\n")


__all__ = [
    "LOGGER_NAME",
    "Column",
    "ConsoleHandler",
    "Said",
    "capture",
    "configure",
    "is_terminal",
    "print_table",
    "quiet",
    "render_table",
    "say",
    "side_by_side",
    "two_columns",
    "width_of",
]
