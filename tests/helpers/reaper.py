"""The reaper: ends what a test session started when the session ends, however it ends.

A fixture's process that outlives the test using it (the throwaway PostgreSQL server, a
``diel dashboard``, chromedriver and its browser) would outlive a session killed by a
timeout, a second Ctrl-C or SIGKILL, since only a fixture's teardown stops it. So such a
helper tells the reaper about it with :func:`reap_at_exit`. The reaper is one small
process per session, started on first use in a session of its own (neither Ctrl-C nor a
kill of pytest's process group reaches it), whose standard input is a pipe from pytest,
one instruction a line:

    group PGID        SIGKILL process group PGID, and wait until its processes have ended
    postgres FOLDER   stop the PostgreSQL server whose data is FOLDER/data (SIGQUIT, its
                      immediate shutdown; SIGKILL if it is still there 5 s later), then
                      remove FOLDER
    -INSTRUCTION      forget INSTRUCTION: the helper ended that itself (:func:`forget`)

When the pipe closes, the pytest process has exited (normally, interrupted or killed) and
the reaper carries out the instructions left, the latest first, and exits: as diel's
trial warden (diel/executive/warden.py) does for a rank's trial processes. The reaper
itself runs ``python -I -S`` on this file and uses the standard library only.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

STOP_WAIT_S = 5.0
_started: dict[str, subprocess.Popen | None] = {"reaper": None}
# The PostgreSQL server starts in a thread of its own (tests/helpers/postgres.py) while
# tests run: two first calls at once would start two reapers, and the one forgotten
# would, once collected, see its pipe close and carry out its instructions mid-session.
_one_at_a_time = threading.Lock()


# -- the test session's side ----------------------------------------------------------------

def reap_at_exit(instruction: str) -> None:
    """Have ``instruction`` carried out once this process has ended, however it ends
    (from any thread)."""
    with _one_at_a_time:
        reaper = _started["reaper"]
        if reaper is None:
            reaper = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).resolve())],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
            _started["reaper"] = reaper
            atexit.register(_finish)
        reaper.stdin.write(f"{instruction}\n".encode())
        reaper.stdin.flush()


def forget(instruction: str) -> None:
    """Take back ``instruction``: what it would end has ended."""
    reap_at_exit(f"-{instruction}")


def _finish() -> None:
    """At a normal exit: close the pipe and wait for the reaper, so that nothing is left
    when the session returns."""
    reaper = _started["reaper"]
    if reaper is not None:
        reaper.stdin.close()
        reaper.wait(timeout=4 * STOP_WAIT_S)


# -- the reaper -----------------------------------------------------------------------------

def ended(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` is gone, waiting up to ``timeout`` s (on its pidfd: no
    polling)."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], timeout)[0])
    finally:
        os.close(descriptor)


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (a zombie has ended: only its parent,
    init for an orphan, has yet to collect it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:   # it ended meanwhile
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def kill_group(pgid: str) -> None:
    """SIGKILL every process of group ``pgid`` and wait until they have ended."""
    members = group_members(int(pgid))
    try:
        os.killpg(int(pgid), signal.SIGKILL)
    except ProcessLookupError:
        return
    for pid in members:
        ended(pid, STOP_WAIT_S)


def stop_postgres(folder: str) -> None:
    """Stop the server of ``folder/data``, if it still runs there, and remove ``folder``."""
    data = Path(folder) / "data"
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        running_here = os.readlink(f"/proc/{pid}/cwd") == str(data.resolve())
    except (OSError, ValueError, IndexError):   # never started, stopped, or not a pid
        running_here = False
    if running_here:
        os.kill(pid, signal.SIGQUIT)
        if not ended(pid, STOP_WAIT_S):
            os.kill(pid, signal.SIGKILL)
            ended(pid, STOP_WAIT_S)
    shutil.rmtree(folder, ignore_errors=True)


ACTIONS = {"group": kill_group, "postgres": stop_postgres}


def main() -> int:
    pending: list[str] = []
    for raw in sys.stdin.buffer:   # until the session's end of the pipe closes
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith("-"):
            if line[1:] in pending:
                pending.remove(line[1:])
        elif line:
            pending.append(line)
    for line in reversed(pending):
        action, _, argument = line.partition(" ")
        try:
            ACTIONS[action](argument)
        except (KeyError, OSError, ValueError) as error:
            print(f"reaper: {line}: {error!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
