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

Checkpoints: ``trial.checkpoint`` serializes the state and hands it to the child's own
:class:`~diel.checkpoints.DurableWriter`; once the file is durable the writer's thread
tells the parent (which reports it to the master). ``trial.restore`` asks the parent for
the tuple space's copy (a memory file's descriptor, passed over the socket: the tuple
server's own file when it runs on this node, so no byte is copied), maps it privately,
else reads the checkpoint's file; warnings about unusable checkpoints go to the parent's log. Before
the outcome the child waits for its writes (up to
:data:`~diel.worker.link.DURABLE_WAIT` s; a child whose writes are still under way then
is replaced, and those checkpoints are lost: the trial's previous ones stand).

Messages (pickled tuples): parent -> child ``("load", spec, base, sys_path, environment)``,
``("trial", info)``, after each report ``("go",)``, ``("prune",)``, ``("pause",)`` or
``("timeout", text)``, ``("memory", found)`` (then the descriptor when found), and
``("suggested", value)`` or ``("suggest-failed", text)``; child -> parent ``("ready",)``
or ``("load-failed", text)``, ``("report", step, metrics)``, ``("suggest", name,
distribution)`` (a ``trial.suggest_*`` call: the rank checks it or asks the master),
``("checkpointed", Written)``, ``("checkpoint-failed", step, text)``, ``("warning",
text)``, ``("memory", nbytes)`` and ``("done", TrialOutcome, damage)``, ``damage`` None or
why the child cannot run another trial. The writer's thread sends too: every send holds
one lock.

The child starts with what every trial needs; the checkpoint, resume and tuple-space code
is imported where a trial first checkpoints, restores or finds a copy in memory, so that
a child's start (one a worker rank, all starting at once with the job) costs less.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from diel.limits import ERROR_CHARS, clip
from diel.worker.channel import Channel
from diel.worker.loading import load_function
from diel.worker.outcome import TrialOutcome, error_text, run_objective
from diel.worker.trial import SuggestFailed, Trial, TrialTimedOut

if TYPE_CHECKING:   # imported where a trial first checkpoints (module docstring)
    from diel.checkpoints import DurableWriter

PR_SET_PDEATHSIG = 1
STDIO = ("standard input", "standard output", "standard error")   # file descriptors 0, 1, 2


def _die_with_parent() -> None:
    """Ask Linux to kill this child when its worker rank dies (e.g. the job aborts)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _interruptible() -> None:
    """Give trials Python's usual SIGINT handling (KeyboardInterrupt), even where the job
    was started with SIGINT ignored (a background job of a batch script), which a child
    would otherwise inherit through exec."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Parent:
    """The socket to the worker rank: sends from any thread (one lock), receives on the
    main thread only; the child's checkpoint writer, made on the first checkpoint."""

    def __init__(self, conn: Channel) -> None:
        self.conn = conn
        self._sending = threading.Lock()
        self.writer: DurableWriter | None = None

    def send(self, message: tuple) -> None:
        with self._sending:
            self.conn.send(message)

    def writer_for(self, folder: str | None, number: int) -> DurableWriter:
        """The writer of the study's checkpoint ``folder``."""
        if folder is None:
            raise RuntimeError(f"trial {number}: this worker has no checkpoint folder")
        if self.writer is None or str(self.writer.folder) != folder:
            from diel.checkpoints import DurableWriter

            self.writer = DurableWriter(folder)
        return self.writer

    def memory_copy(self, nbytes: int) -> memoryview | None:
        """The memory file holding the tuple space's copy (the tuple server's, or the
        parent's), mapped privately (writable; the file's pages are shared until
        written), or None when none is kept."""
        self.send(("memory", nbytes))
        _, found = self.conn.recv()
        if not found:
            return None
        fd = self.conn.recv_fd()
        from tuplespace.memfiles import map_private

        try:
            return map_private(fd, nbytes)
        finally:
            os.close(fd)

    def flush(self) -> str | None:
        """Wait for this trial's checkpoint writes; why the child must be replaced, or None."""
        if self.writer is None:
            return None
        from diel.worker.link import DURABLE_WAIT

        done = self.writer.end_trial(DURABLE_WAIT)
        if done:
            return None
        return (f"still had a checkpoint being written {DURABLE_WAIT:g} s after it ended "
                "(that checkpoint is lost; the earlier ones stand)")


def run_trial(function: Callable[[Trial], Any], info: dict[str, Any], parent: Parent) -> TrialOutcome:
    """Run one trial, asking the parent at each report whether to go on."""
    def reporter(step: int, metrics: dict[str, Any]) -> str:
        parent.send(("report", step, metrics))
        answer = parent.conn.recv()
        if answer[0] == "timeout":
            raise TrialTimedOut(answer[1])
        return answer[0]

    def checkpoint(step: int, state: Any) -> None:
        parent.writer_for(info.get("checkpoints"), info["number"]).checkpoint(
            info["number"], step, state,
            lambda written: parent.send(("checkpointed", written)),
            lambda _, step, reason: parent.send(("checkpoint-failed", step, reason)))

    def restore() -> tuple[int, Any] | None:
        from diel.worker.resume import resume_point

        found = resume_point(info.get("restore"), info["number"], parent.memory_copy,
                             lambda line: parent.send(("warning", line)))
        return None if found is None else (found[0], found[1].load())

    def suggester(name: str, distribution: dict[str, Any], params: dict[str, Any]) -> Any:
        parent.send(("suggest", name, distribution))
        answer = parent.conn.recv()
        if answer[0] == "suggest-failed":
            raise SuggestFailed(answer[1])
        return answer[1]

    trial = Trial(params=info["params"], number=info["number"], study=info["study"],
                  copy=info["copy"], rank=0, comm=None, device=info["device"],
                  checkpoint_every=info.get("checkpoint_every"), _reporter=reporter,
                  _checkpointer=checkpoint, _restorer=restore, _suggester=suggester)
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
    _interruptible()
    faulthandler.enable()   # a crash prints the trial's Python stack to stderr
    conn = Channel.from_fd(int(argv[1]))
    stdio = stdio_files()
    try:
        _, spec, base, path, environment = conn.recv()
    except EOFError:   # a child forked for a rank that found it runs no trials
        return 0
    _take_environment(environment)
    os.chdir(base)
    sys.path[:0] = [folder for folder in path if folder not in sys.path]
    try:
        function = load_function(spec, Path(base))
    except BaseException as e:  # noqa: BLE001 - any failure to load is reported, not raised
        conn.send(("load-failed", clip(f"{error_text(e)}\n{traceback.format_exc(limit=-3)}",
                                       ERROR_CHARS)))
        return 2
    conn.send(("ready",))
    parent = Parent(conn)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return 0
        outcome = run_trial(function, message[1], parent)
        broken = parent.flush() or damage(stdio, base)
        parent.send(("done", outcome, broken))
        if broken:
            return 3


def _take_environment(environment: dict[str, str]) -> None:
    """Make ``environment`` this process's (before the user's module is imported): the
    rank's, computed once MPI has started (the node's thread counts, ``DIEL_LOCAL_*``,
    the GPU: :func:`~diel.worker.environment.trial_environment`). A child forked before
    then has the rank's first environment, the launcher's variables included; a started
    one has this already."""
    for key in set(os.environ) - set(environment):
        del os.environ[key]
    os.environ.update(environment)


def serve_forked(fd: int) -> NoReturn:
    """The life of a child forked from its rank before MPI started (:mod:`diel.worker.
    early`): as ``python -m diel.worker.child FD``'s, but in a copy of the rank, whose
    modules it has already. It passes for a started child: this module is ``__main__``
    (so that multiprocessing's spawned processes import it, not the rank's ``diel``
    command) and ``sys.argv`` is that child's. The rank's objects, which it never frees,
    are left out of its garbage collections (:func:`diel.executive.process_groups.fork`
    froze them)."""
    sys.modules["__main__"] = sys.modules[__name__]
    sys.argv = [__file__, str(fd)]
    leave(main(sys.argv))


def leave(code: int) -> NoReturn:
    """End the child with ``code`` without the interpreter's teardown of every module its
    trials imported: its rank waits for it before the job can end, and that teardown was
    most of the wait. Threads still running (not daemons) are ended as the interpreter's
    exit ends them (``threading._shutdown``: the hooks that tell a thread pool's idle
    workers to stop, then a wait for each thread), output is flushed and the exit
    handlers run (``atexit``: a trial's own, logging's, multiprocessing's), then
    ``os._exit``: what the interpreter's exit does first. A child whose output cannot be
    flushed exits as usual."""
    threading._shutdown()   # type: ignore[attr-defined]
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):   # a trial replaced or closed them
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv))
