"""What Linux's ``/proc/PID/stat`` tells of a process: its name, state, parent and start
time, for the code that looks at other processes (the node's meeting, a lease's holder,
the launcher's terminal). None where it cannot be read: no such process, or no ``/proc``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ProcessStat", "process_stat"]


class ProcessStat(NamedTuple):
    """A process as ``/proc/PID/stat`` tells it."""

    name: str      # its command's name, as the kernel keeps it (15 characters at most)
    state: str     # R, S, D, ... Z: a zombie (ended, not yet waited for), X: dead
    parent: int    # the parent's process id
    started: str   # when it started, in clock ticks since the boot, as written there

    @property
    def ended(self) -> bool:
        """Whether it has ended (a zombie, or dead), though /proc still shows it."""
        return self.state in ("Z", "X")


def process_stat(pid: int) -> ProcessStat | None:
    """Process ``pid`` as ``/proc/PID/stat`` tells it; None where that cannot be read.
    The name is the text between the first ``(`` and the last ``)``: it may hold spaces
    and parentheses of its own."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode(errors="replace")
        fields = text[text.rindex(")") + 2:].split()
        return ProcessStat(text[text.index("(") + 1:text.rindex(")")], fields[0],
                           int(fields[1]), fields[19])
    except (OSError, ValueError, IndexError):
        return None
