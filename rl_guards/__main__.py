"""``python -m rl_guards``: the ``rl-guards`` command line (:mod:`rl_guards.cli.main`)."""

from __future__ import annotations

import sys

from rl_guards.cli.main import console_main

if __name__ == "__main__":
    sys.exit(console_main())
