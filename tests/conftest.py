"""What every test shares: the throwaway PostgreSQL server's fixtures
(tests/helpers/postgres.py), and the record of the running test that lets helpers check
its markers (tests/helpers/markers.py)."""

from __future__ import annotations

from typing import Generator

import pytest

from tests.helpers import markers

pytest_plugins = ["tests.helpers.postgres"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Record ``item`` while it runs (session fixtures it sets up included)."""
    markers.set_running(item)
    try:
        return (yield)
    finally:
        markers.set_running(None)
