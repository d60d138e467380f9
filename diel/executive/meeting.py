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
once it is bound, and a rank bound after it tells the leader it is; a rank that is ready
sends the leader one message and waits for its answer, which the leader sends, once all
have come, to every rank (those still on their way find it when they come). Every wait
is bounded (a rank that cannot meet goes on after :data:`MEETING_TIMEOUT_S` at most, as
before this meeting existed); nothing polls.

A rank that dies before MPI starts (a crash, a kill, the kernel's OOM killer) must end
the job: MPICH's Hydra does not end a job whose rank exited before it reached
``MPI_Init``, and the others would wait in it, spinning, for ever. So the waiting ranks
wake every :data:`LOOK_PERIOD_S` to see whether the ones they wait for are still there
(the socket's address is gone with its process): the leader each rank it saw bound that
has not gone on, a rank the leader it saw bound, and under MPICH's Hydra every rank
whether its proxy on the node still runs a process per rank (a rank may die before the
others could see it). A socket closed without a word (a rank that goes on without an answer says so
first, the leader tells every rank its answer before it closes) is a rank that ended:
the leader tells the others, and every rank raises :class:`RankEnded`, to end without
MPI. Where no key or no place on the node
is known (another launcher, a single rank on the node, not Linux), there is no meeting.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time

from diel.procfs import process_stat

__all__ = ["Meeting", "RankEnded", "open_meeting", "job_key", "MEETING_TIMEOUT_S"]

#: The longest a rank waits for the others of its node (from its meeting's opening, about
#: the same moment on every rank) before it starts MPI anyway.
MEETING_TIMEOUT_S = 60.0
#: How often a waiting rank wakes to see whether the ranks it waits for are still there.
LOOK_PERIOD_S = 0.5
#: How many ancestors up a rank looks for the launcher's proxy (a wrapper such as
#: ``/usr/bin/time`` stands between them).
PROXY_ANCESTORS = 4
HYDRA_PROXY = "hydra_pmi_proxy"   # MPICH's, one per node and job: the parent of its ranks
#: The leader's "I am bound", a rank's "I am bound", "I have come" and "I went on without
#: an answer", the leader's "go, all came" and "go, some did not come in time".
HERE, BOUND, ARRIVED, LEFT = b"here", b"bound", b"arrived", b"left"
ALL_CAME, SOME_CAME = b"all", b"some"
#: The leader's "local rank N ended before MPI started: end" (followed by N).
ENDED = b"ended "
UNKNOWN_RANK = -1   # N where the leader knows that one ended, not which

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
        found = process_stat(pid)
        if found is None:
            return None
        if found.name == HYDRA_PROXY:
            return f"hydra-{pid}-{found.started}"
        pid = found.parent
    return None


def _read(path: str) -> str:
    """The text of the file at ``path`` (under /proc)."""
    with open(path, "rb") as file:
        return file.read().decode(errors="replace")


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


class RankEnded(Exception):
    """A rank of this node ended before MPI started: this one must end too, without MPI
    (``MPI_Init`` would wait for the one gone for ever). ``local_rank``: which one
    (:data:`UNKNOWN_RANK` where the leader knows only that one did)."""

    def __init__(self, local_rank: int) -> None:
        which = "a rank" if local_rank == UNKNOWN_RANK else f"local rank {local_rank}"
        super().__init__(f"{which} of this node ended before MPI started")
        self.local_rank = local_rank


class Meeting:
    """This rank's socket in its node's meeting, until :meth:`meet` (or :meth:`close`)."""

    def __init__(self, key: str, local_rank: int, local_size: int) -> None:
        self.key = key
        self.local_rank = local_rank
        self.local_size = local_size
        self._opened = time.monotonic()   # about the same moment on every rank of the node
        self._seen: set[int] = set()   # the local ranks seen bound (the leader, for the others)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.bind(self.address(local_rank))
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
        False). :class:`RankEnded` where a rank of the node ended meanwhile."""
        deadline = self._opened + timeout
        try:
            met = self._lead(deadline) if self.local_rank == 0 else self._join(deadline)
        except OSError:   # the leader went away, or the wait ran out while sending
            met = False
            if self.local_rank == 0:   # a word before it closes: it has not ended
                self._tell_all(SOME_CAME)
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
        """Tell the other side that this rank is bound: the leader the ranks already bound
        (the others find it so, and tell it), a rank the leader, if it is."""
        self._socket.setblocking(False)
        if self.local_rank != 0:
            try:
                self._socket.sendto(BOUND, self.address(0))
            except BlockingIOError:   # bound, its queue full: it sees this rank as it looks
                pass
            except OSError:   # not bound yet: it says when
                return
            self._seen.add(0)
            return
        for rank in range(1, self.local_size):
            if self._send(HERE, rank):
                self._seen.add(rank)

    def _lead(self, deadline: float) -> bool:
        """Wait for every other rank's arrival, looking every :data:`LOOK_PERIOD_S` for
        ranks that ended; then answer every rank (those on their way find it)."""
        peers = {self.address(rank): rank for rank in range(1, self.local_size)}
        arrived: set[int] = set()
        went_on: set[int] = set()
        look = time.monotonic() + LOOK_PERIOD_S
        while len(arrived) < self.local_size - 1 and self._wait_until(min(deadline, look)):
            try:
                message, sender = self._socket.recvfrom(64)
            except TimeoutError:
                message, sender = b"", None
            self._note(message, peers.get(sender), arrived, went_on)
            if time.monotonic() >= look:
                self._look_for_ended(peers, arrived, went_on)
                look = time.monotonic() + LOOK_PERIOD_S
        met = len(arrived) == self.local_size - 1
        self._tell_all(ALL_CAME if met else SOME_CAME)
        return met

    def _note(self, message: bytes, rank: int | None, arrived: set[int],
              went_on: set[int]) -> None:
        """The leader: note what rank ``rank`` (None: not one of this meeting's) said."""
        if rank is None:
            return
        self._seen.add(rank)
        if message == ARRIVED:
            arrived.add(rank)
        elif message == LEFT:
            went_on.add(rank)

    def _look_for_ended(self, peers: dict[bytes, int], arrived: set[int],
                        went_on: set[int]) -> None:
        """The leader: raise :class:`RankEnded`, having told every other rank, where a rank
        it saw bound, that has not gone on (come, it waits for the answer), is no longer
        bound."""
        waited = set(range(1, self.local_size)) - went_on
        gone = {rank for rank in waited if not self._bound(rank)}
        self._seen |= waited - gone
        self._socket.setblocking(False)
        while True:   # what a rank said before it closed is queued here already
            try:
                message, sender = self._socket.recvfrom(64)
            except BlockingIOError:
                break
            self._note(message, peers.get(sender), arrived, went_on)
        ended = sorted((gone & self._seen) - went_on)
        if not ended and self._one_ended_unseen():   # the leader cannot say which
            ended = [UNKNOWN_RANK]
        if ended:
            self._tell_all(ENDED + str(ended[0]).encode())
            raise RankEnded(ended[0])

    def _one_ended_unseen(self) -> bool:
        """Whether MPICH's Hydra proxy of this node's ranks runs fewer processes than the
        node has ranks: one of them ended, maybe one this rank could not see bound (it
        died before the leader was)."""
        running = self._proxy_children()
        return running is not None and running < self.local_size

    def _proxy_children(self) -> int | None:
        """How many processes MPICH's Hydra proxy of this node's ranks runs now, zombies
        left out: one per rank of the node (the rank, or a wrapper of it) until a rank ends;
        None where unknown (no Hydra, no /proc/PID/task/TID/children)."""
        if not self.key.startswith("hydra-"):
            return None
        proxy = self.key.split("-")[1]
        try:
            children = [pid for task in os.listdir(f"/proc/{proxy}/task")
                        for pid in _read(f"/proc/{proxy}/task/{task}/children").split()]
        except (OSError, ValueError):
            return None
        found = [process_stat(int(pid)) for pid in children]
        return sum(stat is not None and not stat.ended for stat in found)

    def _tell_all(self, message: bytes) -> None:
        """The leader: send ``message`` to every other rank that is bound."""
        self._socket.setblocking(False)
        for rank in range(1, self.local_size):
            self._send(message, rank)

    def _join(self, deadline: float) -> bool:
        """Tell the leader this rank has come, and wait for its answer (:meth:`_answer`);
        tell it when this rank goes on without one."""
        try:
            answer = self._answer(deadline)
        except OSError:   # the leader went away, or the wait ran out while sending
            gone = 0 in self._seen and not self._bound(0)
            answer = self._last_word((ALL_CAME, SOME_CAME)) if gone else None
        if answer is None:   # the leader, if it waits yet, must not take this rank for ended
            self._socket.setblocking(False)
            self._send(LEFT, 0)
        return answer == ALL_CAME

    def _answer(self, deadline: float) -> bytes | None:
        """Tell the leader this rank has come (once the leader is bound), then wait for
        its answer; None when none came in time."""
        leader = self.address(0)
        try:
            self._socket.connect(leader)
        except (ConnectionRefusedError, FileNotFoundError):   # not bound: it says when
            answer = self._receive((HERE, ALL_CAME, SOME_CAME), deadline)
            if answer != HERE:   # none in time, or the leader's answer before it left
                return answer
            self._socket.connect(leader)
        self._seen.add(0)
        if not self._wait_until(deadline):
            return None
        self._socket.send(ARRIVED)   # sleeps while the leader's queue is full
        return self._receive((ALL_CAME, SOME_CAME), deadline)

    def _receive(self, expected: tuple[bytes, ...], deadline: float) -> bytes | None:
        """Wait until ``deadline`` for one of the messages ``expected``, looking every
        :data:`LOOK_PERIOD_S` whether the leader, if seen bound, still is; None when none
        came. :class:`RankEnded` when the leader says a rank ended, or ended itself."""
        while self._wait_until(min(deadline, time.monotonic() + LOOK_PERIOD_S)):
            try:
                message = self._socket.recv(64)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    return None
                if 0 in self._seen and not self._bound(0):
                    return self._last_word(expected)
                if self._one_ended_unseen():
                    raise RankEnded(UNKNOWN_RANK)
                continue
            if message.startswith(ENDED):
                raise RankEnded(int(message[len(ENDED):]))
            if message == HERE:
                self._seen.add(0)
            if message in expected:
                return message
        return None

    def _last_word(self, expected: tuple[bytes, ...]) -> bytes:
        """A rank whose leader is no longer bound: the leader's answer, queued here before
        it closed; :class:`RankEnded` (the leader's) where there is none."""
        self._socket.setblocking(False)
        while True:
            try:
                message = self._socket.recv(64)
            except BlockingIOError:
                raise RankEnded(0) from None
            if message.startswith(ENDED):
                raise RankEnded(int(message[len(ENDED):]))
            if message in expected:
                return message

    def _bound(self, rank: int) -> bool:
        """Whether local rank ``rank``'s socket is bound (a socket's address is gone with
        it, and with its process)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
                probe.connect(self.address(rank))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:   # bound, taking words from its leader only; or out of descriptors
            return True
        return True

    def _send(self, message: bytes, rank: int) -> bool:
        """Send ``message`` to local rank ``rank`` without waiting; whether it went (not
        where the rank is not bound, or its queue is full)."""
        try:
            self._socket.sendto(message, self.address(rank))
        except OSError:
            return False
        return True

    def _wait_until(self, deadline: float) -> bool:
        """Let the socket's next operation wait until ``deadline``; False when it is past."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self._socket.settimeout(left)
        return True
