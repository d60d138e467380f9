"""Under mpiexec: workers learn their study from the search; a worker whose function
cannot be loaded ends the job with one line before any trial is charged an attempt; a
results database that cannot be written ends it with one line too, and the rerun
resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import diel.results
from tests.helpers.launch import REPO, find_mpiexec, run_diel
from tests.helpers.search import GRID, trained, trials, workflow

pytestmark = pytest.mark.mpi


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """The lines of a job's output that report a failure (the one line, and anything
    that should not be there: tracebacks, CRITICAL or ERROR log lines)."""
    return [line for line in (result.stdout + result.stderr).splitlines()
            if "error" in line.lower() or "Traceback" in line or "CRITICAL" in line]


def test_a_study_set_only_on_the_search_reaches_its_workers(tmp_path):
    path = workflow(tmp_path, GRID + "\n      study: mine")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    with diel.results.open(tmp_path / "wf.db") as results:
        assert [s["name"] for s in results.studies()] == ["mine"]
        rows = results.trials(study="mine")
    assert len(rows) == 12 and {row["status"] for row in rows} == {"ok"}
    for row in rows:   # each started when a worker took it, after its dispatch
        assert row["started_at"] is not None and row["started_at"] <= row["finished_at"]


def test_the_workflow_name_names_the_default_study_and_database(tmp_path):
    """``name:`` in the workflow file names the study and the database, on the master
    and on the workers, as diel validate checks them."""
    path = workflow(tmp_path, GRID)
    path.write_text("name: renamed\n" + path.read_text())
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "wf.db").exists()
    with diel.results.open(tmp_path / "renamed.db") as results:
        assert [s["name"] for s in results.studies()] == ["renamed"]
        assert len(results.trials(study="renamed", status="ok")) == 12


FIXED = textwrap.dedent("""\
    def objective(trial):
        trial.report(1, accuracy=trial.params["x"] / 10)
        return {"accuracy": trial.params["x"] / 10, "loss": 0.5}
    """)
BROKEN = "raise ImportError(\"No module named 'torchh' (planted)\")\n" + FIXED  # validates


def test_a_function_that_cannot_be_loaded_ends_the_job_with_one_line(tmp_path):
    (tmp_path / "train.py").write_text(BROKEN)
    path = workflow(tmp_path, GRID, function="train.py:objective")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 2, result.stderr
    assert error_lines(result) == [
        f"diel: error: {path}: modules.trainer.settings.run: cannot load the trial function "
        "train.py:objective: ImportError: No module named 'torchh' (planted) (at train.py:1)"]
    if (tmp_path / "wf.db").exists():   # no trial was charged an attempt
        assert [row for row in trials(tmp_path) if row["attempts"] > 0] == []
    (tmp_path / "train.py").write_text(FIXED)
    again = run_diel("run", str(path), n=4, timeout=120)
    assert again.returncode == 0, again.stderr
    rows = trials(tmp_path)
    assert len(rows) == 12 and {(row["status"], row["attempts"]) for row in rows} == {("ok", 1)}


def test_a_database_that_cannot_be_written_ends_the_job_with_one_line(tmp_path):
    """The executive's side of a full disk: whatever module raises DatabaseUnwritable,
    the job ends with its one line and exit status 1 (tests/search/test_master.py has
    the store's and the master's side; the real full disk is below)."""
    path = tmp_path / "full.yaml"
    path.write_text("modules:\n  full:\n    function: tests.search.probe_workers:disk_full\n")
    result = run_diel("run", str(path), n=1, timeout=60)
    assert result.returncode == 1, result.stderr
    assert error_lines(result) == ["diel: error: the results database /x/wf.db could not be "
                                   "written: disk full (or quota exceeded); nothing finished is "
                                   "lost: free space and run the same command again to resume"]


def mounted(folder: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` on ``folder``; False where this process may not."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0


def fill(folder: Path) -> Path:
    """Write a file until ``folder``'s file system is full; return it."""
    filler = folder / "filler"
    block = b"\0" * 65536
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, block):
            pass
    except OSError:   # ENOSPC: full
        pass
    finally:
        os.close(descriptor)
    return filler


@pytest.mark.slow
def test_a_full_disk_under_the_database_ends_in_one_line_and_the_rerun_resumes(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not mounted(disk, "4m"):
        pytest.skip("needs root and the right to mount a tmpfs (a small full file system)")
    job = None
    try:
        database = disk / "wf.db"
        path = workflow(tmp_path, GRID + f"\n      database: '{database}'",
                        worker="      sleep: 0.5")
        job = subprocess.Popen([find_mpiexec(), "-n", "4", sys.executable, "-m", "diel", "run",
                                str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_finished(database)) < 4:
            time.sleep(0.1)
        finished = _finished(database)
        filler = fill(disk)   # while the search runs: its next write finds the disk full
        out, err = job.communicate(timeout=120)
        assert 4 <= len(finished) < 12, "the disk should fill up midway"
        result = subprocess.CompletedProcess(job.args, job.returncode, out, err)
        assert result.returncode == 1, err
        assert error_lines(result) == [
            f"diel: error: the results database {database} could not be written: disk full (or "
            "quota exceeded); nothing finished is lost: free space and run the same command "
            "again to resume"]
        assert finished <= _finished(database)   # every trial committed before is there
        trained_before = len(trained(tmp_path))
        filler.unlink()
        again = run_diel("run", str(path), n=4, timeout=120)
        assert again.returncode == 0, again.stderr
        rows = trials(tmp_path, f"sqlite:///{database}")
        assert sorted((row["params"]["x"], row["params"]["y"]) for row in rows) == \
            [(x, y) for x in range(6) for y in (-1, 1)]
        assert {row["status"] for row in rows} == {"ok"}
        retrained = {json.dumps(p, sort_keys=True) for p in trained(tmp_path)[trained_before:]}
        assert not retrained & finished   # the rerun resumed: nothing finished ran again
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _finished(database: Path) -> set[str]:
    """The params of the ok trials of the search at ``database`` (none before it exists)."""
    try:
        with diel.results.open(database) as results:
            return {json.dumps(row["params"], sort_keys=True)
                    for row in results.trials(status="ok")}
    except Exception:  # noqa: BLE001 - not created yet, or being created
        return set()
