"""The transport over MPI (mpi4py), without any spinning blocking call.

An envelope ``(kind, rid, tag, arg, inline data, oob nbytes, bell)`` travels as one small
pickled message on ``CTRL_TAG``. Data up to ``inline_max`` bytes rides inside it; larger
data (array payloads) follows as a raw buffer message on ``DATA_TAG`` from the same
source, so it is never pickled or copied into a pickle. MPI keeps messages between two
ranks on one tag in order, so the k-th announced payload is the k-th on ``DATA_TAG``.

Waiting is ``improbe``/``Test`` with :class:`~tuplespace.backoff.Backoff` (MPICH's
blocking receive spins a core). The backoff persists across calls, so an idle rank
sleeps in steps that grow with its idleness, and one that just had traffic (a message
received or sent) spins briefly. Ranks of one node ring each other's doorbell after each
message (``bell``: :meth:`~tuplespace.doorbell.Doorbell.stamp`); a wait for peers that
all ring sleeps on the bell instead of polling (:mod:`tuplespace.doorbell`). MPICH shows
a message that arrived while the rank slept at its second ``improbe``, not its first
(the first moves it into MPI's queue), so a rank probes twice before it sleeps.
"""

from __future__ import annotations

import os
import time
from typing import Any, Collection

from mpi4py import MPI

from . import doorbell
from .backoff import Backoff
from .codec import copy_bytes, nbytes
from .protocol import CTRL_TAG, DATA_TAG, Message
from .transport import IntoFn, Transport

__all__ = ["MpiTransport", "INLINE_MAX"]

INLINE_MAX = 64 * 1024
SPIN_SECONDS = 300e-6   # keep polling this long after the last message: a reply is near
FIRST_SLEEP = 50e-6     # then sleeps of 50 us (kept precise: tuplespace.backoff lowers the
HOLD_SECONDS = 10e-3    # timer slack) for HOLD_SECONDS, then doubling up to MAX_SLEEP.
MAX_SLEEP = 4e-3        # Shorter first sleeps poll so often that oversubscribed waiters
                        # steal the CPU of the ranks doing the work (measured: 1 us gave
                        # half the search dispatch rate of 50 us on 2 cores, 6 ranks)


def oversubscribed() -> bool:
    """True when this node runs more MPI ranks than this rank may use cores.

    Hydra (MPICH's mpiexec) sets ``MPI_LOCALNRANKS``. Spinning then only steals the
    core that the rank we wait for needs, so waiters sleep at once instead.
    """
    local = int(os.environ.get("MPI_LOCALNRANKS", "1"))
    return local > len(os.sched_getaffinity(0))


def _relax() -> None:
    """Give the core away briefly between tests of a transfer in flight.

    A real sleep, not sleep(0): ranks that spin while their sends are in flight take the
    cores the receiving rank needs to copy the data (measured with 4 servers sending to
    one client on 2 cores: 62% of raw bandwidth with sleep(0), 100% with 20 us)."""
    time.sleep(20e-6)


class MpiTransport(Transport):
    """:class:`Transport` over ``comm`` (use a communicator kept for the tuple space)."""

    def __init__(self, comm: MPI.Comm, inline_max: int = INLINE_MAX,
                 spin: float | None = None) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.inline_max = inline_max
        if spin is None:
            spin = 0.0 if oversubscribed() else SPIN_SECONDS
        self.backoff = Backoff(spin=spin, first_sleep=FIRST_SLEEP, max_sleep=MAX_SLEEP,
                               hold=HOLD_SECONDS)
        self.bell = doorbell.doorbell()
        self._rung_wait = Backoff(spin=spin, first_sleep=doorbell.FIRST_SLEEP,
                                  max_sleep=max(MAX_SLEEP, doorbell.FIRST_SLEEP))
        # each rank's world rank: doorbells belong to processes, whatever the communicator
        self._world = MPI.Group.Translate_ranks(comm.Get_group(), list(range(self.size)),
                                                MPI.COMM_WORLD.Get_group())
        self._rung_cache: tuple[Collection[int] | None, int, bool] = (None, -1, False)
        self._status = MPI.Status()
        self._small: list[MPI.Request] = []             # envelope sends
        self._large: list[tuple[MPI.Request, Any]] = []  # raw sends and the buffers they read
        self._incoming: list[MPI.Request] = []           # raw receives started by recv(into=)

    # -- sending -----------------------------------------------------------------
    def send(self, dest: int, kind: int, rid: int = 0, tag: str | None = None,
             arg: Any = None, data: Any = None) -> None:
        peer = self._world[dest]
        bell = None if self.bell is None or peer == MPI.UNDEFINED else self.bell.stamp(peer)
        if data is None:
            env = (kind, rid, tag, arg, None, -1, bell)
        else:
            size = nbytes(data)
            if size <= self.inline_max:
                if not isinstance(data, (bytes, bytearray)):   # an array's buffer
                    data = bytearray(memoryview(data))
                env = (kind, rid, tag, arg, data, -1, bell)
            else:
                env = (kind, rid, tag, arg, None, size, bell)
        self._traffic()   # a reply or the next request is near
        req = self.comm.isend(env, dest, CTRL_TAG)
        # Testing at once makes MPICH push the message now; left alone, an eager send
        # can sit in the sender's queue until its next MPI call, maybe a sleep later.
        if not req.Test():
            self._small.append(req)
            if len(self._small) > 64:
                self._small = [r for r in self._small if not r.Test()]
        if env[5] >= 0:
            self._large.append((self.comm.Isend([data, MPI.BYTE], dest, DATA_TAG), data))
        if bell is True or (type(bell) is tuple and bell[2]):
            self.bell.ring(peer)   # after the message is out, so the woken rank finds it

    def _traffic(self) -> None:
        """A message came or went: the waits start again from their shortest sleeps."""
        self.backoff.reset()
        self._rung_wait.reset()

    def progress(self) -> None:
        if self._large:
            self._large = [(r, b) for r, b in self._large if not r.Test()]
        if self._incoming and MPI.Request.Testall(self._incoming):
            self._incoming = []

    def _small_pending(self) -> bool:
        """True while some envelope sends have not completed (tests them)."""
        if self._small:
            self._small = [r for r in self._small if not r.Test()]
        return bool(self._small)

    def has_pending_sends(self) -> bool:
        return bool(self._large)

    def flush(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.progress()
            self._small = [r for r in self._small if not r.Test()]
            if not self._large and not self._small:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            _relax()  # a transfer is in flight: its peer is receiving now

    # -- receiving ---------------------------------------------------------------
    def _poll(self, into: IntoFn | None) -> Message | None:
        status = self._status
        handle = self.comm.improbe(MPI.ANY_SOURCE, CTRL_TAG, status)
        if handle is None:
            return None
        kind, rid, tag, arg, data, oob, bell = handle.recv()
        source = status.Get_source()
        if bell is not None and self.bell is not None:
            self.bell.heard(self._world[source], bell)
        msg = Message(source, kind, rid, tag, arg, data)
        if oob >= 0:
            buf = into(msg) if into is not None else None
            if buf is None:
                import numpy as np   # only where an array's payload arrives
                buf = np.empty(oob, dtype=np.uint8)
            req = self.comm.Irecv([buf, MPI.BYTE], source, DATA_TAG)
            if into is None:
                self._wait([req])
            else:
                self._incoming.append(req)
            msg.data = buf
        elif data is not None and into is not None:
            buf = into(msg)
            if buf is not None:
                copy_bytes(buf, data)
                msg.data = buf
        return msg

    def _rung_by(self, peers: Collection[int] | None) -> bool:
        """Whether every rank that may send what this wait is for rings this one (the
        answer for the same ``peers`` object is kept until the ringing peers change:
        a server asks it for all its clients before each sleep)."""
        if self.bell is None or not peers:
            return False
        asked, changes, answer = self._rung_cache
        if asked is not peers or changes != self.bell.changes:
            world = self._world
            answer = self.bell.rung_by(world[peer] for peer in peers)
            self._rung_cache = (peers, self.bell.changes, answer)
        return answer

    def recv(self, timeout: float | None = None, into: IntoFn | None = None,
             peers: Collection[int] | None = None) -> Message | None:
        msg = self._poll(into)
        if msg is not None:
            self._traffic()
            return msg
        if timeout is not None and timeout <= 0:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._large or self._incoming:
                self.progress()
                _relax()   # keep large transfers moving: MPI moves them only while polled
            else:
                # Sends still queued move only while this rank calls MPI: poll at least
                # every MAX_SLEEP until they are out, however long the wait has been.
                limit = MAX_SLEEP if self._small_pending() else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    limit = left if limit is None else min(limit, left)
                if self._rung_by(peers):
                    bell = self.bell
                    msg = self._poll(into)   # the second look since the last: a message is
                    if msg is None:          # most often there, and no ring need be read
                        bell.drain()   # a ring from here on wakes the sleep below
                        msg = self._poll(into) or self._poll(into)
                    if msg is not None:
                        self._traffic()
                        return msg
                    self._rung_wait.pause(limit, bell.wait)
                else:
                    self.backoff.pause(limit)
            msg = self._poll(into)
            if msg is not None:
                self._traffic()
                return msg
            if deadline is not None and self._large and time.monotonic() >= deadline:
                return None

    def wait_incoming(self) -> None:
        self._wait(self._incoming)
        self._incoming = []

    @staticmethod
    def _wait(requests: list[MPI.Request]) -> None:
        """Complete receives whose payload is on its way (announced, send posted).

        Test with a pause: a spinning ``Waitall`` would take the core that the sending
        ranks need to push the payload when ranks outnumber cores.
        """
        while not MPI.Request.Testall(requests):
            _relax()
