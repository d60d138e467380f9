"""Where the user reads a search's output: the terminal of the command that started the
job, if any, and how wide it is.

Under mpiexec a rank's standard output is a pipe to the launcher, which copies it to its
own, so the rank cannot ask its own output. It looks up its ancestors for the launcher
(:data:`LAUNCHERS`: mpiexec, mpirun, srun...) and asks the launcher's standard output: a
terminal there means the user is watching (the progress line is redrawn in place, and
the width is that terminal's); anything else (a batch job's log file, a pipe to a test)
means no one is. ``COLUMNS``, when set, is the width all the same; 100 columns when
nothing tells. Linux's ``/proc`` is read; elsewhere, and without a launcher, only the
process's own output is asked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TextIO

from diel.procfs import process_stat

__all__ = ["Terminal", "terminal_of", "DEFAULT_WIDTH"]

DEFAULT_WIDTH = 100   # columns, when neither COLUMNS nor a terminal tells
ANCESTORS = 4         # generations looked at at most (a proxy, a launcher's helpers)
#: The names of the programs that start MPI jobs, whose output is the user's.
LAUNCHERS = frozenset({"mpiexec", "mpiexec.hydra", "mpirun", "orterun", "prterun", "srun"})


@dataclass(frozen=True)
class Terminal:
    """``live``: the output reaches a terminal; ``width``: the columns it has."""

    live: bool
    width: int


def terminal_of(stream: TextIO) -> Terminal:
    """Where ``stream`` (this process's output) is read (see the module docstring)."""
    size = None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):   # a StringIO, a closed stream
        fd = None
    if fd is not None:
        size = _own_size(fd) if os.isatty(fd) else _launcher_size()
    return Terminal(size is not None, _columns() or size or DEFAULT_WIDTH)


def _columns() -> int | None:
    """``COLUMNS`` as a positive number of columns, or None."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return columns if columns > 0 else None


def _own_size(fd: int) -> int | None:
    try:
        return os.get_terminal_size(fd).columns or None
    except OSError:
        return None


def _launcher_size() -> int | None:
    """The width of the terminal the launcher's standard output is, or None when it is
    no terminal, or no launcher is found among this process's ancestors."""
    pid = os.getpid()
    for _ in range(ANCESTORS):
        pid = _parent(pid)
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
                name = comm.read().strip()
        except OSError:
            return None
        if name in LAUNCHERS:
            return _terminal_at(f"/proc/{pid}/fd/1")
    return None


def _terminal_at(path: str) -> int | None:
    """The width of the terminal ``path`` opens, or None when it is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _own_size(fd) if os.isatty(fd) else None
    finally:
        os.close(fd)


def _parent(pid: int) -> int:
    """The parent of process ``pid`` (0 when it cannot be read)."""
    found = process_stat(pid)
    return 0 if found is None else found.parent
