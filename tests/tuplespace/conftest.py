"""Fixtures for the tuple-space tests: in-process spaces, and the MPI contract run."""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.helpers.launch import run_mpi
from tests.helpers.tuplespace import InProcSpace


@pytest.fixture
def inproc() -> Iterator[InProcSpace]:
    space = InProcSpace()
    yield space
    if any(t.is_alive() for t in space.threads):
        space.stop()


@pytest.fixture(scope="session")
def mpi_contract_results() -> dict:
    proc = run_mpi(5, ["tests/tuplespace/mpi_contracts.py"], timeout=90)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"MPI contract run failed (rc={proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULTS "):])
