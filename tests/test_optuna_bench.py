"""The Optuna benchmark (benchmarks/optuna_bench.py): its quick run prints both tables,
with diel's and Optuna's rows, and the suggest round trip of both strategies."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.helpers.launch import REPO

# looked for, not imported: collecting this file (every run of the suite does, on every
# worker) would otherwise import scikit-learn, ~1 s of CPU, for an MPI test
pytestmark = [
    pytest.mark.skipif(find_spec("sklearn") is None,
                       reason="the benchmark's objective needs scikit-learn"),
    pytest.mark.skipif(find_spec("optuna") is None, reason="the benchmark compares with Optuna")]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_quick_run_prints_both_tables():
    done = subprocess.run([sys.executable, "benchmarks/optuna_bench.py", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "20 trials, 4 workers, TPE with median pruning, median of 1." in out
    assert "| **diel** " in out and "one `JournalStorage` (`JournalFileBackend`) |" in out
    assert "than Optuna from launch to exit." in out
    assert "| `random` | " in out and "| `tpe` | " in out
