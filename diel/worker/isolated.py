"""Function trials in a reused child process, so that nothing a trial does can end the job.

:class:`IsolatedRunner` keeps one child (:mod:`diel.worker.child`) per worker rank. The
child imports the user's module once and runs trials one at a time, so isolation costs a
message round trip per trial, not an interpreter start (the first child is not even
that: it is forked from the rank before MPI starts, :mod:`diel.worker.early`, where the
rank can tell it will need one; the children that replace it are started). While a
trial runs, the rank sleeps in ``poll`` on the child's socket: it wakes only for a
report, the result, the child's death or the trial's deadline. A trial past its timeout
is answered at its next report with an order to stop; one that does not report is
stopped.

The child leads a process group of its own (:mod:`diel.executive.process_groups`), which holds
whatever its trials start. Stopping the child ends the whole group (SIGTERM, then SIGKILL
after the grace period); that happens when a trial times out, when the child died, when a
trial damaged it (closed its standard output, say: the child tells), when the job ends
and when the rank is interrupted. The next trial then gets a fresh child. Processes a
trial leaves running when it returns are left alone until then: they may be a library's
workers kept for the next trial (joblib's, PyTorch's compile workers).

Checkpoints: the child serializes and writes them itself; once one is durable it says
so and the rank reports it (:meth:`~diel.worker.link.TrialLink.checkpointed`), on the
rank's thread, as it does the trial's reports. A trial that restores asks the rank for
the tuple space's copy of its checkpoint: the rank receives it into a memory file and
passes the child its file descriptor over the socket (no copy through the pipe).

``trial.suggest_*`` in the child goes through the rank too: the child asks, the rank
checks the call against the declared space or asks the master
(:meth:`~diel.worker.link.TrialLink.suggest`) and answers.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from diel.executive import process_groups
from diel.errors import ModuleFailed
from diel.limits import ERROR_CHARS, LOG_TEXT_CHARS, clip
from diel.executive.stderr_tail import StderrTail
from diel.worker.channel import Channel
from diel.worker.link import TrialLink, WriteFailed
from diel.worker.outcome import TrialOutcome, death_reason, timed_out
from diel.worker.trial import SuggestFailed

__all__ = ["IsolatedRunner", "kept_if_same"]

log = logging.getLogger("diel.worker")


class IsolatedRunner:
    """Runs trials of the function ``spec`` in a child process with environment ``env``."""

    def __init__(self, spec: str, base: Path, env: Mapping[str, str], grace: float) -> None:
        self.spec, self.base, self.env, self.grace = spec, base.resolve(), dict(env), grace
        self.process: subprocess.Popen | process_groups.Forked | None = None
        self.conn: Channel | None = None
        self.tail: StderrTail | None = None
        self.children_started = 0
        self.loaded = False   # the child said it has loaded the function

    def launch(self) -> None:
        """Start the child and have it load the function, without waiting for it: the
        worker does this as soon as its rank knows what it runs (:func:`diel.worker.module.
        prepare`), so that the child's start and the user's imports overlap the job's own
        set-up; :meth:`start` then waits for the child to be ready. Every child after the
        first is started so, whether or not the first was forked (:meth:`fork`)."""
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = process_groups.start(
                [sys.executable, "-m", "diel.worker.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=self.env, cwd=str(self.base))
        self.conn = Channel(ours)
        self.tail = StderrTail(self.process.stderr)
        self.children_started += 1
        self.load(self.env)

    def fork(self) -> None:
        """Fork the child from this process as it is (:func:`diel.executive.
        process_groups.fork`: a rank before MPI starts, :mod:`diel.worker.early`), which
        costs milliseconds where :meth:`launch` starts an interpreter. It waits for
        :meth:`load`, which brings it the environment this runner is given then."""
        from diel.worker.child import serve_forked

        ours, theirs = socket.socketpair()
        read, write = os.pipe()
        fd = theirs.detach()
        try:
            self.process = process_groups.fork(lambda: serve_forked(fd), keep=(fd,),
                                               stderr=write)
        except OSError:
            ours.close()
            os.close(read)
            raise
        finally:
            os.close(fd)
        self.conn = Channel(ours)
        self.tail = StderrTail(os.fdopen(read, "rb"))
        self.children_started += 1

    def load(self, env: Mapping[str, str]) -> None:
        """Have the child take ``env`` as its environment and load the function, without
        waiting for it (:meth:`start` does); ``env`` is the environment of the children
        started after this one too."""
        assert self.conn is not None
        self.env = dict(env)
        self.conn.send(("load", self.spec, str(self.base), [str(self.base), *sys.path],
                        self.env))

    def start(self) -> None:
        """Start the child (unless :meth:`launch` did) and wait until it has loaded the
        function (else the first trial does it).

        ModuleFailed when the function cannot be loaded: a setup problem, not a trial's.
        """
        if self.process is None:
            self.launch()
        assert self.conn is not None
        try:
            answer = self.conn.recv()
        except (EOFError, OSError):
            answer = ("load-failed", self._death())
        if answer[0] != "ready":
            self.close()
            raise ModuleFailed(clip(f"cannot load the trial function {self.spec}: {answer[1]}",
                                    ERROR_CHARS))
        self.loaded = True

    def run(self, info: dict[str, Any], link: TrialLink, timeout: float | None) -> TrialOutcome:
        """Run one trial (``info``: :func:`~diel.worker.serve.serve_tasks`) to its outcome."""
        if not self.loaded:
            self.start()
        assert self.process is not None and self.tail is not None
        self.tail.clear()
        process_groups.collect(self.process)   # what earlier trials left and has exited
        try:
            return self._follow(info, link, timeout)
        except BaseException:   # an interrupt (the job ends) or a failure of this rank
            if self.process is not None:
                self._stop()
            raise

    def _follow(self, info: dict[str, Any], link: TrialLink, timeout: float | None) -> TrialOutcome:
        assert self.conn is not None and self.tail is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[int, dict[str, Any]] = (0, {})
        told_to_stop = False
        self.conn.send(("trial", info))
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready = self.conn.poll(wait)
                message = self.conn.recv() if ready else None
            except (EOFError, OSError):
                return TrialOutcome("failed", last[1], error=self._death(), step=last[0])
            if message is None:   # the deadline passed without a word from the trial
                self._stop()
                return TrialOutcome("failed", last[1], step=last[0],
                               error=timed_out(timeout or 0) + self.tail.text(note_silence=False))
            if message[0] == "done":
                outcome, damage = message[1], message[2]
                if damage:
                    log.warning("%s", clip(f"trial {info['number']} {damage}: its child process "
                                           "is replaced by a fresh one", LOG_TEXT_CHARS))
                if damage or told_to_stop:   # a trial that timed out ends with what it started
                    self._stop()
                return outcome
            if message[0] != "report":
                self._serve(message, link, info["params"])
                continue
            step, metrics = message[1], message[2]
            last = (step, metrics)
            if deadline is not None and time.monotonic() >= deadline:
                told_to_stop = True
                self.conn.send(("timeout", timed_out(timeout or 0)))
            else:
                self.conn.send((link.report(step, metrics),))

    def _serve(self, message: tuple, link: TrialLink, params: dict[str, Any]) -> None:
        """A checkpoint's news from the child, a warning, its ask for the copy in memory,
        or a ``suggest_*`` call (``params``: the trial's, as its task gave them)."""
        assert self.conn is not None and self.process is not None
        if message[0] == "suggest":
            try:
                self.conn.send(("suggested", link.suggest(message[1], message[2], params)))
            except SuggestFailed as e:
                self.conn.send(("suggest-failed", str(e)))
        elif message[0] == "checkpointed":
            link.checkpointed(message[1])
        elif message[0] == "checkpoint-failed":
            link.checkpointed(WriteFailed(message[1], message[2]))
        elif message[0] == "warning":
            log.warning("%s", clip(message[1], LOG_TEXT_CHARS))
        elif message[0] == "memory":
            fd = link.memory_copy(message[1])
            self.conn.send(("memory", fd is not None))
            if fd is not None:
                try:
                    self.conn.send_fd(fd)
                finally:
                    os.close(fd)

    def _death(self) -> str:
        """Why the child died, with its last stderr lines; its group is ended too and the
        next trial starts a new child."""
        reason = death_reason(self._stop())
        assert self.tail is not None
        return reason + self.tail.text()

    def _stop(self) -> int:
        """End the child and its whole group; the next trial starts a new child. Returns
        the child's exit status."""
        assert self.process is not None
        code = process_groups.stop(self.process, self.grace)
        if self.tail is not None:
            self.tail.join()
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None
        self.loaded = False
        return code

    def close(self) -> None:
        """End the child (it exits when its socket closes) and whatever its trials left
        running."""
        if self.process is None:
            return
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        process_groups.wait_exit(self.process, self.grace)   # else stopped below
        self._stop()


def kept_if_same(runner: IsolatedRunner | None, spec: str | None,
                 base: Path) -> IsolatedRunner | None:
    """``runner`` (a child started ahead of the rank's module) if it runs ``spec`` from
    ``base``; else it is ended and None is returned."""
    if runner is not None and (runner.spec, runner.base) != (spec, base.resolve()):
        runner.close()
        return None
    return runner
