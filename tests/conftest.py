"""What every test shares: the throwaway PostgreSQL server's fixtures
(tests/helpers/postgres.py), the record of the running test that lets helpers check
its markers (tests/helpers/markers.py), one pytest-xdist group for the MPI tests, and
the record of the heavy libraries collection imported (tests/helpers/collection.py)."""

from __future__ import annotations

import os
from typing import Generator

if "PYTEST_XDIST_WORKER" in os.environ:   # before anything loads NumPy
    # Each worker is one of a core's worth of workers: BLAS thread pools of their own
    # would fight over the cores (OpenBLAS threads spin while they wait). NumPy's BLAS
    # reads its thread count once, as it loads; the variables are taken back then, so
    # that the programs tests start see the environment the suite was started with.
    _one_thread = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                          "MKL_NUM_THREADS") if name not in os.environ}
    os.environ.update(_one_thread)
    import numpy  # noqa: E402, F401 - loads the BLAS with one thread
    for _name in _one_thread:
        del os.environ[_name]

import pytest

from tests.helpers import collection, markers

pytest_plugins = ["tests.helpers.postgres", "tests.helpers.gc_freeze"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Record ``item`` while it runs (session fixtures it sets up included)."""
    markers.set_running(item)
    try:
        return (yield)
    finally:
        markers.set_running(None)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    """Every test marked ``mpi`` joins one xdist group, so that under ``-n`` (the default,
    see pyproject.toml) they run one after the other on one worker: an MPI job fills the
    cores it is given, and two at once would time each other out. The marks are added
    before pytest-xdist reads them; its group names are mended after (see below)."""
    for item in items:
        if item.get_closest_marker("mpi") is not None:
            item.add_marker(pytest.mark.xdist_group("mpi"))
    yield
    if getattr(config.option, "loadgroup", False):
        _name_groups(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Record the heavy libraries that importing the test modules brought in."""
    collection.record()


def _name_groups(items: list[pytest.Item]) -> None:
    """Give each test of an xdist group the ``@group`` suffix on its node id that the
    scheduler groups by. pytest-xdist 3.8 writes it to ``item._nodeid``, which pytest 9.2's
    structured node ids no longer read, so every group was silently ignored (the MPI tests
    ran two at once; pytest-xdist issue 1386). Nothing to do where xdist's suffix took."""
    for item in items:
        names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                 for mark in item.iter_markers("xdist_group")}
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = type(item._id).parse(item.nodeid + suffix)
