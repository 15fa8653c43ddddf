"""Everything under tests/distributed launches several processes (torchrun / gloo): the whole folder is ``slow``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The hook sees the whole session's items: mark only the ones collected from this folder.
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
