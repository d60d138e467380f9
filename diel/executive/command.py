"""Running programs, never through a shell: executable modules and program trials.

The program gets ``DIEL_*`` variables describing where it runs, its placeholders
(``{rank}``, ``{iteration}``, any key of the module's settings) filled in, and its
standard error passed through while the last lines are kept
(:class:`~diel.executive.stderr_tail.StderrTail`), so that a failure is reported with what the
program said. The program runs in a process group of its own with everything it starts
(:mod:`diel.executive.process_groups`): at a timeout, an interrupt or its exit, whatever of the
group is still running gets SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from diel.executive import process_groups
from diel.errors import ConfigError, ModuleFailed
from diel.limits import ERROR_CHARS, clip
from diel.executive.paths import os_reason, shown_path
from diel.executive.stderr_tail import StderrTail

__all__ = ["run_program", "program_environment", "find_mpiexec", "find_program"]


def find_mpiexec() -> str:
    """The ``mpiexec`` next to this Python (the ``mpich`` wheel's, which matches the MPI
    that mpi4py loads), else the first one on PATH; tests and benchmarks launch with it."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec next to this Python or on PATH: "
                                "pip install -e '.[mpi]' installs MPICH's")
    return found


def find_program(argv: list[str], folder: Path, key_path: str) -> list[str]:
    """``argv`` with its program found: a leading ``python`` (or ``python3``) is the Python
    running diel, so the program runs inside diel's virtual environment even where it is
    not on PATH (a batch script calling ``.venv/bin/diel``); a relative path with a
    slash is looked up in ``folder`` (the workflow's), any other name on PATH. A program
    found nowhere, a folder, a file without execute permission or a path the system
    refuses (too long, a NUL) is a one-line :class:`ConfigError` at ``key_path``."""
    program, rest = argv[0], list(argv[1:])
    if program in ("python", "python3"):
        return [sys.executable, *rest]
    shown = shown_path(program)
    candidate = folder / program
    problem = None
    try:
        beside = os.sep in program and candidate.exists()
        if beside and candidate.is_dir():
            problem = "is a folder, not a program"
        elif beside and not os.access(candidate, os.X_OK):
            problem = ("is not executable (no execute permission: chmod +x it, or start it "
                       "with python)")
        found = str(candidate) if beside else shutil.which(program)
    except (OSError, ValueError) as exc:   # ValueError: a NUL character in the name
        raise ConfigError(key_path, f"program '{shown}' cannot be used: {os_reason(exc)}") from None
    if problem is not None:
        raise ConfigError(key_path, f"'{shown}' {problem}")
    if found is None:
        raise ConfigError(key_path, f"program '{shown}' not found on PATH or beside the "
                                    f"workflow ({shown_path(folder)})")
    return [found, *rest]


def program_environment(fields: Mapping[str, Any], result_file: Path) -> dict[str, str]:
    """This process's environment plus the ``DIEL_*`` variables for one run."""
    env = dict(os.environ)
    env.update({
        "DIEL_MODULE": str(fields["module"]),
        "DIEL_COPY": str(fields["copy"]),
        "DIEL_RANK": str(fields["rank"]),
        "DIEL_SIZE": str(fields["size"]),
        "DIEL_WORLD_RANK": str(fields["world_rank"]),
        "DIEL_ITERATION": str(fields["iteration"]),
        "DIEL_RESULT_FILE": str(result_file),
    })
    return env


def run_program(argv: list[str], env: Mapping[str, str], cwd: Path,
                timeout: float | None = None, grace: float = 5.0) -> None:
    """Run ``argv`` to completion; ModuleFailed on a non-zero exit or a timeout.

    Standard output is inherited; standard error is copied through and its last lines
    are kept for the error message. The processes the program started and left running
    are ended when it exits, and all of them at a timeout or an interrupt.
    """
    try:
        process = process_groups.start(argv, env=dict(env), cwd=str(cwd), stderr=subprocess.PIPE)
    except OSError as exc:
        raise ModuleFailed(f"cannot start {argv[0]}: {exc.strerror}") from None
    tail = StderrTail(process.stderr)
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:   # what the program left running, or all of it at a timeout or an interrupt
        process_groups.stop(process, grace)
    tail.join()
    if code is None:
        raise ModuleFailed(clip(f"{argv[0]} timed out after {timeout:g} s" + tail.text(),
                                ERROR_CHARS))
    if code != 0:
        raise ModuleFailed(clip(f"{' '.join(argv)} exited with status {code}" + tail.text(),
                                ERROR_CHARS))
