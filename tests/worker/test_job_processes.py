"""Under mpiexec: a job whose trials start processes of their own ends right after its
last trial, or at once when interrupted, and leaves none of them running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.launch import REPO, find_mpiexec, run_diel
from tests.helpers.worker import noted, running, trials, wait_until, workflow

pytestmark = pytest.mark.mpi

SPACE = "{n: {values: [1, 2, 3]}}"


@pytest.mark.parametrize("worker", [
    "{run: behaviours.py:family, grace: 1, params: {pids: PIDS}}",
    f"{{command: [{sys.executable}, behaviours.py, PIDS, return], grace: 1}}",
])
def test_a_job_whose_trials_leave_processes_running_ends_right_after_its_last_trial(
        tmp_path, worker):
    """Each trial leaves a sleep holding the job's stdout, an orphaned sleep and a process
    that ignores SIGTERM: before, mpiexec waited for them (600 s)."""
    pids = tmp_path / "pids"
    path = workflow(tmp_path, worker.replace("PIDS", f"'{pids}'"), SPACE, copies=1)
    started = time.monotonic()
    result = run_diel("run", str(path), n=3, timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert [row["status"] for row in trials(tmp_path / "wf.db")] == ["ok"] * 3
    assert len(noted(pids)) == 3 * 4 and running(noted(pids)) == []
    assert took < 60, f"the job took {took:.1f} s"


def test_an_interrupted_job_ends_its_running_trial_and_every_process_it_started(tmp_path):
    pids = tmp_path / "pids"
    path = workflow(tmp_path, f"{{run: behaviours.py:family, grace: 1, params: {{pids: '{pids}', "
                              "end: hang}}", SPACE, copies=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    job = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, "-m", "diel", "run",
                            str(path)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_until(lambda: pids.exists() and pids.read_text().endswith("\n"), 60)
        job.send_signal(signal.SIGINT)   # what Ctrl-C does to mpiexec
        _, stderr = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 130, stderr[-3000:]
    assert running(noted(pids)) == []
