"""Each rank imports only what it runs, checks and prepares it before MPI starts (the
master imports its database's modules then), meets the node's other ranks sleeping
before MPI's start, keeps Python's garbage collector off until the workflow runs, and
leaves without Python's teardown.

A real ``mpiexec`` run of a small search (a tuple space, the master, one isolated worker)
through a wrapper that writes, per world rank, the modules in ``sys.modules`` at its end
and as MPI starts, whether each check and prepare of its module came before MPI's start,
how it met the others, whether the collector was on as MPI started and at the end (and
how many objects it had frozen), and whether Python's own exit (``atexit``) ran.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.helpers.launch import run_mpi

pytestmark = pytest.mark.mpi

WRAPPER = textwrap.dedent("""
    import atexit, gc, json, os, sys, time

    import diel.cli
    from diel.executive import meeting, mpi_start

    out, rank = sys.argv[1], os.environ["PMI_RANK"]
    seen = {"checks": [], "prepares": []}   # for each: had MPI started?

    def record(how):
        with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
            json.dump({"how": how, "modules": sorted(sys.modules), "collects": gc.isenabled(),
                       "frozen": gc.get_freeze_count(), **seen}, file)

    def noting(function, name):
        def noted(*args, **kwargs):
            seen[name].append("mpi4py.MPI" in sys.modules)
            return function(*args, **kwargs)
        return noted

    def meet(place, timeout=meeting.MEETING_TIMEOUT_S, met=meeting.Meeting.meet):
        came, cpu = time.time(), time.process_time()
        seen["met"] = met(place, timeout)
        seen["meeting"] = {"came": came, "left": time.time(),
                           "cpu": time.process_time() - cpu}
        return seen["met"]

    def start_mpi(start=mpi_start.start_mpi):
        seen["modules_before_mpi"] = sorted(sys.modules)
        seen["collects_before_mpi"] = gc.isenabled()
        return start()

    diel.cli.load_checked = noting(diel.cli.load_checked, "checks")
    diel.cli.prepare_module = noting(diel.cli.prepare_module, "prepares")
    meeting.Meeting.meet = meet
    mpi_start.start_mpi = start_mpi

    atexit.register(record, "python's exit")
    leave = diel.cli._exit_process
    diel.cli._exit_process = lambda code: (record("exit without teardown"), leave(code))
    sys.exit(diel.cli.main(sys.argv[2:]))
""")
WORKFLOW = textwrap.dedent("""
    modules:
      space: {function: tuplespace}
      search:
        function: search
        settings:
          strategy: random
          workers: worker
          max_trials: 4
          space: {x: {uniform: [0, 1]}}
      worker: {function: worker, settings: {run: "trial.py:objective"}}
    services: [space]
""")
#: What neither a tuple-space rank nor a worker rank runs, nor should import
#: (importlib.metadata: diel's own plug-ins are found without entry points).
NOT_RUN = ("diel.search.master", "diel.search.settings", "diel.search.engine", "optuna",
           "matplotlib", "torch", "diel.dashboard.cli", "diel.results.cli",
           "importlib.metadata")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """{world rank: {"how": how it exited, "modules": [...]}} of one finished search."""
    folder = tmp_path_factory.mktemp("imports")
    (folder / "wf.yaml").write_text(WORKFLOW)
    (folder / "trial.py").write_text("def objective(trial):\n"
                                     "    return {'accuracy': trial.params['x']}\n")
    (folder / "wrapper.py").write_text(WRAPPER)
    done = run_mpi(3, [str(folder / "wrapper.py"), str(folder), "run", str(folder / "wf.yaml")],
                   timeout=90)
    assert done.returncode == 0, done.stderr
    return {rank: json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(3)}


def imported(view: dict, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in view["modules"]]


def test_the_tuple_space_rank_imports_no_search_database_numpy_plots_or_program_code(ranks):
    assert imported(ranks[0], NOT_RUN + ("numpy", "sqlalchemy", "diel.worker.module",
                                         "diel.worker.trial", "diel.results._database",
                                         "diel.executive.command", "subprocess")) == []


def test_a_worker_rank_imports_neither_the_master_nor_numpy_nor_sqlalchemy(ranks):
    assert "diel.worker.module" in ranks[2]["modules"]
    assert imported(ranks[2], NOT_RUN + ("numpy", "sqlalchemy", "diel.results._database")) == []


def test_a_worker_rank_imports_no_multiprocessing_tempfile_secrets_or_program_code(ranks):
    """Its child's socket is framed without multiprocessing; a checkpoint's temporary name
    takes os.urandom, not secrets (hmac, random); tempfile and the program check
    (shutil) are a program worker's only."""
    assert imported(ranks[2], ("multiprocessing", "tempfile", "secrets", "hmac", "random",
                               "diel.executive.command")) == []


def test_the_tuple_space_and_worker_ranks_import_no_difflib_or_pkgutil(ranks):
    """difflib is the "did you mean" of a mistake's message (diel.checks.closest), and
    none was made; a builtin module's function is found without pkgutil.resolve_name
    (diel.plugins)."""
    assert [(rank, name) for rank in (0, 2) for name in ("difflib", "pkgutil")
            if name in ranks[rank]["modules"]] == []


def test_the_master_rank_imports_no_difflib(ranks):
    """Its results store's checks too ask diel.checks.closest for a "did you mean"."""
    assert "difflib" not in ranks[1]["modules"]


def test_the_master_rank_imports_what_it_runs(ranks):
    """Not the builtin worker's runtime: its check finds the workers' module has no
    ``check_searched_params`` by its name (diel.search.settings.UNCHECKED_BUILTINS);
    not statistics, the median pruner's only, for a search without a pruner; of the
    checkpoints, only their layout (the files, their writer and pickled snapshots are the
    workers')."""
    assert imported(ranks[1], ("diel.search.master", "sqlalchemy")) == \
        ["diel.search.master", "sqlalchemy"]
    assert imported(ranks[1], ("diel.dashboard.cli", "diel.results.cli", "matplotlib",
                               "sqlalchemy.dialects.postgresql",   # SQLite's search
                               "diel.worker.module", "diel.worker.inprocess",
                               "diel.worker.isolated", "statistics",
                               "diel.checkpoints.files", "diel.checkpoints.writer",
                               "diel.checkpoints.snapshot")) == []


def test_each_rank_checks_and_prepares_its_module_before_mpi_starts(ranks):
    """The worker's prepare sends its trial child, forked before MPI, the function to
    load: the child loads the user's code while the master imports."""
    assert {rank: (view["checks"], view["prepares"]) for rank, view in ranks.items()} == \
        dict.fromkeys(range(3), ([False], [False]))


def test_the_master_imports_its_database_s_modules_before_mpi_starts(ranks):
    assert imported({"modules": ranks[1]["modules_before_mpi"]},
                    ("numpy", "sqlalchemy", "diel.results._store")) == \
        ["numpy", "sqlalchemy", "diel.results._store"]
    for rank in (0, 2):
        assert imported({"modules": ranks[rank]["modules_before_mpi"]},
                        ("numpy", "sqlalchemy", "mpi4py.MPI")) == []


def test_the_ranks_meet_sleeping_before_mpi_starts(ranks):
    assert [view["met"] for view in ranks.values()] == [True] * 3
    meetings = [view["meeting"] for view in ranks.values()]
    last = max(seen["came"] for seen in meetings)
    assert all(seen["left"] >= last for seen in meetings)   # together, once all came
    assert all(seen["cpu"] < 0.05 for seen in meetings)     # sleeping


def test_a_rank_starts_with_the_collector_off_and_runs_its_module_with_it_on(ranks):
    """diel.cli.cmd_run: off while the rank starts, on (the start's objects frozen out of
    its scans: diel's, mpi4py's and the standard library's) once the workflow runs."""
    assert {rank: (view["collects_before_mpi"], view["collects"], view["frozen"] > 10_000)
            for rank, view in ranks.items()} == dict.fromkeys(range(3), (False, True, True))


def test_no_rank_pays_for_python_s_teardown(ranks):
    assert {rank: view["how"] for rank, view in ranks.items()} == \
        dict.fromkeys(range(3), "exit without teardown")


def test_python_rank_exit_is_kept_where_a_job_fails(tmp_path):
    """A job that ends with a usage error exits as Python does (its status is 2 on
    every rank, which tests of misconfigured workflows read after ``main`` returns)."""
    (tmp_path / "wf.yaml").write_text("modules:\n  a: {function: 'no_such_pkg.mod:main'}\n")
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    done = run_mpi(1, [str(tmp_path / "wrapper.py"), str(tmp_path), "run",
                       str(tmp_path / "wf.yaml")], timeout=60)
    assert done.returncode == 2, done.stderr
    assert json.loads((tmp_path / "rank0.json").read_text())["how"] == "python's exit"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
