"""A wall-time stop as a cluster job meets it: SIGUSR1 sent to ``mpiexec`` mid-search
(what ``sbatch --signal=B:USR1@300`` has the batch script pass on) ends the job in
seconds with one line and status 75, its running trials ``paused`` with durable
checkpoints; the same command then finishes the study without training an epoch twice.
And ``--stop-after`` stops it on its own."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from diel.executive.walltime import STOPPED_STATUS
from diel.results import get_storage
from tests.helpers.launch import run_diel
from tests.helpers.search import kill_job, quiet, start_job, trials, workflow

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SEARCH = """\
      strategy: grid
      space:
        x: {range: [0, 5], step: 1}
      objective: accuracy
      progress_interval: 3600
      stop_grace: 30"""
WORKER = "      pace: 0.3\n      epochs: 8"
FUNCTION = "tests.search.probe_checkpoints:resumable"


def epochs_trained(tmp_path: Path) -> list[tuple[int, int]]:
    """The (x, epoch) of every epoch the trials trained, in order."""
    log = tmp_path / "trained.log"
    return [(d["x"], d["epoch"]) for d in map(json.loads, log.read_text().splitlines())] \
        if log.exists() else []


def wait_for_epochs(tmp_path: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(epochs_trained(tmp_path)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} epochs within {timeout} s"
        time.sleep(0.05)


def check_paused_then_finished(tmp_path: Path, path: Path, output: str,
                               some_paused: bool = True) -> None:
    """The stopped job's one line and paused trials (some, when ``some_paused``); the
    rerun finishes every trial, training each epoch once."""
    quiet(output)
    assert output.count("diel: ") == 1, output
    paused = [row for row in trials(tmp_path) if row["status"] == "paused"]
    assert paused or not some_paused, trials(tmp_path)
    assert all(row["attempts"] == 0 for row in paused), trials(tmp_path)
    store = get_storage(f"sqlite:///{tmp_path / 'wf.db'}")
    try:
        steps = {row["number"]: store.checkpoints("wf", row["number"]) for row in paused}
    finally:
        store.close()
    assert all(kept and Path(kept[0].path).is_file() for kept in steps.values()), steps
    count = len(paused)
    assert f"{count} trial{'' if count == 1 else 's'} paused with " \
           f"{'a checkpoint' if count == 1 else 'checkpoints'}; run the same command to " \
           "resume\n" in output, output

    resumed = run_diel("run", str(path), n=4, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert {row["status"] for row in trials(tmp_path)} == {"ok"} and len(trials(tmp_path)) == 6
    twice = [key for key, n in Counter(epochs_trained(tmp_path)).items() if n > 1]
    assert not twice, f"epochs trained twice: {twice}"
    assert len(epochs_trained(tmp_path)) == 6 * 8


def test_sigusr1_pauses_the_search_in_seconds_and_the_rerun_finishes_it(tmp_path):
    path = workflow(tmp_path, SEARCH, WORKER, function=FUNCTION)
    job = start_job(path, tmp_path / "job.out")
    try:
        wait_for_epochs(tmp_path, 3)
        job.send_signal(signal.SIGUSR1)
        sent = time.monotonic()
        assert job.wait(timeout=30) == STOPPED_STATUS
        assert time.monotonic() - sent < 10, "the stop took more than seconds"
    finally:
        if job.poll() is None:
            kill_job(job, path)
    output = (tmp_path / "job.out").read_text()
    assert "diel: stopped at the wall-time limit: " in output, output
    check_paused_then_finished(tmp_path, path, output)


def test_stop_after_stops_the_search_on_its_own(tmp_path):
    """The deadline counts from the job's start, so on a loaded machine it may come
    before a trial has started: whether any paused is not checked here (SIGUSR1's test
    checks that), the rest is."""
    path = workflow(tmp_path, SEARCH, WORKER.replace("0.3", "0.5"), function=FUNCTION)
    stopped = run_diel("run", "--stop-after", "8s", str(path), n=4, timeout=120)
    assert stopped.returncode == STOPPED_STATUS, stopped.stderr
    assert "diel: stopped at --stop-after 8s: " in stopped.stderr, stopped.stderr
    check_paused_then_finished(tmp_path, path, stopped.stdout + stopped.stderr,
                               some_paused=False)
