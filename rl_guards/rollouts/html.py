"""The HTML pages rl_guards writes (``rl-guards report``, the audit's ``--html``), built from jinja2 templates
(``rl_guards/rollouts/templates``) with autoescaping: every text from a run is escaped unless the code marks it safe.

One frame (``base.html.j2``: inline CSS, no script, nothing fetched) with the severity colours of
:mod:`rl_guards.core.severity`; ``macros.html.j2`` has the pieces (an SVG chart from its geometry, a severity word,
a rollout cell). Text shown as a block goes through the ``pre`` filter: whitespace visible, special tokens marked, a
lone surrogate shown as ``⟨U+D800⟩``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from rl_guards.core.severity import BACKGROUNDS, COLOURS, LEVELS
from rl_guards.rollouts.render import visible_whitespace

TEMPLATES = Path(__file__).with_name("templates")
SPECIAL_TOKEN = re.compile(r"(&lt;\|[^|<>]{1,40}\|&gt;|&lt;/?think&gt;)")


def pre(text: Any) -> Any:
    """A text block: escaped, whitespace visible, special tokens and think tags marked."""
    from markupsafe import Markup, escape

    escaped = str(escape(visible_whitespace("" if text is None else str(text))))
    return Markup("<pre>" + SPECIAL_TOKEN.sub(r'<span class="tok">\1</span>', escaped) + "</pre>")


@functools.cache
def environment() -> Any:
    """The jinja2 environment of rl_guards' pages: autoescaped, strict about undefined names."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["pre"] = pre
    env.globals.update(colours=COLOURS, backgrounds=BACKGROUNDS, levels=LEVELS)
    return env


def render_page(template: str, **context: Any) -> str:
    """Render ``template`` (a file in ``templates/``) with ``context``."""
    return str(environment().get_template(template).render(**context))


def render_macro(name: str, *args: Any) -> str:
    """One macro of ``macros.html.j2`` rendered on its own (a chart, for a test or another page)."""
    return str(getattr(environment().get_template("macros.html.j2").module, name)(*args))


__all__ = ["TEMPLATES", "environment", "pre", "render_macro", "render_page"]
