"""Data-parallel training over an MPI communicator (gradients averaged with Allreduce)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_mpi


@pytest.mark.parametrize("ranks", [2])
def test_data_parallel_keeps_ranks_in_step(ranks):
    script = Path(__file__).with_name("mpi_dataparallel.py")
    done = run_mpi(ranks, [str(script)], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout
