"""Running programs, never through a shell: executable modules and program trials.

The program gets ``DIEL_*`` variables describing where it runs, its placeholders
(``{rank}``, ``{iteration}``, any key of the module's settings) filled in, and its
standard error passed through while the last lines are kept, so that a failure is
reported with what the program said. A program stopped early gets SIGTERM, then
SIGKILL after a grace period.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Mapping

from diel.errors import ConfigError, ModuleFailed
from diel.paths import os_reason, shown_path

__all__ = ["run_program", "program_environment", "StderrTail", "terminate", "find_mpiexec",
           "find_program"]

STDERR_LINES_KEPT = 20


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


class StderrTail:
    """Copies a child's standard error to ours line by line (in a thread) and keeps the
    last lines, to quote them when the child fails."""

    def __init__(self, stream: IO[str], lines: int = STDERR_LINES_KEPT) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: IO[str]) -> None:
        for line in stream:
            sys.stderr.write(line)
            self.lines.append(line.rstrip("\n"))
        stream.close()

    def clear(self) -> None:
        """Forget the lines so far (a reused child starts a new trial)."""
        self.lines.clear()

    def join(self, timeout: float | None = 2.0) -> None:
        """Wait for the stream's end (the child exited), at most ``timeout`` seconds."""
        self._thread.join(timeout)

    def text(self, note_silence: bool = True) -> str:
        """``; last lines of its stderr: ...``, or a note that there were none (or "")."""
        if not self.lines:
            return " (it wrote nothing to stderr)" if note_silence else ""
        return "; last lines of its stderr:\n    " + "\n    ".join(self.lines)


def terminate(process: subprocess.Popen, grace: float) -> int:
    """Stop ``process``: SIGTERM, then SIGKILL if it is still running after ``grace``
    seconds. Returns its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def run_program(argv: list[str], env: Mapping[str, str], cwd: Path,
                timeout: float | None = None, grace: float = 5.0) -> None:
    """Run ``argv`` to completion; ModuleFailed on a non-zero exit or a timeout.

    Standard output is inherited; standard error is copied through line by line and
    its last lines are kept for the error message.
    """
    try:
        process = subprocess.Popen(argv, env=dict(env), cwd=str(cwd), stderr=subprocess.PIPE,
                                   text=True, errors="replace")
    except OSError as exc:
        raise ModuleFailed(f"cannot start {argv[0]}: {exc.strerror}") from None
    tail = StderrTail(process.stderr)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        terminate(process, grace)
        tail.join()
        raise ModuleFailed(f"{argv[0]} timed out after {timeout:g} s" + tail.text()) from None
    tail.join(None)
    if code != 0:
        raise ModuleFailed(f"{' '.join(argv)} exited with status {code}" + tail.text())
