"""Function trials in a reused child process, so that nothing a trial does can end the job.

:class:`IsolatedRunner` keeps one child (:mod:`diel.worker.child`) per worker rank. The
child imports the user's module once and runs trials one at a time, so isolation costs a
message round trip per trial, not an interpreter start. While a trial runs, the rank
sleeps in ``poll`` on the child's socket: it wakes only for a report, the result, the
child's death or the trial's deadline. A trial past its timeout is answered at its next
report with an order to stop; one that does not report is stopped (SIGTERM, then SIGKILL
after the grace period). A dead or stopped child is replaced before the next trial.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Mapping

from diel.command import StderrTail, terminate
from diel.errors import ModuleFailed
from diel.worker.outcome import Outcome, death_reason, timed_out
from diel.worker.trial import Reporter

__all__ = ["IsolatedRunner"]


class IsolatedRunner:
    """Runs trials of the function ``spec`` in a child process with environment ``env``."""

    def __init__(self, spec: str, base: Path, env: Mapping[str, str], grace: float) -> None:
        self.spec, self.base, self.env, self.grace = spec, base.resolve(), dict(env), grace
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.tail: StderrTail | None = None
        self.children_started = 0

    def start(self) -> None:
        """Start the child and load the function now (else the first trial does it).

        ModuleFailed when the function cannot be loaded: a setup problem, not a trial's.
        """
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "diel.worker.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True, errors="replace", env=self.env, cwd=str(self.base))
        self.conn = Connection(ours.detach())
        self.tail = StderrTail(self.process.stderr)
        self.children_started += 1
        self.conn.send(("load", self.spec, str(self.base), [str(self.base), *sys.path]))
        try:
            answer = self.conn.recv()
        except (EOFError, OSError):
            answer = ("load-failed", death_reason(self._reap()) + self.tail.text())
        if answer[0] != "ready":
            self.close()
            raise ModuleFailed(f"cannot load the trial function {self.spec}: {answer[1]}")

    def run(self, info: dict[str, Any], reporter: Reporter, timeout: float | None) -> Outcome:
        """Run one trial (``info``: number, study, copy, params, device) to its outcome."""
        if self.process is None:
            self.start()
        assert self.conn is not None and self.tail is not None
        self.tail.clear()
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        last: tuple[int, dict[str, Any]] = (0, {})
        self.conn.send(("trial", info))
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready = self.conn.poll(wait)
                message = self.conn.recv() if ready else None
            except (EOFError, OSError):
                return Outcome("failed", last[1], error=death_reason(self._reap()) + self.tail.text(),
                               step=last[0])
            if message is None:   # the deadline passed without a word from the trial
                self._stop()
                return Outcome("failed", last[1], step=last[0],
                               error=timed_out(timeout or 0) + self.tail.text(note_silence=False))
            if message[0] == "done":
                return message[1]
            step, metrics = message[1], message[2]
            last = (step, metrics)
            if deadline is not None and time.monotonic() >= deadline:
                self.conn.send(("timeout", timed_out(timeout or 0)))
            else:
                self.conn.send(("prune",) if reporter(step, metrics) else ("go",))

    def _reap(self) -> int:
        """The dead child's exit status; forget it so the next trial starts a new one."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:   # the socket closed but the process lives on
            code = terminate(self.process, self.grace)
        self._forget()
        return code

    def _stop(self) -> None:
        """Stop a child whose trial ran past its deadline."""
        if self.process is not None:
            terminate(self.process, self.grace)
            self._forget()

    def _forget(self) -> None:
        if self.tail is not None:
            self.tail.join()
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def close(self) -> None:
        """End the child (it exits when its socket closes)."""
        if self.process is None:
            return
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        try:
            self.process.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            terminate(self.process, self.grace)
        self._forget()
