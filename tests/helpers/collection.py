"""What collecting the tests imported. Every pytest-xdist worker collects the whole suite
before it runs a test, so a library a test module imports at its top is paid for by each
worker (torch alone: seconds of CPU), whether or not a test of it runs there. The heavy
libraries are imported inside the tests that use them. tests/conftest.py records which
of them collection imported; tests/test_collection.py checks that none was."""

from __future__ import annotations

import sys

HEAVY = ("torch", "matplotlib", "sklearn", "optuna", "scipy")
_recorded: dict[str, list[str] | None] = {"heavy": None}


def record() -> None:
    """Note the heavy libraries imported so far (called when collection ends)."""
    _recorded["heavy"] = [name for name in HEAVY if name in sys.modules]


def heavy_imported() -> list[str] | None:
    """The heavy libraries collection imported; None before :func:`record`."""
    return _recorded["heavy"]
