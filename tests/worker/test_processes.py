"""A trial's processes end with it (timeout, prune, interrupt, the rank's death, the end of
its child), and a reused child that a trial damaged is replaced."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diel.worker.isolated import IsolatedRunner
from diel.worker.program import ProgramRunner
from tests.helpers.worker import noted, running, wait_until
from tests.helpers.links import ScriptedLink, scripted

HERE = Path(__file__).resolve().parent
GRACE = 0.2   # the SIGTERM-ignoring process of the family waits it out each time
TIMEOUT = 2.0   # time enough for a trial to start its processes on a loaded machine (a
# program's family took up to 0.56 s at a load of 8 on 2 cores, a function's 0.21 s; CI
# runs these beside the MPI tests, so the margin is kept above 3x)
PROGRAM = [sys.executable, "behaviours.py"]


def info(number: int = 0, **params) -> dict:
    return {"number": number, "study": "s", "copy": 0, "device": None, "params": params}


never = ScriptedLink()   # a master that never stops a trial

# The tests that wait out TIMEOUT (mostly asleep, seconds each) are one xdist group: the
# scheduler hands groups out before single tests (largest first), so that they start
# early instead of being the last tests of a run, on one worker while the other idles.
waits_out_the_timeout = pytest.mark.xdist_group("timeouts")


@pytest.fixture
def family():
    runner = IsolatedRunner("behaviours.py:family", HERE, dict(os.environ), grace=GRACE)
    yield runner
    runner.close()


# -- a trial's processes end with it ----------------------------------------------------

@waits_out_the_timeout
@pytest.mark.parametrize("end", ["hang", "report"])
def test_a_timed_out_function_trial_ends_with_every_process_it_started(family, tmp_path, end):
    pids = tmp_path / "pids"
    family.start()
    started = time.monotonic()
    outcome = family.run(info(pids=str(pids), end=end), never, TIMEOUT)
    took = time.monotonic() - started
    assert outcome.status == "failed" and outcome.error.startswith(f"timed out after {TIMEOUT:g} s")
    assert running(noted(pids)) == []   # the sleeps, the orphan, the one ignoring SIGTERM
    assert took < TIMEOUT + GRACE + 1.5, took
    assert family.run(info(pids=str(pids)), never, None).status == "ok"
    assert family.children_started == 2


@waits_out_the_timeout
def test_a_timed_out_program_trial_ends_with_every_process_it_started(tmp_path):
    pids = tmp_path / "pids"
    started = time.monotonic()
    outcome = ProgramRunner([*PROGRAM, str(pids), "hang"], HERE, dict(os.environ), GRACE).run(
        info(), never, TIMEOUT)
    took = time.monotonic() - started
    assert outcome.status == "failed" and outcome.error.startswith(f"timed out after {TIMEOUT:g} s")
    assert running(noted(pids)) == []
    assert took < TIMEOUT + GRACE + 1.5, took


def test_a_program_that_exits_leaves_nothing_running(tmp_path):
    pids = tmp_path / "pids"
    outcome = ProgramRunner([*PROGRAM, str(pids), "return"], HERE, dict(os.environ), GRACE).run(
        info(), never, 30)
    assert outcome.status == "ok" and outcome.value == 0.5
    assert running(noted(pids)) == []


def test_what_a_returning_trial_leaves_runs_until_its_child_ends(family, tmp_path):
    """Kept for the next trial (a library's worker pool may be), ended with the child."""
    pids = tmp_path / "pids"
    assert family.run(info(pids=str(pids)), never, None).status == "ok"
    assert len(running(noted(pids))) == 4
    assert family.run(info(pids=str(pids)), never, None).status == "ok"
    assert len(set(running(noted(pids)))) == 1 + 3 + 3 and family.children_started == 1
    family.close()
    assert running(noted(pids)) == []


def _interrupt(step, metrics) -> bool:
    raise KeyboardInterrupt   # what diel.executive.interrupts raises on SIGINT or SIGTERM


interrupt = scripted(_interrupt)


def test_an_interrupted_function_trial_ends_with_its_processes(family, tmp_path):
    pids = tmp_path / "pids"
    with pytest.raises(KeyboardInterrupt):
        family.run(info(pids=str(pids), end="report"), interrupt, None)
    assert running(noted(pids)) == []
    assert family.process is None   # the next trial gets a fresh child


def test_an_interrupted_program_trial_ends_with_its_processes(tmp_path):
    pids = tmp_path / "pids"
    runner = ProgramRunner([*PROGRAM, str(pids), "report"], HERE, dict(os.environ), GRACE)
    with pytest.raises(KeyboardInterrupt):
        runner.run(info(), interrupt, None)
    assert running(noted(pids)) == []


def test_a_pruned_program_ends_with_its_processes(tmp_path):
    pids = tmp_path / "pids"
    outcome = ProgramRunner([*PROGRAM, str(pids), "report"], HERE, dict(os.environ), GRACE).run(
        info(), scripted(lambda step, metrics: True), None)
    assert outcome.status == "pruned"
    assert running(noted(pids)) == []


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its trial's process, its warden)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(word) for word in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("kind", ["function", "forked", "program"])
def test_a_rank_killed_hard_leaves_no_process_of_its_trial(tmp_path, kind):
    """SIGKILL, as MPI_Abort from another rank or the out-of-memory killer ends a rank:
    the launcher's kill of the rank's group no longer reaches the trial's; the warden does."""
    pids = tmp_path / "pids"
    rank = subprocess.Popen([sys.executable, str(HERE / "doomed_rank.py"), kind, str(pids)])
    try:
        assert wait_until(lambda: pids.exists() and pids.read_text().endswith("\n"), 30)
        processes = set(children(rank.pid) + noted(pids))
        assert len(processes) == 2 + 3   # the trial's process and the warden; the family
    finally:
        rank.kill()
        rank.wait()
    assert wait_until(lambda: not running(list(processes)), 5), running(list(processes))


# -- a child a trial damaged is replaced -----------------------------------------------

@pytest.fixture
def misbehaving():
    runner = IsolatedRunner("behaviours.py:misbehave", HERE, dict(os.environ), grace=GRACE)
    yield runner
    runner.close()


@pytest.mark.parametrize("mode, said", [
    ("close-sys-stdout", "closed sys.stdout"),
    ("close-fd-1", "closed file descriptor 1 (its standard output)"),
    ("close-sys-stderr", "closed sys.stderr"),
    ("close-fd-2", "closed file descriptor 2 (its standard error)"),
    ("replace-fd-1", "replaced file descriptor 1 (its standard output)"),
])
def test_a_child_that_a_trial_damaged_is_replaced_once(misbehaving, caplog, mode, said):
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        damaging = misbehaving.run(info(mode=mode), never, None)
    after = [misbehaving.run(info(number, mode="print"), never, None) for number in (1, 2)]
    assert damaging.status == "ok"   # the trial itself went well
    assert [outcome.status for outcome in after] == ["ok", "ok"], after
    assert misbehaving.children_started == 2
    assert after[0].metrics["pid"] == after[1].metrics["pid"] != damaging.metrics["pid"]
    assert f"trial 0 {said}: its child process is replaced" in caplog.text


def test_a_trial_that_changes_folder_leaves_the_next_in_the_workflow_folder(misbehaving):
    misbehaving.run(info(mode="chdir"), never, None)
    outcome = misbehaving.run(info(mode="print"), never, None)
    assert outcome.metrics["cwd"] == str(HERE)
    assert misbehaving.children_started == 1


def test_the_child_leads_its_own_process_group(misbehaving):
    pid = misbehaving.run(info(mode="print"), never, None).metrics["pid"]
    assert os.getpgid(pid) == pid != os.getpgid(0)
    assert os.getsid(pid) == pid


def test_the_child_does_not_ignore_sigint_for_its_trials(tmp_path):
    """The child no longer ignores SIGINT (it is in a session of its own, out of reach of
    the launcher's Ctrl-C): a process a trial starts can be interrupted as usual, also
    when the job itself was started with SIGINT ignored (a background job of a script)."""
    (tmp_path / "handlers.py").write_text(
        "import signal\n"
        "def objective(trial):\n"
        "    return {'sigint': str(signal.getsignal(signal.SIGINT))}\n")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)   # the child inherits it via exec
    runner = IsolatedRunner("handlers.py:objective", tmp_path, dict(os.environ), grace=GRACE)
    try:
        outcome = runner.run(info(), never, None)
    finally:
        runner.close()
        signal.signal(signal.SIGINT, before)
    assert outcome.metrics["sigint"] == str(signal.default_int_handler)
