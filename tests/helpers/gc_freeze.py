"""Full garbage collections that skip the libraries the tests imported (a pytest plugin,
named in tests/conftest.py).

A full collection walks every object the garbage collector tracks, and a worker that
has imported torch, Optuna and SQLAlchemy holds some 400,000 of them: each of the
memory tests' ``gc.collect()`` calls (tests/checkpoints, tests/tuplespace/test_memfiles,
tests/trainer/test_offload) and each automatic one took 0.3-0.9 s on a loaded machine,
6-10 s a worker over those tests. So after a test that imported a library of some size
(:data:`NEW_MODULES` modules or more since the last time), the garbage is collected and
every object left is moved to the permanent generation (:func:`gc.freeze`), which later
collections do not walk: 2-3 s a worker instead. Only what is alive between two tests is
frozen, after a collection, so no garbage a test left is kept from the collections that
follow. A frozen object is still freed when nothing refers to it; only a reference cycle
among frozen objects (a module-scoped fixture's, say, once torn down) would now last
until the worker exits.
"""

from __future__ import annotations

import gc
import sys
from typing import Generator

import pytest

NEW_MODULES = 100   # imported since the last freeze: a library of some size came in

_frozen_at = {"modules": 0}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Run ``item``, then freeze what stays alive if a library of some size came in."""
    try:
        return (yield)
    finally:
        if len(sys.modules) - _frozen_at["modules"] >= NEW_MODULES:
            gc.collect()
            gc.freeze()
            _frozen_at["modules"] = len(sys.modules)
