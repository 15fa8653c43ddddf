"""``rl-guards config [SECTION] [--yaml]``: every guard field with its default and what it does, generated from
:class:`~rl_guards.config.GuardsConfig` (the comment that documents each field in ``rl_guards/config.py``).

::

    rl-guards config                 # every section: field, default, meaning
    rl-guards config drift           # one section
    rl-guards config --yaml          # the defaults as a commented guards.yaml to start from

Set a field with a ``guards:`` section in the ``trl grpo`` YAML, ``--guards_config guards.yaml`` or
``--guards_set section.field=value``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from rl_guards.cli.help import plain


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="every guard field with its default and what it does (guards.yaml, --guards_set)",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("section", nargs="?", default=None, help="one section, e.g. drift (default: all)")
    parser.add_argument("--yaml", action="store_true", help="print the defaults as a commented guards.yaml")
    parser.set_defaults(func=run)


def _value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def run(args: argparse.Namespace) -> int:
    from rl_guards.config import GuardsConfig, field_docs, section_doc
    from rl_guards.console import Column, print_table

    sections = [f.name for f in dataclasses.fields(GuardsConfig)]
    if args.section is not None and args.section not in sections:
        print(f"rl-guards config: no section {args.section!r}; sections: {', '.join(sections)}", file=sys.stderr)
        return 2
    docs = field_docs(args.section)
    shown = [s for s in sections if args.section in (None, s)]
    if args.yaml:
        for section in shown:
            print(f"{section}:  # {section_doc(section)}")
            for d in (d for d in docs if d.section == section):
                print(f"  {d.name}: {_value(d.default)}  # {d.doc}" if d.doc else f"  {d.name}: {_value(d.default)}")
        return 0
    for i, section in enumerate(shown):
        rows = [[f"{d.section}.{d.name}", _value(d.default), d.doc] for d in docs if d.section == section]
        if i:
            print()
        print_table([Column("field", no_wrap=True), Column("default", max_width=24), "meaning"], rows,
                    title=f"{section}: {section_doc(section)}")  # fmt: skip
    print("\nset them in a guards: section of the trl grpo YAML, --guards_config FILE or --guards_set S.FIELD=VALUE")
    return 0
