"""The isolated trial process: ``python -m diel.worker.child FD``.

One such child serves one worker rank for as long as it lives. It has no MPI. Over the
socket ``FD`` it gets the function to load (imported once), then trials one at a time;
``trial.report`` asks the parent (which talks to the search) and waits for its answer;
the trial's outcome goes back as one message. An exception in the trial, or a call of
``sys.exit``, is a failed trial and the child goes on; anything that kills the child
(a segfault, ``os._exit``, the kernel's out-of-memory killer) is seen by the parent.

Messages (pickled tuples): parent -> child ``("load", spec, base, sys_path)``,
``("trial", info)``, and after each report ``("go",)``, ``("prune",)`` or
``("timeout", text)``; child -> parent ``("ready",)`` or ``("load-failed", text)``,
``("report", step, metrics)`` and ``("done", Outcome)``.
"""

from __future__ import annotations

import ctypes
import faulthandler
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from diel.worker.loading import load_function
from diel.worker.outcome import Outcome, error_text, run_objective
from diel.worker.trial import Trial, TrialTimedOut

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to kill this child when its worker rank dies (e.g. the job aborts)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_trial(function: Callable[[Trial], Any], info: dict[str, Any], conn: Connection) -> Outcome:
    """Run one trial, asking the parent at each report whether to go on."""
    def reporter(step: int, metrics: dict[str, Any]) -> bool:
        conn.send(("report", step, metrics))
        answer = conn.recv()
        if answer[0] == "timeout":
            raise TrialTimedOut(answer[1])
        return answer[0] == "prune"

    trial = Trial(params=info["params"], number=info["number"], study=info["study"],
                  copy=info["copy"], rank=0, comm=None, device=info["device"],
                  _reporter=reporter)
    return run_objective(function, trial)


def main(argv: list[str]) -> int:
    _die_with_parent()
    faulthandler.enable()   # a crash prints the trial's Python stack to stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the job's to handle
    conn = Connection(int(argv[1]))
    _, spec, base, path = conn.recv()
    sys.path[:0] = [folder for folder in path if folder not in sys.path]
    try:
        function = load_function(spec, Path(base))
    except BaseException as e:  # noqa: BLE001 - any failure to load is reported, not raised
        conn.send(("load-failed", f"{error_text(e)}\n{traceback.format_exc(limit=-3)}"))
        return 2
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return 0
        conn.send(("done", run_trial(function, message[1], conn)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
