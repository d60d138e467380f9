"""Collecting the suite imports no heavy library (tests/helpers/collection.py): each
pytest-xdist worker collects every test module, so one module importing torch at its
top costs every run of ``pytest -m "not mpi"`` seconds, even of tests that never use it."""

from __future__ import annotations

from tests.helpers import collection


def test_collecting_imports_no_heavy_library() -> None:
    found = collection.heavy_imported()
    assert found is not None, "tests/conftest.py did not record what collection imported"
    assert found == [], (f"collecting the tests imported {', '.join(found)}: import it inside "
                         "the tests that use it (pytest.importorskip), not at a module's top")
