"""Running ``diel`` and ``mpiexec`` from tests: every launch has a timeout, so a hang fails,
and every launch of mpiexec (:func:`find_mpiexec`, :func:`run_mpi`, ``run_diel(n=...)``)
fails a test that is not marked ``mpi`` (tests/helpers/markers.py).
:func:`run_diel_in_process` runs the command's entry point without a new interpreter."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

from diel.executive import command
from tests.helpers.markers import require

REPO = Path(__file__).resolve().parents[2]


def find_mpiexec() -> str:
    """diel's ``mpiexec`` (:func:`diel.executive.command.find_mpiexec`), for a test marked
    ``mpi``: tests launch mpiexec only through here."""
    require("mpi", "launches mpiexec")
    return command.find_mpiexec()


def run_mpi(n: int, args: list[str], timeout: float = 120, env: dict[str, str] | None = None,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n n <args>`` and return the finished process (text output).

    ``args`` starting with ``-m`` or a ``.py`` path are run with this Python.
    A run that outlasts ``timeout`` is killed and raises ``subprocess.TimeoutExpired``.
    """
    if args and (args[0] == "-m" or args[0].endswith(".py")):
        args = [sys.executable, *args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([find_mpiexec(), "-n", str(n), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=str(cwd or REPO))



def left_behind(marker: str, within: float = 5) -> list[int]:
    """The processes whose environment holds ``marker`` (a variable given to the job
    launched, which its ranks and their children inherit) ``within`` seconds from now,
    or as soon as there are none: a process killed as a job ends takes a moment to go."""
    deadline = time.monotonic() + within
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:   # ended meanwhile, or not ours to read
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)

def run_diel(*args: str, n: int | None = None, timeout: float = 120,
             cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run the ``diel`` CLI, under ``mpiexec -n n`` when ``n`` is given."""
    cli = [sys.executable, "-m", "diel", *args]
    if n is None:
        return subprocess.run(cli, capture_output=True, text=True, timeout=timeout,
                              cwd=str(cwd or REPO))
    return run_mpi(n, cli, timeout=timeout, cwd=cwd)


def run_diel_in_process(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run ``diel ARGS`` through its entry point (:func:`diel.cli.main`) in this process and
    answer as :func:`run_diel` does: exit status, stdout and stderr (an argparse usage error
    is its status 2). For tests of what the command says and does, where what a process
    adds (its start and imports, ~0.5 s of CPU; its exit) is not the point."""
    from diel.cli import main

    out, err = io.StringIO(), io.StringIO()
    folder = os.getcwd()
    os.chdir(cwd or REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as stop:   # as the interpreter ends on one
                code = 0 if stop.code is None else stop.code
                if not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(folder)
    return subprocess.CompletedProcess(["diel", *args], code, out.getvalue(), err.getvalue())


def search_workflow(folder: Path, search: str, worker: str) -> Path:
    """Write ``folder/wf.yaml``: a tuple space, a search master whose settings are
    ``workers: trainer`` plus the YAML lines ``search`` (indented 6), and the worker module
    ``trainer`` given by the YAML lines ``worker`` (indented 4). Results go to wf.db."""
    path = Path(folder) / "wf.yaml"
    path.write_text("modules:\n  space: {function: tuplespace}\n  search:\n"
                    "    function: search\n    settings:\n      workers: trainer\n"
                    f"{search}\n  trainer:\n{worker}\nservices: [space]\n")
    return path
