"""Executable modules: each rank runs a program, never through a shell.

The program gets ``DIEL_*`` variables describing where it runs, its placeholders
(``{rank}``, ``{iteration}``, any key of the module's settings) filled in, and its
standard error passed through while the last lines are kept, so that a failure is
reported with what the program said.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Mapping

from diel.errors import ModuleFailed

__all__ = ["run_program", "fill_placeholders", "program_environment"]

STDERR_LINES_KEPT = 20


def fill_placeholders(argv: list[str], fields: Mapping[str, Any]) -> list[str]:
    """``argv`` with ``{name}`` placeholders replaced from ``fields``."""
    return [item.format_map(fields) for item in argv]


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
                timeout: float | None = None) -> None:
    """Run ``argv`` to completion; ModuleFailed on a non-zero exit or a timeout.

    Standard output is inherited; standard error is copied through line by line and
    its last lines are kept for the error message.
    """
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES_KEPT)
    try:
        process = subprocess.Popen(argv, env=dict(env), cwd=str(cwd), stderr=subprocess.PIPE,
                                   text=True, errors="replace")
    except OSError as exc:
        raise ModuleFailed(f"cannot start {argv[0]}: {exc.strerror}") from None
    copier = threading.Thread(target=_copy_lines, args=(process.stderr, tail), daemon=True)
    copier.start()
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        copier.join()
        raise ModuleFailed(f"{argv[0]} timed out after {timeout:g} s" + _tail_text(tail)) from None
    copier.join()
    if code != 0:
        raise ModuleFailed(f"{' '.join(argv)} exited with status {code}" + _tail_text(tail))


def _copy_lines(stream: IO[str], tail: collections.deque[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))
    stream.close()


def _tail_text(tail: collections.deque[str]) -> str:
    if not tail:
        return " (it wrote nothing to stderr)"
    return "; last lines of its stderr:\n    " + "\n    ".join(tail)
