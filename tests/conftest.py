"""What every test shares: the throwaway PostgreSQL server's fixtures
(tests/helpers/postgres.py), the record of the running test that lets helpers check
its markers (tests/helpers/markers.py), one pytest-xdist group for the MPI tests, the
record of the heavy libraries collection imported (tests/helpers/collection.py), and
``tmp_path`` in memory where the machine has room there."""

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

import shutil

import pytest

from tests.helpers import collection, markers

pytest_plugins = ["tests.helpers.postgres", "tests.helpers.gc_freeze"]

MEMORY_TEMP = "/dev/shm"
MEMORY_TEMP_FREE = 2 << 30   # what a session's folders need, with room to spare


def pytest_configure(config: pytest.Config) -> None:
    """Put the tests' temporary folders (``tmp_path``) in memory, on ``/dev/shm``'s
    tmpfs, where it has room (a container's default 64 MiB has not): the hundreds of
    SQLite databases the tests make each wait for some ten fsyncs on a disk, 4-12 ms
    each on this machine, seconds of a run; tmpfs has nothing to wait for. The code
    under test runs as it does on a disk. A ``PYTEST_DEBUG_TEMPROOT`` of one's own
    (pytest's variable for this) is left as it is; pytest-xdist's workers get their
    folders from the main process, which sets it first."""
    try:
        roomy = shutil.disk_usage(MEMORY_TEMP).free >= MEMORY_TEMP_FREE
    except OSError:   # no /dev/shm
        roomy = False
    if roomy and os.access(MEMORY_TEMP, os.W_OK):
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", MEMORY_TEMP)


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
