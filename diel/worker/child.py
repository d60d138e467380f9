"""The isolated trial process: ``python -m diel.worker.child FD``.

One such child serves one worker rank for as long as it lives. It has no MPI. Over the
socket ``FD`` it gets the function to load (imported once), then trials one at a time;
``trial.report`` asks the parent (which talks to the search) and waits for its answer;
the trial's outcome goes back as one message. An exception in the trial, or a call of
``sys.exit``, is a failed trial and the child goes on; anything that kills the child
(a segfault, ``os._exit``, the kernel's out-of-memory killer) is seen by the parent.

After each trial the child flushes the trial's output (so that its last words are
written in its own time, never in the next trial's) and checks that the trial left it
fit to run another: its standard input, output and error still open on the files they
were, ``sys.stdout`` and ``sys.stderr`` not closed; and it goes back to the workflow's
folder. A child found damaged says why with the outcome and exits; the parent starts a
fresh one. The child leads a process group of its own (docs/workers.md, "Processes").

Messages (pickled tuples): parent -> child ``("load", spec, base, sys_path)``,
``("trial", info)``, and after each report ``("go",)``, ``("prune",)`` or
``("timeout", text)``; child -> parent ``("ready",)`` or ``("load-failed", text)``,
``("report", step, metrics)`` and ``("done", TrialOutcome, damage)``, ``damage`` None or why
the child cannot run another trial.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from diel.limits import ERROR_CHARS, clip
from diel.worker.loading import load_function
from diel.worker.outcome import TrialOutcome, error_text, run_objective
from diel.worker.trial import Trial, TrialTimedOut

PR_SET_PDEATHSIG = 1
STDIO = ("standard input", "standard output", "standard error")   # file descriptors 0, 1, 2


def _die_with_parent() -> None:
    """Ask Linux to kill this child when its worker rank dies (e.g. the job aborts)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_trial(function: Callable[[Trial], Any], info: dict[str, Any], conn: Connection) -> TrialOutcome:
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


def stdio_files() -> list[tuple[int, int] | None]:
    """What file descriptors 0, 1 and 2 are open on: (device, inode), or None if closed."""
    files: list[tuple[int, int] | None] = []
    for fd in range(len(STDIO)):
        try:
            status = os.fstat(fd)
        except OSError:
            files.append(None)
        else:
            files.append((status.st_dev, status.st_ino))
    return files


def damage(stdio: list[tuple[int, int] | None], base: str) -> str | None:
    """Why this child cannot run another trial, or None: checked after each trial (a few
    system calls). Flushes the trial's output first and goes back to ``base``."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            if stream.closed:
                return f"closed sys.{name}"
            stream.flush()
        except (AttributeError, OSError, ValueError) as e:   # AttributeError: not a stream
            return f"left sys.{name} unusable ({e})"
    for fd, (now, before) in enumerate(zip(stdio_files(), stdio)):
        if now != before:
            change = "closed" if now is None else "replaced"
            return f"{change} file descriptor {fd} (its {STDIO[fd]})"
    try:
        os.chdir(base)
    except OSError as e:
        return f"left the workflow's folder unreachable ({e.strerror})"
    return None


def main(argv: list[str]) -> int:
    _die_with_parent()
    faulthandler.enable()   # a crash prints the trial's Python stack to stderr
    conn = Connection(int(argv[1]))
    stdio = stdio_files()
    _, spec, base, path = conn.recv()
    sys.path[:0] = [folder for folder in path if folder not in sys.path]
    try:
        function = load_function(spec, Path(base))
    except BaseException as e:  # noqa: BLE001 - any failure to load is reported, not raised
        conn.send(("load-failed", clip(f"{error_text(e)}\n{traceback.format_exc(limit=-3)}",
                                       ERROR_CHARS)))
        return 2
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return 0
        outcome = run_trial(function, message[1], conn)
        broken = damage(stdio, base)
        conn.send(("done", outcome, broken))
        if broken:
            return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
