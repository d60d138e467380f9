"""What the search tests share: a search master served by worker threads over an
in-memory tuple space (:class:`Harness`, no MPI), and whole searches as a user runs them
(a workflow of the probe workers, its database, its training log, a job under mpiexec)."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import diel.results
from diel.errors import ResultsError
from diel.results import MemoryStorage, Storage, best_first, get_storage
from diel.search import parse_settings, run_search
from diel.worker.inprocess import InProcessRunner
from diel.worker.serve import serve_tasks as serve_with
from tests.helpers.fakespace import FakeSpace
from tests.helpers.launch import REPO, find_mpiexec, search_workflow


# -- in one process: a fake tuple space and worker threads --------------------------------

def serve_tasks(space, study: str, copy: int, trial) -> int:
    """A worker running ``trial(params, report)`` in this thread until its stop."""
    def objective(t):
        return trial(t.params, lambda step, metrics: t.report(step, **metrics))
    return serve_with(space, study, copy, InProcessRunner(objective))


def accuracy_of(params: dict) -> float:
    """A score that grows with ``layers`` and peaks at ``lr`` = 0.01."""
    return 0.5 + params.get("layers", 1) / 10 - abs(math.log10(params["lr"]) + 2) / 10


def simple_trial(params: dict, report) -> dict:
    """One epoch report at half the accuracy, then the accuracy and its loss."""
    report(1, {"accuracy": accuracy_of(params) / 2})
    return {"accuracy": accuracy_of(params), "loss": 1 - accuracy_of(params)}


class Harness:
    """A fake space, worker threads running serve_tasks, and a results store: in memory
    (:class:`MemoryStorage`, kept across runs), or with ``sql`` a SQLite file, for the
    tests whose subject is the SQL store."""

    def __init__(self, tmp_path, workers: int = 3, study: str = "s", sql: bool = False) -> None:
        self.space = FakeSpace()
        self.database: Storage | str = f"sqlite:///{tmp_path / 'results.db'}" if sql \
            else MemoryStorage()
        self.url = get_storage(self.database).url if not sql else self.database
        self.workers, self.study = workers, study
        self.direction = "maximize"   # the study's, as its last run set it
        self.trained: list[dict] = []
        self.lock = threading.Lock()

    @contextmanager
    def opened(self) -> Iterator[Storage]:
        """The harness's store, open (through get_storage, as the master opens one)."""
        store = get_storage(self.database)
        try:
            yield store
        finally:
            store.close()

    def run(self, settings: dict, trial=simple_trial, **kwargs):
        def traced(params, report):
            with self.lock:
                self.trained.append(params)
            return trial(params, report)
        threads = [threading.Thread(target=serve_tasks, args=(self.space, self.study, c, traced),
                                    daemon=True) for c in range(self.workers)]
        for t in threads:
            t.start()
        parsed = parse_settings(settings, "search")
        self.direction = parsed.objective.direction
        with self.opened() as store:
            summary = run_search(self.space, parsed, store, self.workers, study=self.study,
                                 out=io.StringIO(), poll=0.05, **kwargs)
        for t in threads:
            t.join(timeout=10)
            assert not t.is_alive(), "a worker did not get its stop"
        return summary

    def trials(self, status: str | None = None, sort: str | None = None) -> list[dict]:
        """The study's trials (of ``status``) as the store gives them back: best first,
        as ``diel results`` lists them, or by number (``sort="number"``)."""
        assert sort in (None, "number"), sort
        with self.opened() as store:
            rows = store.trials(self.study, status)
        return rows if sort == "number" else best_first(rows, self.direction)


# -- whole searches under mpiexec ------------------------------------------------------

WORKER = "tests.search.probe_workers:quick"


def workflow(tmp_path: Path, search: str, worker: str = "", copies: int = 2,
             function: str = WORKER) -> Path:
    """A search over 2 worker copies; ``search`` and ``worker`` are extra YAML lines of
    the master's settings and of the workers' fixed params (the ``worker`` module running
    ``function``), or of the builtin module's settings when ``function`` is a builtin."""
    log = f"'{tmp_path / 'trained.log'}'"
    if ":" in function:
        module = (f"    function: worker\n    copies: {copies}\n    settings:\n"
                  f"      run: {function}\n      params:\n        log: {log}\n"
                  + textwrap.indent(worker, "  "))
    else:
        module = (f"    function: {function}\n    copies: {copies}\n    settings:\n"
                  f"      log: {log}\n{worker}")
    return search_workflow(tmp_path, search, module)


def trials(tmp_path: Path, url: str | None = None) -> list[dict]:
    """Every trial in the database at ``url``, by default the workflow's ``wf.db``."""
    with diel.results.open(url or tmp_path / "wf.db") as results:
        return results.trials()


def trained(tmp_path: Path) -> list[dict]:
    """The parameters the probe workers trained, in order, from ``trained.log``."""
    log = tmp_path / "trained.log"
    return [json.loads(line)["params"] for line in log.read_text().splitlines()] if log.exists() else []


GRID = """\
      strategy: grid
      space:
        x: {range: [0, 5], step: 1}
        y: {values: [-1, 1]}"""


def job_pids(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the job's unique workflow path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def kill_job(job: subprocess.Popen, path: Path) -> None:
    """SIGKILL mpiexec and every rank (hydra starts ranks in sessions of their own)."""
    os.killpg(job.pid, signal.SIGKILL)
    for pid in job_pids(str(path)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait(timeout=30)
    deadline = time.monotonic() + 30
    while job_pids(str(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not job_pids(str(path)), "ranks of the killed job are still running"


def finished_so_far(tmp_path: Path, url: str) -> list[dict]:
    """The ``ok`` trials of a running search (none while its database is being made)."""
    try:
        return [row for row in trials(tmp_path, url) if row["status"] == "ok"]
    except ResultsError:
        return []


def finished(folder: Path) -> int:
    """How many trials of ``folder/wf.db`` are ok (0 while the master creates it)."""
    return len(finished_so_far(folder, f"sqlite:///{folder / 'wf.db'}"))


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def start_job(path: Path, out: Path) -> subprocess.Popen:
    """``mpiexec -n 4 diel run path`` in the background, output to ``out``."""
    with out.open("w") as sink:
        return subprocess.Popen([find_mpiexec(), "-n", "4", sys.executable, "-m", "diel", "run",
                                 str(path)], cwd=REPO, env=ENV, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_ok(tmp_path: Path, count: int, timeout: float = 60) -> None:
    """Wait until ``count`` trials of ``tmp_path/wf.db`` are ok; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if finished(tmp_path) >= count:
            return
    raise AssertionError(f"fewer than {count} trials finished within {timeout} s")


def quiet(output: str) -> None:
    """Fail when a job's output shows a traceback or an abnormal end of its ranks."""
    for noise in ("Traceback", "CRITICAL", "BAD TERMINATION", "Abort("):
        assert noise not in output, output

