"""``diel run`` checks each rank's module before MPI starts where the launcher tells the
rank its place (diel.cli): a mistake found then is still told once, by rank 0, with exit
status 2 and no process left; a module of the user's, whose import may start MPI, is
checked once MPI has started, and the job does not wait for it at the node's meeting;
a Ctrl-C then ends the rank quietly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, left_behind, run_mpi

#: Runs ``diel`` on a rank and writes, per world rank, whether MPI had started at each
#: check of its module (one more before MPI where it is the user's: see diel.cli).
WRAPPER = textwrap.dedent("""
    import json, os, sys

    import diel.cli

    out, rank = sys.argv[1], os.environ["PMI_RANK"]
    checks = []

    def load_checked(*args, check=diel.cli.load_checked, **kwargs):
        checks.append("mpi4py.MPI" in sys.modules)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
            json.dump(checks, file)
        return check(*args, **kwargs)

    diel.cli.load_checked = load_checked
    sys.exit(diel.cli.main(sys.argv[2:]))
""")
SEARCH = textwrap.dedent("""
    modules:
      space: {function: tuplespace}
      search: {function: search, settings: {strategy: randomly, max_trials: 2, workers: worker,
                                            space: {x: {uniform: [0, 1]}}}}
      worker: {function: worker, settings: {run: "trial.py:objective"}}
    services: [space]
""")
#: A module of the user's that imports mpi4py.MPI (and so starts MPI) as it is imported.
USER_MODULE = textwrap.dedent("""
    from mpi4py import MPI

    def main(ctx):
        ctx.comm.Barrier()
""")


def run(folder: Path, ranks: int, timeout: float = 90):
    (folder / "wrapper.py").write_text(WRAPPER)
    done = run_mpi(ranks, [str(folder / "wrapper.py"), str(folder), "run",
                           str(folder / "wf.yaml")], timeout=timeout, cwd=folder,
                   env={"DIEL_START_TEST": str(folder)})
    views = {rank: json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(ranks)}
    return done, views


@pytest.mark.mpi
def test_a_mistake_found_before_mpi_is_told_once_by_rank_0_with_status_2(tmp_path):
    """The worker's rank, whose module is right, forks its trial child and has it load
    the trial function before MPI starts: the child ends with the job."""
    (tmp_path / "trial.py").write_text("def objective(trial):\n    return {'loss': 0.0}\n")
    (tmp_path / "wf.yaml").write_text(SEARCH)   # no such strategy
    done, views = run(tmp_path, 3)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("diel: error:") == 1, done.stderr
    assert "modules.search.settings.strategy" in done.stderr and "Traceback" not in done.stderr
    assert views == dict.fromkeys(range(3), [False])   # every rank checked before MPI's start
    assert left_behind(f"DIEL_START_TEST={tmp_path}") == []


@pytest.mark.mpi
def test_a_user_module_that_starts_mpi_as_it_is_imported_is_checked_after_mpi(tmp_path):
    (tmp_path / "usermod.py").write_text(USER_MODULE)
    (tmp_path / "wf.yaml").write_text("modules:\n  a: {function: 'usermod:main', size: 2}\n")
    started = time.monotonic()
    done, views = run(tmp_path, 2, timeout=50)   # not the meeting's minute
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 40
    assert views == dict.fromkeys(range(2), [False, True])


def test_ctrl_c_before_mpi_ends_the_rank_quietly_with_130(tmp_path):
    """SIGINT while the rank checks its module before MPI (no handler of diel's yet):
    nothing is left half-way, no traceback."""
    (tmp_path / "wf.yaml").write_text("modules:\n  space: {function: tuplespace}\n"
                                      "services: [space]\n")
    interrupted = ("import sys, diel.cli\n"
                   "def load_checked(*args, **kwargs):\n    raise KeyboardInterrupt\n"
                   "diel.cli.load_checked = load_checked\n"
                   "sys.exit(diel.cli.main(['run', sys.argv[1]]))\n")
    place = {"PMI_RANK": "0", "PMI_SIZE": "1", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}
    done = subprocess.run([sys.executable, "-c", interrupted, str(tmp_path / "wf.yaml")],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, **place})
    assert (done.returncode, done.stderr) == (130, "")


@pytest.mark.mpi
def test_a_search_whose_workers_are_a_user_module_is_checked_after_mpi(tmp_path):
    """The search master's check imports its workers' module (to check what they can
    run): where that module is the user's, whose import may start MPI, the master's
    check waits for MPI's start too, so that no rank starts MPI before the meeting (nor
    with another netmod than the others)."""
    (tmp_path / "trial.py").write_text("def objective(trial):\n    return {'loss': 0.0}\n")
    (tmp_path / "usermod.py").write_text("from mpi4py import MPI\n"
                                         "from diel.worker.module import main\n")
    checked_after_mpi(tmp_path, ("function: worker", "function: 'usermod:main'"), rank=1)


def checked_after_mpi(tmp_path, change: tuple[str, str], rank: int) -> None:
    """Run the 3-rank search of ``SEARCH`` with ``change`` (old, new) made to it: it ends
    well, before the meeting's minute, and rank ``rank`` checked its module once MPI had
    started."""
    (tmp_path / "wf.yaml").write_text(SEARCH.replace("strategy: randomly", "strategy: random")
                                      .replace(*change))
    started = time.monotonic()
    done, views = run(tmp_path, 3, timeout=50)   # not the meeting's minute
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 40
    assert views[rank] == [False, True]   # checked once MPI had started


#: Rank 1 checks its module slowly; every rank says where it is: ``checking`` (rank 1,
#: before MPI, with no handler of diel's for SIGINT yet) or ``meeting`` (the others).
SLOW_CHECK = textwrap.dedent("""
    import os, sys, time

    import diel.cli
    from diel.executive.meeting import Meeting

    out, rank = sys.argv[1], os.environ["PMI_RANK"]

    def mark(where):
        with open(os.path.join(out, f"rank{rank}.{where}"), "w"):
            pass

    def load_checked(*args, check=diel.cli.load_checked, **kwargs):
        if rank == "1" and "mpi4py.MPI" not in sys.modules:
            mark("checking")
            time.sleep(60)
        return check(*args, **kwargs)

    def meet(self, *args, meet=Meeting.meet, **kwargs):
        mark("meeting")
        return meet(self, *args, **kwargs)

    diel.cli.load_checked = load_checked
    Meeting.meet = meet
    sys.exit(diel.cli.main(sys.argv[2:]))
""")


@pytest.mark.mpi
def test_ctrl_c_while_a_rank_checks_before_mpi_ends_every_rank_without_mpi(tmp_path):
    """Ctrl-C (mpiexec passes SIGINT to every rank) while one rank still checks its
    module and the others wait for it at the node's meeting: the checking rank ends with
    130, and so do the others, at once, without starting MPI (MPI_Init would wait for
    the rank that left, spinning, for ever)."""
    from tests.helpers.launch import find_mpiexec

    (tmp_path / "trial.py").write_text("def objective(trial):\n    return {'loss': 0.0}\n")
    (tmp_path / "wf.yaml").write_text(SEARCH.replace("strategy: randomly", "strategy: random"))
    (tmp_path / "slow.py").write_text(SLOW_CHECK)
    marker = f"DIEL_START_TEST={tmp_path}"
    job = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, str(tmp_path / "slow.py"),
                            str(tmp_path), "run", str(tmp_path / "wf.yaml")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           env={**os.environ, "DIEL_START_TEST": str(tmp_path)})
    try:
        expected = {"rank0.meeting", "rank1.checking", "rank2.meeting"}
        deadline = time.monotonic() + 60
        while not expected <= {path.name for path in tmp_path.iterdir()}:
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.1)
        job.send_signal(signal.SIGINT)
        _, stderr = job.communicate(timeout=30)   # not the meeting's minute, nor for ever
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert left_behind(marker) == []


@pytest.mark.mpi
def test_a_worker_whose_trial_is_in_a_package_is_checked_after_mpi(tmp_path):
    """The worker's check finds a ``package.module`` trial by importing its package: one
    that imports mpi4py.MPI would start MPI on that rank alone, before the node's meeting
    and with MPICH's own netmod (the others' OFI: every rank aborted after the minute)."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("from mpi4py import MPI\n")
    (tmp_path / "mypkg" / "trials.py").write_text("def objective(trial):\n"
                                                  "    return {'loss': 0.0}\n")
    checked_after_mpi(tmp_path, ("trial.py:objective", "mypkg.trials:objective"), rank=2)


#: Rank $DYING's check of its module, before MPI, meets a bug of diel's: it dies (a
#: traceback).
CRASHING_CHECK = textwrap.dedent("""
    import os, sys

    import diel.cli

    def load_checked(*args, check=diel.cli.load_checked, **kwargs):
        if os.environ["PMI_RANK"] == os.environ["DYING"] and "mpi4py.MPI" not in sys.modules:
            raise RuntimeError("a bug in the check")
        return check(*args, **kwargs)

    diel.cli.load_checked = load_checked
    sys.exit(diel.cli.main(sys.argv[1:]))
""")


@pytest.mark.mpi
@pytest.mark.parametrize("dying", ["1", "0"])   # a rank, or the node's leader
def test_a_rank_that_dies_before_mpi_ends_the_job_without_mpi(tmp_path, dying):
    """The node's other ranks, meeting, learn that it ended and end too (MPICH's Hydra
    does not end a job whose rank exited before MPI_Init: they would wait there, spinning,
    for ever): at once, not after the meeting's minute, and nothing is left behind."""
    (tmp_path / "trial.py").write_text("def objective(trial):\n    return {'loss': 0.0}\n")
    (tmp_path / "wf.yaml").write_text(SEARCH.replace("strategy: randomly", "strategy: random"))
    (tmp_path / "crash.py").write_text(CRASHING_CHECK)
    started = time.monotonic()
    done = run_mpi(3, [str(tmp_path / "crash.py"), "run", str(tmp_path / "wf.yaml")],
                   timeout=40, cwd=tmp_path,
                   env={"DIEL_START_TEST": str(tmp_path), "DYING": dying})
    assert done.returncode != 0
    assert time.monotonic() - started < 20, done.stderr
    assert done.stderr.count("of this node ended before MPI started; the job ends") == 2, \
        done.stderr   # the two others: local rank N, or "a rank", where it died unseen
    assert left_behind(f"DIEL_START_TEST={tmp_path}") == []
