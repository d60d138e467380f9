"""The search's progress line: trials done of total, running, queued, failed, best (with
several objectives: the size of the Pareto front), elapsed; and, once tasks have waited
UNTAKEN_NOTE_S with a worker free and none taken, a note naming the tag they wait on.

At a terminal (the master's own output, or under mpiexec the launcher's:
:mod:`diel.search.terminal`) one line, clipped to the terminal's width, is redrawn in
place (at most a few times a second); otherwise (a batch job's log file) a plain line is
written every ``interval`` seconds, so logs stay readable.
"""

from __future__ import annotations

import time
from typing import Callable, TextIO

from diel.search.engine import Stats
from diel.search.protocol import task_tag

__all__ = ["ProgressDisplay", "describe", "UNTAKEN_NOTE_S"]

TTY_REFRESH_S = 0.2
UNTAKEN_NOTE_S = 60.0   # tasks untaken this long, with a worker free: say so


def _clock_text(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def describe(study: str, stats: Stats, live: bool = False) -> str:
    """One line such as ``search mnist: 12/27 done, 3 running, 1 failed, best 0.97 (#4),
    0:01:23``, with a note when no worker has taken a task for UNTAKEN_NOTE_S. The
    ``live`` line, redrawn at a terminal, is short: the clock first, no zero counts,
    ``search mnist 0:01:23: 12/27 done, 3 running, 1 failed, best 0.97 (trial 4)``."""
    total = f"/{stats.total}" if stats.total is not None else ""
    parts = [f"{stats.done}{total} done"]
    if stats.running or not live:
        parts.append(f"{stats.running} running")
    if stats.queued:
        parts.append(f"{stats.queued} queued")
    if stats.failed or not live:
        parts.append(f"{stats.failed} failed")
    if stats.pruned:
        parts.append(f"{stats.pruned} pruned")
    if stats.best is not None:
        parts.append(f"best {stats.best:.6g} (trial {stats.best_trial})")
    if stats.front:
        parts.append(f"Pareto front {stats.front} trial{'' if stats.front == 1 else 's'}")
    if not live:
        parts.append(_clock_text(stats.elapsed))
    if stats.untaken >= UNTAKEN_NOTE_S:
        parts.append(f"no worker has taken a task from {task_tag(study)} for "
                     f"{_clock_text(stats.untaken)}: check the workers' module and study")
    if live:
        return f"search {study} {_clock_text(stats.elapsed)}: " + ", ".join(parts)
    return f"search {study}: " + ", ".join(parts)


class ProgressDisplay:
    """Writes :func:`describe` lines to ``stream`` (see the module docstring)."""

    def __init__(self, stream: TextIO, study: str, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, tty: bool | None = None,
                 width: int = 100) -> None:
        self.stream = stream
        self.study = study
        self.tty = stream.isatty() if tty is None else tty
        self.width = width   # of the terminal: a redrawn line is shorter, never wrapped
        self.interval = TTY_REFRESH_S if self.tty else interval
        self.clock = clock
        self._last: float | None = None
        self._width = 0

    def update(self, stats: Stats, force: bool = False) -> None:
        """Show ``stats`` if the refresh interval passed (or ``force``)."""
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        line = describe(self.study, stats, live=self.tty)
        if self.tty:
            line = line[:max(1, self.width - 1)]
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, stats: Stats) -> None:
        """Show the final state and end the line."""
        self.update(stats, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
