"""Resuming a study safely: one run a study (the lease), what may change between runs,
and interrupts as normal events. First with an in-memory tuple space and worker threads
(on the in-memory results store; what ``diel results`` and ``diel studies`` read after a
rescore, on SQLite), then as a user meets them: real ``mpiexec`` jobs, signals sent to
mpiexec."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import diel.results
from diel.errors import ConfigError, ResultsError, StudyBusy
from diel.executive.interrupts import Interrupted, deferred
from diel.results import MemoryStorage, Storage, get_storage
from diel.search import parse_settings, run_search
from diel.search.protocol import task_tag
from diel.worker.inprocess import InProcessRunner
from diel.worker.serve import serve_tasks
from tests.helpers.fakespace import EMPTY, FakeSpace
from tests.helpers.launch import run_diel, run_diel_in_process
from tests.helpers.search import (GRID, kill_job, quiet, start_job, trained, trials,
                                  wait_for_ok, workflow)

SPACE = {"x": {"range": [0, 5], "step": 1}}
PATH = "modules.search.settings"


def score(trial) -> dict:
    """Accuracy is best at x=5, loss at x=2: the two objectives rank trials differently."""
    x = trial.params["x"]
    time.sleep(float(trial.params.get("sleep", 0)))
    trial.report(1, accuracy=x / 20)
    return {"accuracy": x / 10, "loss": (x - 2) ** 2 / 10 + 0.1}


def search(database: Storage | str, settings: dict, workers: int = 2, **kwargs):
    """A search of study ``s`` over a fake space, served by worker threads, on the store
    ``database`` names; when it ends with an exception (an interrupt) the test stops the
    workers itself."""
    space = FakeSpace()
    threads = [threading.Thread(target=serve_tasks, daemon=True,
                                args=(space, "s", copy, InProcessRunner(score)))
               for copy in range(workers)]
    for thread in threads:
        thread.start()
    store = get_storage(database)
    try:
        return run_search(space, parse_settings({"space": SPACE, **settings}, "search"), store,
                          workers, study="s", out=io.StringIO(), poll=0.05, path=PATH, **kwargs)
    finally:
        store.close()
        while space.try_tget(task_tag("s")) is not EMPTY:
            pass
        for _ in range(workers):
            space.tput(task_tag("s"), None)
        for thread in threads:
            thread.join(timeout=10)


def rows(database: Storage | str) -> list[dict]:
    """The trials of study ``s``, by number, as the store gives them back."""
    store = get_storage(database)
    try:
        return store.trials("s")
    finally:
        store.close()


def cli(*args: str) -> list[dict]:
    """``diel ARGS --format json`` (no MPI; its entry point in process), parsed."""
    done = run_diel_in_process(*args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def url(tmp_path) -> str:
    """A SQLite database, for the tests that read it with ``diel results`` and
    ``diel studies``."""
    return f"sqlite:///{tmp_path / 'wf.db'}"


@pytest.fixture
def store() -> MemoryStorage:
    return MemoryStorage()


def test_a_new_objective_reranks_every_stored_trial(url, tmp_path, caplog):
    search(url, {})
    assert cli("studies", str(tmp_path / "wf.db"))[0]["best"] == 0.5   # accuracy of x=5
    with caplog.at_level("INFO", logger="diel.search"):
        summary = search(url, {"objective": "-loss"})
    assert "study s: objective changed from 'accuracy' (maximize) to '-loss' (maximize); " \
           "recomputed the objective of 6 stored trial(s) from their metrics" in caplog.text
    assert summary.stats.done == 6 and summary.best[0]["params"] == {"x": 2}
    [study] = cli("studies", str(tmp_path / "wf.db"))
    assert (study["objective"], study["direction"], study["best"]) == ("-loss", "maximize", -0.1)
    top = cli("results", str(tmp_path / "wf.db"), "--top", "6")
    assert [t["params"]["x"] for t in top][:3] in ([2, 1, 3], [2, 3, 1])
    assert all(t["objective"] == pytest.approx(-t["loss"]) for t in top)

    with caplog.at_level("INFO", logger="diel.search"):
        search(url, {"objective": "-loss", "direction": "minimize"})
    assert "study s: direction changed from maximize to minimize" in caplog.text
    [study] = cli("studies", str(tmp_path / "wf.db"))
    assert (study["direction"], study["best"]) == ("minimize", pytest.approx(-1.0))  # x=5


def test_a_metric_the_new_objective_lacks_leaves_no_objective(url, caplog):
    search(url, {})
    with caplog.at_level("INFO", logger="diel.search"):
        search(url, {"objective": "f1", "metrics": ["f1"]})
    assert "(6 lack a metric it needs: no objective)" in caplog.text
    assert {t["objective"] for t in rows(url)} == {None}
    with diel.results.open(url) as results:
        assert results.studies()[0]["best"] is None   # never a best of the old objective


@pytest.mark.parametrize("change, key, words", [
    ({"strategy": "random", "max_trials": 8}, "strategy",
     "study 's' was run with strategy grid, not random"),
    ({"space": {"x": {"range": [0, 3], "step": 1}}}, "space",
     "study 's' has 2 trial(s) outside this space, e.g. trial 4 (x=4): x=4 is not among its "
     "range points"),
    ({"space": {**SPACE, "y": {"values": [1, 2]}}}, "space", "the space adds y"),
])
def test_a_changed_search_is_refused_and_nothing_is_written(store, change, key, words):
    search(store, {"objective": "-loss"})
    before = rows(store)
    with pytest.raises(ConfigError) as info:
        search(store, change)
    assert info.value.path == f"{PATH}.{key}"
    assert words in info.value.message
    assert info.value.message.endswith(f"give this run a study of its own ({PATH}.study)")
    assert rows(store) == before
    study = store.study("s")
    assert (study["strategy"], study["objective"]) == ("grid", "-loss")
    search(store, {"objective": "-loss"})   # the lease was given back


def test_a_grown_space_goes_on(store):
    search(store, {})
    search(store, {"space": {"x": {"range": [0, 7], "step": 1}}})
    assert [t["params"]["x"] for t in rows(store)] == list(range(8))


def test_a_study_held_by_another_run_is_refused(store):
    lease = store.acquire_lease("s")   # another run's, in the same store
    try:
        with pytest.raises(StudyBusy, match=rf"pid {os.getpid()} .*study of its own "
                                            rf"\({PATH}\.study\)"):
            search(store, {})
    finally:
        store.release_lease(lease)
    assert store.study("s") is None


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_saves_what_ran_and_resumes_exactly(store, capsys, sig, status):
    def interrupt_later() -> None:
        while sum(t["status"] == "ok" for t in store.trials("s")) < 2:
            time.sleep(0.02)
        os.kill(os.getpid(), sig)   # Python runs the handler in the main thread: the master
    threading.Thread(target=interrupt_later, daemon=True).start()
    with pytest.raises(Interrupted) as info:
        with deferred() as interrupts:
            search(store, {"space": {**SPACE, "sleep": {"values": [0.1]}}},
                   interrupts=interrupts)
    assert info.value.exit_status == status
    left = [t for t in rows(store) if t["status"] == "running"]
    assert left and all(t["attempts"] == 0 for t in left)   # not charged as a crash
    line = f"diel: interrupted: {len(left)} trial{'' if len(left) == 1 else 's'} left " \
           "running will run again on resume\n"
    assert capsys.readouterr().err == line
    search(store, {"space": {**SPACE, "sleep": {"values": [0.1]}}})
    after = rows(store)
    assert [t["params"]["x"] for t in after] == list(range(6))
    assert {(t["status"], t["attempts"]) for t in after} == {("ok", 1)}


# -- as a user meets them: real mpiexec jobs ------------------------------------------

SLOW = GRID.replace("[0, 5]", "[0, 9]")
def wait_for_trials(tmp_path: Path, timeout: float = 60) -> None:
    """Wait until the job's master has dispatched a trial (so it holds the study's lease)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            if trials(tmp_path):
                return
        except ResultsError:
            pass   # the master is still creating the database
    raise AssertionError(f"no trial was dispatched within {timeout} s")


def grid_once(tmp_path: Path) -> None:
    """Every grid point is in the database exactly once, ok."""
    rows_ = trials(tmp_path)
    assert sorted((r["params"]["x"], r["params"]["y"]) for r in rows_) == \
        [(x, y) for x in range(10) for y in (-1, 1)]
    assert {r["status"] for r in rows_} == {"ok"}


@pytest.mark.mpi
@pytest.mark.slow
def test_a_second_run_of_a_running_study_exits_2_at_once(tmp_path):
    hold = tmp_path / "hold"   # the first job's trials wait until the second run is over
    hold.touch()
    path = workflow(tmp_path, SLOW, worker=f"      hold: '{hold}'")
    first = start_job(path, tmp_path / "first.out")
    try:
        wait_for_trials(tmp_path)
        began = time.monotonic()
        second = run_diel("run", str(path), n=4, timeout=60)
        took = time.monotonic() - began
        hold.unlink()
        assert first.wait(timeout=120) == 0, (tmp_path / "first.out").read_text()
    finally:
        if first.poll() is None:
            kill_job(first, path)
    assert second.returncode == 2 and took < 10, (took, second.stderr)
    assert second.stderr.count("diel: ") == 1, second.stderr   # the ranks' output is merged
    assert f"diel: error: study 'wf' is being run by host {os.uname().nodename} pid " \
        in second.stderr
    quiet(second.stdout + second.stderr)
    grid_once(tmp_path)
    points = [json.dumps(p, sort_keys=True) for p in trained(tmp_path)]
    assert len(points) == len(set(points)) == 20   # the second run trained nothing


@pytest.mark.mpi
@pytest.mark.slow
def test_after_sigkill_a_rerun_takes_the_stale_lease_over(tmp_path):
    path = workflow(tmp_path, SLOW, worker="      sleep: 0.3")
    job = start_job(path, tmp_path / "killed.out")
    try:
        wait_for_ok(tmp_path, 2)
    finally:
        kill_job(job, path)
    rerun = run_diel("run", str(path), n=4, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert "taking over the lease of study 'wf' from host" in rerun.stderr
    quiet(rerun.stderr)
    grid_once(tmp_path)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_end_the_job_quietly_and_resume_exactly(tmp_path, sig, status):
    path = workflow(tmp_path, SLOW, worker="      sleep: 0.3")
    job = start_job(path, tmp_path / "job.out")
    try:
        wait_for_ok(tmp_path, 4)
        job.send_signal(sig)   # what Ctrl-C or a batch system does to mpiexec
        assert job.wait(timeout=30) == status
    finally:
        if job.poll() is None:
            kill_job(job, path)
    output = (tmp_path / "job.out").read_text()
    quiet(output)
    left = [row for row in trials(tmp_path) if row["status"] == "running"]
    assert all(row["attempts"] == 0 for row in left)
    assert output.count("diel: ") == 1, output   # one line (the ranks' output is merged)
    assert f"diel: interrupted: {len(left)} trial{'' if len(left) == 1 else 's'} left " \
        "running will run again on resume\n" in output
    done_before = {json.dumps(row["params"], sort_keys=True) for row in trials(tmp_path)
                   if row["status"] == "ok"}
    trained_before = len(trained(tmp_path))

    resumed = run_diel("run", str(path), n=4, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    grid_once(tmp_path)
    assert {row["attempts"] for row in trials(tmp_path)} == {1}
    again = [json.dumps(p, sort_keys=True) for p in trained(tmp_path)[trained_before:]]
    assert not done_before & set(again)   # nothing finished was trained again
