"""A trial's processes as one process group, ended whole: nothing a trial starts outlives it.

:func:`start` runs a trial's process (an isolated child, a program trial, an executable
module's program) as the leader of a session of its own, so that it and every process it
starts (a DataLoader worker, a helper server, a shell's ``sleep``) form one process group
that nothing else belongs to. :func:`stop` ends the whole group: SIGTERM to every member,
up to ``grace`` seconds for all of them to exit, then SIGKILL to those left. This process
(the rank) is their subreaper (``PR_SET_CHILD_SUBREAPER``): a member orphaned by the death
of its parent is handed to the rank rather than to init, so the rank collects it and
knows at once when the group is empty (:func:`collect`).

A rank can also end without ending its groups: killed by an ``MPI_Abort`` of another
rank or by the out-of-memory killer, or leaving at once on an interrupt while idle. The
launcher's kill of the rank's process group no longer reaches a trial's own session, so
the first :func:`start` also starts a warden (:mod:`diel.executive.warden`): a small process, in a
session of its own, that is told each group as it starts and ends, and sends SIGKILL to
those still running when the rank's end of its pipe closes. A process that leaves its
group (starts a session of its own, as daemons do) is beyond reach; a batch system still
ends it with the job.

:func:`fork` makes such a process without starting an interpreter: a copy of this one,
running a function, for a worker rank's first isolated child, forked before MPI starts
(:mod:`diel.worker.early`); the warden it starts is a forked copy too. Both cost a few
milliseconds of CPU instead of an interpreter's start and imports, at the moment every
rank of the job is starting on the same cores.
"""

from __future__ import annotations

import ctypes
import gc
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from diel.executive import warden

__all__ = ["start", "fork", "Forked", "stop", "collect", "wait_exit"]

PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT = 2.0    # seconds allowed for a group to vanish after SIGKILL
FIRST_PAUSE, LONGEST_PAUSE = 0.001, 0.05   # the pauses between looks at a group ending
WARDEN = Path(__file__).with_name("warden.py")


class _Warden:
    """This process's warden (:mod:`diel.executive.warden`) and the groups it is told of:
    ``forked``, a copy of this process (:func:`fork`: before MPI starts), else a new
    interpreter (a warden that replaces one that died is always that)."""

    def __init__(self, forked: bool = False) -> None:
        self.groups: set[int] = set()
        if forked:
            self._fork()
        else:
            self._spawn()

    def _fork(self) -> None:
        read, self._pipe = os.pipe()
        try:
            self._pid = os.fork()
        except OSError:
            os.close(read)
            os.close(self._pipe)
            raise
        if self._pid == 0:
            try:
                _enter_session(stdin=read, stdout=None, stderr=None, keep=())
                _collect_in_copy()
                warden.main(os.fdopen(0, "rb"))
            finally:
                os._exit(0)
        os.close(read)

    def _spawn(self) -> None:
        read, self._pipe = os.pipe()
        try:
            self._pid = os.posix_spawn(
                sys.executable, [sys.executable, "-I", "-S", str(WARDEN)], os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, read, 0),
                              (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                              (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)],
                setsid=True)
        finally:
            os.close(read)
        if self.groups:
            self._tell("".join(f"{pgid}\n" for pgid in self.groups))

    def watch(self, pgid: int) -> None:
        self.groups.add(pgid)
        self._tell(f"{pgid}\n")

    def forget(self, pgid: int) -> None:
        self.groups.discard(pgid)
        self._tell(f"-{pgid}\n")

    def _tell(self, lines: str) -> None:
        try:
            os.write(self._pipe, lines.encode())
        except OSError:   # the warden died (killed by hand?): a new one takes the list over
            os.close(self._pipe)
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass
            self._spawn()


_warden: _Warden | None = None


def start(argv: list[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **options)`` as the leader of a session (and process
    group) of its own, watched by this process's warden. OSError as from Popen."""
    global _warden
    if _warden is None:
        _become_subreaper()
        _warden = _Warden()
    process = subprocess.Popen(argv, start_new_session=True, **options)
    _warden.watch(process.pid)
    return process


class Forked:
    """A process made by :func:`fork`, with the part of ``subprocess.Popen``'s interface
    that this module and the runners use (``pid``, ``returncode``, ``poll``, ``wait``),
    so that it is stopped, waited for and collected as a started one is."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status once the process has exited (collected then), else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once the process has exited; ``subprocess.TimeoutExpired``
        after ``timeout`` seconds."""
        if timeout is None:
            if self.returncode is None:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            return self.returncode
        if not _sleep_until(lambda: self.poll() is not None, timeout):
            raise subprocess.TimeoutExpired(f"process {self.pid}", timeout)
        return self.returncode


def fork(run: Callable[[], object], keep: Sequence[int], stderr: int) -> Forked:
    """A copy of this process, as the leader of a session of its own watched by the
    warden (as :func:`start`'s processes are), that runs ``run()`` (which ends it, else
    it exits with status 0; an exception is printed, status 1): its standard input
    /dev/null, its standard output this process's, its standard error ``stderr``; of this
    process's other file descriptors it keeps only ``keep``. ``stderr`` is closed here.
    OSError when no process can be made.

    For a process with one thread and no MPI state (a rank before ``mpi4py.MPI`` is
    imported): a copy of a process that runs MPI, or another thread, may hold what
    it cannot use. The first call starts the warden, forked too."""
    global _warden
    try:
        if _warden is None:
            _become_subreaper()
            _warden = _Warden(forked=True)
        entered, entering = os.pipe()   # closed by the copy once it leads its session
    except OSError:
        os.close(stderr)
        raise
    _flush_output()   # what it holds is written once, not twice
    try:
        pid = os.fork()
    except OSError:
        for fd in (entered, entering, stderr):
            os.close(fd)
        raise
    if pid == 0:
        code = 1
        try:
            _enter_session(stdin=None, stdout=1, stderr=stderr, keep=keep)
            _warden = None   # the rank's, whose pipe the copy let go: it starts its own
            _collect_in_copy()
            run()
            code = 0
        except SystemExit as e:   # as an interpreter exits: None is 0
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - told on its stderr, as an interpreter would
            import traceback

            traceback.print_exc()
        finally:
            _flush_output()   # os._exit writes nothing of what is buffered
            os._exit(code)
    os.close(stderr)
    os.close(entering)
    os.read(entered, 1)   # its group exists from here on, as a started process's does
    os.close(entered)
    _warden.watch(pid)
    return Forked(pid)


def stop(process: subprocess.Popen | Forked, grace: float) -> int:
    """End ``process`` (started by :func:`start`) and every process of its group:
    SIGTERM to all of them, up to ``grace`` seconds for them to exit, then SIGKILL to
    those left. Returns the leader's exit status (negative: the signal that ended it).
    When the leader has exited and left nothing running, this costs two system calls."""
    if not _ended(process):
        _signal(process.pid, signal.SIGTERM)
        if not _wait_for_end(process, grace):
            _signal(process.pid, signal.SIGKILL)
            _wait_for_end(process, KILL_WAIT)
    if _warden is not None:
        _warden.forget(process.pid)
    return process.wait()


def wait_exit(process: subprocess.Popen | Forked, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``process`` to exit; True once it has (its status
    collected). Sleeps in the kernel on a process file descriptor (Linux), so it returns
    as soon as the process exits: ``Popen.wait``'s timeout polls with sleeps growing to
    50 ms, which a child that exits within milliseconds often oversleeps."""
    if process.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):   # not Linux, or a kernel before 5.3
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        waiter = select.poll()   # not select(): a descriptor number may pass FD_SETSIZE
        waiter.register(fd, select.POLLIN)
        waiter.poll(timeout * 1000)
    finally:
        os.close(fd)
    return process.poll() is not None


def collect(process: subprocess.Popen | Forked) -> None:
    """Collect the members of ``process``'s group that were orphaned to this process and
    have exited (else each would stay a zombie, holding a process id, until the group
    ends); never the leader, whose status its Popen collects."""
    while True:
        try:
            found = os.waitid(os.P_PGID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:   # no child of ours in the group
            return
        if found is None or found.si_pid == process.pid:
            return
        os.waitpid(found.si_pid, 0)


def _ended(process: subprocess.Popen | Forked) -> bool:
    """True once the leader has exited and its group is empty."""
    if process.poll() is None:
        return False
    collect(process)
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:   # a member that changed its user: it counts as running
        pass
    return False


def _wait_for_end(process: subprocess.Popen | Forked, seconds: float) -> bool:
    """Wait (sleeping) until the group has ended, at most ``seconds``: True if it has."""
    return _sleep_until(lambda: _ended(process), seconds)


def _sleep_until(done: Callable[[], bool], seconds: float) -> bool:
    """Look at ``done()`` with sleeps doubling from :data:`FIRST_PAUSE` to
    :data:`LONGEST_PAUSE`, at most ``seconds``: True once it said so."""
    deadline = time.monotonic() + seconds
    pause = FIRST_PAUSE
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(2 * pause, LONGEST_PAUSE)
    return True


def _signal(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):   # ended meanwhile, or out of our reach
        pass


def _flush_output() -> None:
    """Write out what this process's standard output and error hold (either may be
    None or closed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _collect_in_copy() -> None:
    """In a forked copy: leave what it has of the rank out of its garbage collections for
    good (``gc.freeze``), so that those objects stay shared with the rank instead of being
    copied page by page as a collection walks them, and collect what the copy makes (a
    rank that is starting has the collector off: :func:`diel.cli.cmd_run`)."""
    gc.freeze()
    gc.enable()


def _enter_session(stdin: int | None, stdout: int | None, stderr: int | None,
                   keep: Sequence[int]) -> None:
    """In a forked copy: lead a session of its own; file descriptors 0, 1 and 2 on
    ``stdin``, ``stdout`` and ``stderr`` (None: /dev/null); every other one but ``keep``
    let go (the launcher's, the rank's sockets and files: none is this copy's to use).
    Those are pointed at /dev/null rather than closed, so that a Python object of the
    rank's that still holds one (a file left open) and closes it some day cannot close
    what the copy has opened since under the same number."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for target, source in enumerate((stdin, stdout, stderr)):
        if source != target:
            os.dup2(null if source is None else source, target)
    try:
        held = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:   # no /proc: closed, then
        held = []
        start = 3
        for fd in sorted(keep):
            os.closerange(start, fd)
            start = fd + 1
        os.closerange(start, os.sysconf("SC_OPEN_MAX"))
    for fd in held:   # the listing's own descriptor among them: closed, then /dev/null
        if fd > 2 and fd != null and fd not in keep:
            os.dup2(null, fd, inheritable=False)
    if null > 2:
        os.close(null)


def _become_subreaper() -> None:
    """Have orphaned members of our groups handed to this process, not to init (Linux);
    elsewhere :func:`stop` waits for init to collect them."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
