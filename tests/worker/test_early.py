"""An isolated worker rank forks its first trial child before MPI starts
(:mod:`diel.worker.early`): the rank tells its place from the launcher's environment, the
child waits for the environment computed after MPI's start, a rank that runs something
else ends it quietly, and the children that replace it are started as before."""

from __future__ import annotations

import os
import sys
import threading
import types
from multiprocessing import resource_tracker
from pathlib import Path
from types import SimpleNamespace

import pytest

from diel.executive import process_groups
from diel.executive.config import load_workflow
from diel.worker import early, module
from tests.helpers.links import ScriptedLink
from tests.helpers.worker import running

TRIAL = """\
import multiprocessing
import os
import sys


def square(n):
    return n * n


def objective(trial):
    if trial.params.get("crash"):
        os._exit(1)
    if trial.params.get("spawn"):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return {"squared": pool.apply(square, (3,))}
    return {"pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv[0],
            "cmdline": open("/proc/self/cmdline").read(),
            **{name: os.environ.get(name) for name in
               ("OMP_NUM_THREADS", "DIEL_LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "PMI_RANK")}}
"""

WORKFLOW = """
modules:
  space: {function: tuplespace}
  search: {function: search, settings: {strategy: random, max_trials: 1,
                                        space: {x: {uniform: [0, 1]}}}}
  worker: {function: worker, copies: 2, settings: {run: "trial.py:objective"%s}}
services: [space]
"""   # ranks: the space 0, the search 1, the worker's copies 2 and 3


SINGLE_THREADED = early._single_threaded   # the fixture lets pytest-xdist's threads be


def info(number: int = 0, **params) -> dict:
    return {"number": number, "study": "s", "copy": 0, "device": None, "params": params}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A workflow of isolated workers, seen from world rank 2 of 4 under MPICH's Hydra."""
    (tmp_path / "trial.py").write_text(TRIAL)
    (tmp_path / "wf.yaml").write_text(WORKFLOW % "")
    monkeypatch.setenv("PMI_RANK", "2")
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.setattr(early, "_single_threaded", lambda: True)   # pytest-xdist's threads
    yield tmp_path
    early.discard()
    runner = module._take_launched(None, tmp_path)
    assert runner is None


def forked(folder: Path):
    early.fork_trial_child(str(folder / "wf.yaml"))
    runner = early._forked
    assert runner is not None and isinstance(runner.process, process_groups.Forked)
    return runner


def prepared_and_taken(folder, node):
    """What the worker takes after the executive ran its ``prepare`` for the workflow in
    ``folder`` on ``node``: the runner of its trial child."""
    workflow = load_workflow(folder / "wf.yaml")
    spec = workflow.module("worker")
    module.prepare(dict(spec.settings), spec, workflow, node)
    return module._take_launched("trial.py:objective", folder)


@pytest.mark.parametrize("environment, place", [
    ({"PMI_RANK": "3", "PMI_SIZE": "6"}, (3, 6)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}, (1, 4)),
    ({"PMIX_RANK": "5"}, (5, None)),
    ({}, None),
    ({"PMI_RANK": "two"}, None),
])
def test_the_rank_is_told_by_the_launchers_environment(monkeypatch, environment, place):
    for name in early.RANK_VARIABLES + early.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert early.world_place() == place


def test_the_forked_child_is_taken_by_prepare_and_runs_with_the_ranks_later_environment(
        folder, monkeypatch):
    runner = forked(folder)
    pid = runner.process.pid
    assert os.getsid(pid) == pid != os.getsid(0)   # a session, and group, of its own
    # what the rank sets as it shares its node (share_node), and its GPU
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("DIEL_LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    taken = prepared_and_taken(folder, SimpleNamespace(local_rank=1, local_size=2, threads=3))
    try:
        assert taken is runner and early._forked is None
        outcome = taken.run(info(), ScriptedLink(), None)
    finally:
        taken.close()
    assert outcome.status == "ok", outcome.error
    metrics = outcome.metrics
    assert metrics["pid"] == pid and taken.children_started == 1
    assert "diel.worker.child" not in metrics["cmdline"]   # a copy of this process: no exec
    assert metrics["argv"].endswith("child.py") and metrics["cwd"] == str(folder)
    assert (metrics["OMP_NUM_THREADS"], metrics["DIEL_LOCAL_RANK"],
            metrics["CUDA_VISIBLE_DEVICES"], metrics["PMI_RANK"]) == ("3", "1", "5", None)
    assert running([pid]) == []


def test_a_crashed_forked_child_is_replaced_by_a_started_one(folder):
    runner = forked(folder)
    runner.load(dict(os.environ))
    try:
        crashed = runner.run(info(crash=True), ScriptedLink(), None)
        after = runner.run(info(1), ScriptedLink(), None)
    finally:
        runner.close()
    assert crashed.status == "failed" and "exited with status 1" in crashed.error
    assert after.status == "ok" and runner.children_started == 2
    assert "diel.worker.child" in after.metrics["cmdline"]


def test_a_forked_child_spawns_processes_as_a_started_one(folder, monkeypatch):
    """multiprocessing's spawn imports the child's ``__main__`` in the new process: the
    child's module, as for a started child, not the rank's ``diel`` command (which
    would run ``diel`` again there)."""
    rank_main = types.ModuleType("__main__")
    rank_main.__file__ = str(Path(early.__file__).parents[1] / "__main__.py")
    rank_main.__spec__ = SimpleNamespace(name="diel.__main__")
    monkeypatch.setitem(sys.modules, "__main__", rank_main)   # a rank's `python -m diel`
    tracker = resource_tracker._resource_tracker   # a rank has none running (pytest may)
    monkeypatch.setattr(tracker, "_fd", None)
    monkeypatch.setattr(tracker, "_pid", None)
    runner = forked(folder)
    monkeypatch.undo()
    runner.load(dict(os.environ))
    try:
        outcome = runner.run(info(spawn=True), ScriptedLink(), 60)
    finally:
        runner.close()
    assert outcome.status == "ok", outcome.error
    assert outcome.metrics == {"squared": 9}


def test_the_workflow_the_rank_loaded_is_not_loaded_again(folder, monkeypatch):
    """diel run checks the rank's module before MPI starts, then forks with the workflow
    it loaded there."""
    workflow = load_workflow(folder / "wf.yaml")
    monkeypatch.setattr(early, "load_workflow", lambda path: pytest.fail("loaded again"))
    early.fork_trial_child(str(folder / "wf.yaml"), workflow)
    assert early._forked is not None and isinstance(early._forked.process, process_groups.Forked)


def test_a_child_nothing_takes_ends_quietly_and_leaves_nothing(folder, capfd):
    runner = forked(folder)
    process = runner.process
    early.discard()
    assert early._forked is None and runner.process is None
    assert process.returncode == 0 and running([process.pid]) == []
    assert capfd.readouterr().err == ""


def test_a_child_for_other_code_is_ended_not_taken(folder):
    runner = forked(folder)
    assert early.take("other.py:objective", folder) is None
    assert runner.process is None and early._forked is None


@pytest.mark.parametrize("case", ["the search's rank", "another size", "in the rank",
                                  "no launcher", "MPI started", "a thread", "a broken workflow"])
def test_nothing_is_forked_where_the_rank_is_not_an_isolated_worker_copy(
        folder, monkeypatch, case):
    if case == "the search's rank":
        monkeypatch.setenv("PMI_RANK", "1")
    elif case == "another size":
        monkeypatch.setenv("PMI_SIZE", "5")
    elif case == "in the rank":
        (folder / "wf.yaml").write_text(WORKFLOW % ", isolate: false")
    elif case == "no launcher":
        monkeypatch.delenv("PMI_RANK")
    elif case == "MPI started":
        monkeypatch.setitem(sys.modules, "mpi4py.MPI", types.ModuleType("mpi4py.MPI"))
    elif case == "a thread":
        monkeypatch.setattr(early, "_single_threaded", SINGLE_THREADED)
        monkeypatch.setattr(threading, "active_count", lambda: 2)
    else:
        (folder / "wf.yaml").write_text("modules: [")
    early.fork_trial_child(str(folder / "wf.yaml"))
    assert early._forked is None


def test_a_fork_that_cannot_be_made_closes_the_stderr_it_was_given(monkeypatch):
    """process_groups.fork closes ``stderr`` whenever it raises, also where the pipe it
    needs before forking cannot be had (out of descriptors): no descriptor is left."""
    def no_pipe():
        raise OSError(24, "Too many open files")

    read, write = os.pipe()
    monkeypatch.setattr(process_groups, "_warden", object())   # as after a first fork
    monkeypatch.setattr(os, "pipe", no_pipe)
    try:
        with pytest.raises(OSError):
            process_groups.fork(lambda: None, keep=(), stderr=write)
        with pytest.raises(OSError):
            os.fstat(write)   # closed
    finally:
        monkeypatch.undo()
        os.close(read)


def test_a_forked_child_that_died_before_its_load_is_replaced_by_a_started_one(folder):
    """A forked child killed while its rank started MPI is not taken: prepare starts a
    child instead, which runs the trials (no broken pipe out of prepare)."""
    runner = forked(folder)
    os.kill(runner.process.pid, 9)
    process_groups.wait_exit(runner.process, 10)
    taken = prepared_and_taken(folder, SimpleNamespace(local_rank=0, local_size=1, threads=1))
    try:
        assert taken is not runner and early._forked is None
        outcome = taken.run(info(), ScriptedLink(), None)
    finally:
        taken.close()
    assert outcome.status == "ok", outcome.error
    assert "diel.worker.child" in outcome.metrics["cmdline"]


def test_a_forked_function_that_returns_has_its_output_written(tmp_path):
    """What ``run`` printed and left buffered is written when it returns (the copy ends
    with os._exit, which writes nothing), and it exits with status 0."""
    out = tmp_path / "out"
    read, write = os.pipe()
    os.close(read)

    def run() -> None:
        sys.stdout = open(out, "w")   # block-buffered, as a rank's piped stdout is
        print("buffered")

    child = process_groups.fork(run, keep=(), stderr=write)
    assert process_groups.wait_exit(child, 10) and child.returncode == 0
    process_groups.stop(child, 0.1)
    assert out.read_text() == "buffered\n"


def test_a_forked_copy_starts_a_warden_of_its_own(tmp_path):
    """The copy does not keep the rank's warden (its pipe is let go in the copy): a
    process it starts is watched by a warden of its own, as in a started child."""
    out = tmp_path / "out"
    read, write = os.pipe()
    os.close(read)

    def run() -> None:
        out.write_text(repr(process_groups._warden))

    child = process_groups.fork(run, keep=(), stderr=write)
    assert process_groups.wait_exit(child, 10) and child.returncode == 0
    process_groups.stop(child, 0.1)
    assert out.read_text() == "None"
