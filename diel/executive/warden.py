"""The warden: ends a rank's trial process groups when the rank dies without ending them.

A rank that runs trials in processes starts one warden (:mod:`diel.executive.process_groups`),
``python -I -S .../warden.py``, in a session of its own, so that neither the launcher's
signals nor its kill of the rank's process group reach it. Its standard input is a pipe
from the rank, one process group id a line: ``PGID`` when the rank starts a group,
``-PGID`` once it has ended it. When the pipe closes, the rank has exited, however it
ended (normally, interrupted, killed by MPI_Abort or the out-of-memory killer): the
warden sends SIGKILL to every group still listed, and exits.

Standard library only, and nothing else imported: it starts in milliseconds, without
diel's packages on its path. A rank that forks its first trial process before MPI starts
forks its warden too (:func:`diel.executive.process_groups.fork`): that copy runs
:func:`main` on its standard input without starting an interpreter.
"""

from __future__ import annotations

import io
import os
import signal
import sys


def main(lines: io.BufferedIOBase | None = None) -> int:
    """Keep the list told on ``lines`` (default: standard input) until it closes, then
    end every group still listed."""
    groups: set[int] = set()
    for line in sys.stdin.buffer if lines is None else lines:   # until the rank's end closes
        pgid = int(line)
        if pgid > 0:
            groups.add(pgid)
        else:
            groups.discard(-pgid)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:   # the group ended meanwhile
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
