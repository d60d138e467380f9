"""Stopping a job before its wall-time limit, keeping its progress (docs/clusters.md).

Two ways ask a job to stop: ``diel run --stop-after DURATION`` (a deadline counted from
the start of the rank) and SIGUSR1, what ``sbatch --signal=B:USR1@300`` has Slurm send
the batch script five minutes before the limit (the script passes it on to ``mpiexec``).
MPICH's hydra ``mpiexec`` forwards SIGUSR1 to the process group of every rank (checked
with hydra 5.0.2), and SIGUSR1's default action ends a process, so every rank of
``diel run`` notes it (:meth:`WallTime.listen`) and goes on: only the search master acts
on it, by pausing its trials (diel.search.master); the workers hear from the master. A
trial's own processes run in sessions of their own (diel.executive.process_groups), so
the signal does not reach them. Where a launcher does not forward the signal,
``--stop-after`` does the same alone.

A stopped search ends the job with one line and :data:`STOPPED_STATUS` (75, sysexits'
EX_TEMPFAIL: "try again later"), so that a requeueing job script tells "stopped, run me
again" from done (0), a mistake (2) or a failure (1, 130, 143...).

No MPI here: the search master imports this module in unit tests too.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from types import FrameType
from typing import Callable

__all__ = ["WallTime", "Stopped", "parse_duration", "STOPPED_STATUS", "STOP_SIGNAL"]

STOPPED_STATUS = 75     # EX_TEMPFAIL: the search stopped with work left; run it again
STOP_SIGNAL = signal.SIGUSR1
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# patterns, compiled (and cached by re) where a duration is parsed: every rank imports
# this module, and only --stop-after has a duration
_UNITS_FORM = r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?"
_CLOCK_FORM = r"(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)"   # Slurm's [D-]H:M:S, M:S


class Stopped(Exception):
    """A search stopped on request with work left (its trials paused): the job ends
    with the one line of the message and :data:`STOPPED_STATUS`."""


def parse_duration(text: str) -> float:
    """Seconds in ``text``: units (``90s``, ``30m``, ``2h``, ``1h30m``, ``1d12h``), a
    bare number of seconds (``90``), or Slurm's clock form (``1:30:00``, ``2-00:00:00``,
    ``45:00`` for minutes and seconds). A :class:`ValueError` saying what is expected
    for anything else, or for no time at all."""
    text = text.strip().lower()
    seconds: float | None = None
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
    elif text and (units := re.fullmatch(_UNITS_FORM, text)) and any(units.groups()):
        seconds = sum(float(value) * _UNITS[unit]
                      for value, unit in zip(units.groups(), "dhms") if value)
    elif clock := re.fullmatch(_CLOCK_FORM, text):
        days, hours, minutes, secs = (int(value or 0) for value in clock.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if seconds is None or seconds <= 0:
        raise ValueError(f"expected a duration such as 90s, 30m, 2h, 1h30m or 1:30:00 "
                         f"(more than zero), got {text!r}")
    return seconds


class WallTime:
    """When this job is to stop and keep its progress: ``stop_after`` seconds after it
    was made (None: no deadline), or once SIGUSR1 came (after :meth:`listen`)."""

    def __init__(self, stop_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.stop_after = stop_after
        self.deadline = None if stop_after is None else clock() + stop_after
        self.signalled = False

    def listen(self) -> None:
        """Note SIGUSR1 from now on instead of dying of it (main thread only; elsewhere
        nothing is installed)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(STOP_SIGNAL, self._note)

    def _note(self, _signum: int, _frame: FrameType | None) -> None:
        self.signalled = True

    def reason(self) -> str | None:
        """Why the job is to stop now (the text the search's last line shows), or None."""
        if self.signalled:
            return "SIGUSR1"
        if self.deadline is not None and self.clock() >= self.deadline:
            return f"--stop-after {_shown(self.stop_after)}"   # type: ignore[arg-type]
        return None


def _shown(seconds: float) -> str:
    """``5400`` -> ``1h30m``; ``2.5`` -> ``2.5s``."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    left, parts = int(seconds), []
    for unit, size in _UNITS.items():
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts)
