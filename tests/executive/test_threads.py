"""Ranks on one node split its cores: BLAS threads per rank = cores // ranks (at least 1),
whether the launcher tells each rank its place on the node before MPI starts (Hydra's
MPI_LOCALRANKID, MPI_LOCALNRANKS) or the ranks find it together once it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.launch import REPO, find_mpiexec

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks, launcher", [(1, "hydra"), (3, "hydra"), (3, "no place")])
def test_blas_threads_split_the_cores(tmp_path, ranks, launcher):
    path = tmp_path / "threads.yaml"
    path.write_text(f"modules:\n  probe: {{function: 'tests.executive.probes:record_threads', "
                    f"size: {ranks}, settings: {{out: '{tmp_path}'}}}}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    # "no place": each rank's environment without Hydra's node place (share_node's collective)
    hidden = ["env", "-u", "MPI_LOCALRANKID", "-u", "MPI_LOCALNRANKS"] if launcher != "hydra" else []
    done = subprocess.run([find_mpiexec(), "-n", str(ranks), *hidden, sys.executable, "-m", "diel",
                           "run", str(path)], capture_output=True, text=True, timeout=60, env=env,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    expected = max(1, len(os.sched_getaffinity(0)) // ranks)
    views = [json.loads((tmp_path / f"threads{r}.json").read_text()) for r in range(ranks)]
    assert sorted(v["local_rank"] for v in views) == list(range(ranks))
    for view in views:
        assert view["threads"] == expected
        assert view["omp"] == view["openblas"] == str(expected)
        assert view["local_size"] == ranks


def test_a_thread_count_the_user_set_is_kept(tmp_path):
    path = tmp_path / "threads.yaml"
    path.write_text(f"modules:\n  probe: {{function: 'tests.executive.probes:record_threads', "
                    f"size: 2, settings: {{out: '{tmp_path}'}}}}\n")
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    done = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", "diel", "run",
                           str(path)], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    view = json.loads((tmp_path / "threads0.json").read_text())
    assert view["threads"] == 3 and view["omp"] == view["openblas"] == "3"
