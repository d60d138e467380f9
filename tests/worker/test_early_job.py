"""Under mpiexec: an isolated worker's first trial child is forked before MPI starts
(:mod:`diel.worker.early`) and runs with the environment the rank computes afterwards;
a workflow with a mistake leaves no such child behind."""

from __future__ import annotations

import pytest

from tests.helpers.launch import left_behind, run_diel, run_mpi
from tests.helpers.worker import trials

pytestmark = pytest.mark.mpi

TRIAL = """\
import gc
import os
import sys


def objective(trial):
    return {"accuracy": 1.0, "mpi_loaded": "libmpi" in open("/proc/self/maps").read(),
            "started": "diel.worker.child" in open("/proc/self/cmdline").read(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "local_rank": os.environ.get("DIEL_LOCAL_RANK"),
            "launcher": any(name.startswith("PMI_") for name in os.environ),
            "collects": gc.isenabled()}
"""

WORKFLOW = """
modules:
  space: {function: tuplespace}
  search: {function: search, settings: {strategy: grid, space: {n: {values: [1, 2, 3, 4]}},
                                        objective: accuracy, progress_interval: 3600,
                                        workers: worker}}
  worker: {function: worker, copies: 2, settings: {run: "trial.py:objective"}}
"""


def test_the_first_trial_child_is_forked_before_mpi_starts(tmp_path):
    (tmp_path / "trial.py").write_text(TRIAL)
    (tmp_path / "wf.yaml").write_text(WORKFLOW + "services: [space]\n")
    result = run_diel("run", str(tmp_path / "wf.yaml"), n=4, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = trials(tmp_path / "wf.db")
    assert len(rows) == 4 and {row["status"] for row in rows} == {"ok"}
    for row in rows:
        metrics = row["metrics"]
        assert not metrics["mpi_loaded"] and not metrics["started"]   # forked before MPI
        assert metrics["threads"] and metrics["local_rank"] in ("2", "3")
        assert not metrics["launcher"]
        assert metrics["collects"]   # forked while the rank started with the collector off


def test_a_workflow_with_a_mistake_leaves_no_forked_child(tmp_path):
    """The worker ranks fork their child (their own module is right), then the check of
    the workflow's shape, made on every rank, fails: the child ends, quietly."""
    (tmp_path / "trial.py").write_text(TRIAL)
    (tmp_path / "wf.yaml").write_text(WORKFLOW)   # the tuple space is not a service
    marker = f"DIEL_EARLY_TEST={tmp_path}"
    result = run_mpi(4, ["-m", "diel", "run", str(tmp_path / "wf.yaml")],
                     env={"DIEL_EARLY_TEST": str(tmp_path)})
    assert result.returncode == 2, result.stderr[-3000:]
    assert "must be listed under 'services'" in result.stderr
    assert "Traceback" not in result.stderr
    assert left_behind(marker) == []
