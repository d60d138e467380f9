"""A worker rank that dies hard: the test kills it with SIGKILL, as an MPI_Abort of
another rank or the out-of-memory killer would, while its trial runs processes.

``python doomed_rank.py function|forked|program PIDS``: one trial of ``behaviours.family``
(in a started child, or in a forked one as before MPI's start; or ``behaviours.py`` as a
program) that starts its processes, notes their pids in PIDS and hangs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from diel.worker.isolated import IsolatedRunner
from diel.worker.program import ProgramRunner

HERE = Path(__file__).resolve().parent


class GoOn:
    """The trial's link to a master that never stops it (the rank dies first)."""

    def report(self, step: int, metrics: dict) -> str:
        return "go"


def main(kind: str, pids: str) -> None:
    info = {"number": 0, "study": "s", "copy": 0, "device": None,
            "params": {"pids": pids, "end": "hang"}}
    if kind in ("function", "forked"):
        runner = IsolatedRunner("behaviours.py:family", HERE, dict(os.environ), grace=1.0)
        if kind == "forked":   # as a rank before MPI starts: the child and warden forked
            runner.fork()
            runner.load(os.environ)
    else:
        runner = ProgramRunner([sys.executable, "behaviours.py", pids, "hang"], HERE,
                               dict(os.environ), grace=1.0)
    runner.run(info, GoOn(), None)


if __name__ == "__main__":
    main(*sys.argv[1:])
