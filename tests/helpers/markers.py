"""Which test is running, so that a helper that needs a resource (mpiexec, the throwaway
PostgreSQL server, a browser) can check that the test carries the marker saying so.

The markers are registered in pyproject.toml; tests/conftest.py records the running test.
A test that launches mpiexec without ``@pytest.mark.mpi`` fails, rather than slipping
into ``pytest -m "not mpi"`` and making it slow.
"""

from __future__ import annotations

import pytest

_running: dict[str, pytest.Item | None] = {"item": None}


def set_running(item: pytest.Item | None) -> None:
    """Record ``item`` as the test being run (its setup, call and teardown); None after."""
    _running["item"] = item


def require(marker: str, needs: str) -> None:
    """Fail the running test unless it is marked ``marker``; ``needs`` says what it used.
    Outside a pytest run (a benchmark using a helper) there is nothing to check."""
    item = _running["item"]
    if item is not None and item.get_closest_marker(marker) is None:
        pytest.fail(f"{item.nodeid} {needs} but is not marked @pytest.mark.{marker} "
                    f"(pyproject.toml lists the markers)", pytrace=False)
