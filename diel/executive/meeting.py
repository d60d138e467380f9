"""A node's ranks meet, sleeping, before MPI starts.

``diel run`` checks and prepares each rank's module before MPI starts, where the
launcher tells the rank its place (:func:`diel.cli.cmd_run`); some ranks take longer
there than others (the search master imports NumPy and its database's modules). MPICH's
``MPI_Init`` waits for the job's other ranks spinning (``sched_yield`` in a loop), so a
rank that entered it early would eat a core the slow one needs. So the ranks of a node
first meet here, each sleeping in a blocking receive, and enter ``MPI_Init`` together.

Each rank has a datagram socket in Linux's abstract namespace (no file, gone with the
process), named after a key that only the ranks of one job on one node share
(:func:`job_key`) and its local rank. The leader (local rank 0) tells every other rank
once it is bound; a rank that is ready sends the leader one message and waits for its
answer, which the leader sends once all have come. Every wait is bounded (a rank that
cannot meet goes on after :data:`MEETING_TIMEOUT_S` at most, as before this meeting
existed); nothing polls. Where no key or no place on the node is known (another launcher,
a single rank on the node, not Linux), there is no meeting.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time

__all__ = ["Meeting", "open_meeting", "job_key", "MEETING_TIMEOUT_S"]

#: The longest a rank waits for the others of its node (from its meeting's opening, about
#: the same moment on every rank) before it starts MPI anyway.
MEETING_TIMEOUT_S = 60.0
#: How many ancestors up a rank looks for the launcher's proxy (a wrapper such as
#: ``/usr/bin/time`` stands between them).
PROXY_ANCESTORS = 4
HYDRA_PROXY = "hydra_pmi_proxy"   # MPICH's, one per node and job: the parent of its ranks
#: The leader's "I am bound", a rank's "I have come", the leader's "go, all came" and "go,
#: some did not come in time".
HERE, ARRIVED, ALL_CAME, SOME_CAME = b"here", b"arrived", b"all", b"some"

log = logging.getLogger("diel.executive")


def job_key() -> str | None:
    """A name that the ranks of this job on this node share and no other process does:
    the process id and start time of MPICH's Hydra proxy above this rank, or Open MPI's
    (PMIx's) job namespace; None where neither is found."""
    namespace = os.environ.get("PMIX_NAMESPACE")
    if namespace:
        import hashlib   # Open MPI's ranks only: OpenSSL's hashes cost Hydra's ranks ~3 ms each

        return "pmix-" + hashlib.blake2b(namespace.encode(), digest_size=12).hexdigest()
    pid = os.getppid()
    for _ in range(PROXY_ANCESTORS):
        found = _process(pid)
        if found is None:
            return None
        name, parent, started = found
        if name == HYDRA_PROXY:
            return f"hydra-{pid}-{started}"
        pid = parent
    return None


def _process(pid: int) -> tuple[str, int, str] | None:
    """The name, parent and start time (clock ticks since boot) of process ``pid``,
    from /proc; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode(errors="replace")
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        return name, int(fields[1]), fields[19]
    except (OSError, ValueError, IndexError):
        return None


def open_meeting(local_rank: int, local_size: int) -> Meeting | None:
    """This rank's place in the meeting of its node's ranks, open as early as a rank can
    (the leader is bound from here on); None where there is none to have."""
    if local_size < 2 or not sys.platform.startswith("linux"):
        return None
    key = job_key()
    if key is None:
        return None
    try:
        return Meeting(key, local_rank, local_size)
    except OSError:   # out of descriptors: this rank goes on as before
        return None


class Meeting:
    """This rank's socket in its node's meeting, until :meth:`meet` (or :meth:`close`)."""

    def __init__(self, key: str, local_rank: int, local_size: int) -> None:
        self.key = key
        self.local_rank = local_rank
        self.local_size = local_size
        self._opened = time.monotonic()   # about the same moment on every rank of the node
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.bind(self.address(local_rank))
            if local_rank == 0:
                self._tell_bound()
        except OSError:
            self.close()
            raise

    def address(self, local_rank: int) -> bytes:
        """The abstract address of local rank ``local_rank``'s socket."""
        return f"\0diel-meeting-{self.key}-{local_rank}".encode()

    def meet(self, timeout: float = MEETING_TIMEOUT_S) -> bool:
        """Wait, sleeping, until every rank of the node has come here, until ``timeout``
        seconds after this meeting was opened at most (so that a rank slower than that,
        coming to a leader gone, goes on at once); then close. True when all met (a rank
        that the leader let go without some, or that went on without the leader, is
        False)."""
        deadline = self._opened + timeout
        try:
            met = self._lead(deadline) if self.local_rank == 0 else self._join(deadline)
        except OSError:   # the leader went away, or the wait ran out while sending
            met = False
        finally:
            self.close()
        if not met:
            log.debug("the node's ranks did not all meet before MPI's start (%.0f s at "
                      "most); this rank went on", timeout)
        return met

    def close(self) -> None:
        """Close the socket (its address is gone with it); again is harmless."""
        self._socket.close()

    def _tell_bound(self) -> None:
        """The leader: tell the ranks already bound that it is (the others find it so)."""
        self._socket.setblocking(False)
        for rank in range(1, self.local_size):
            try:
                self._socket.sendto(HERE, self.address(rank))
            except OSError:   # not bound yet: it finds the leader when it comes
                pass

    def _lead(self, deadline: float) -> bool:
        """Wait for every other rank's arrival, then answer those that came."""
        peers = {self.address(rank): rank for rank in range(1, self.local_size)}
        arrived: set[int] = set()
        while len(arrived) < self.local_size - 1 and self._wait_until(deadline):
            try:
                message, sender = self._socket.recvfrom(64)
            except TimeoutError:
                break
            if message == ARRIVED and sender in peers:
                arrived.add(peers[sender])
        met = len(arrived) == self.local_size - 1
        self._socket.setblocking(False)
        for rank in sorted(arrived):
            try:
                self._socket.sendto(ALL_CAME if met else SOME_CAME, self.address(rank))
            except OSError:   # it gave up waiting and left
                pass
        return met

    def _join(self, deadline: float) -> bool:
        """Tell the leader this rank has come (once the leader is bound), then wait for
        its answer."""
        leader = self.address(0)
        try:
            self._socket.connect(leader)
        except (ConnectionRefusedError, FileNotFoundError):   # not bound yet: it says when
            if self._receive((HERE,), deadline) is None:
                return False
            self._socket.connect(leader)
        if not self._wait_until(deadline):
            return False
        self._socket.send(ARRIVED)   # sleeps while the leader's queue is full
        return self._receive((ALL_CAME, SOME_CAME), deadline) == ALL_CAME

    def _receive(self, expected: tuple[bytes, ...], deadline: float) -> bytes | None:
        """Wait until ``deadline`` for one of the messages ``expected``; None when none
        came."""
        while self._wait_until(deadline):
            try:
                message = self._socket.recv(64)
            except TimeoutError:
                return None
            if message in expected:
                return message
        return None

    def _wait_until(self, deadline: float) -> bool:
        """Let the socket's next operation wait until ``deadline``; False when it is past."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self._socket.settimeout(left)
        return True
