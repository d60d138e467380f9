"""The transport interface, and an in-process implementation for tests.

Server and client logic only ever talk to a :class:`Transport`: ``send`` (never blocks
on the receiver) and ``recv`` (waits up to a timeout). :mod:`tuplespace.mpi_transport`
implements it over MPI; :class:`InProcNetwork` over queues and threads, so the same
protocol and contract tests run without MPI.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Callable, Collection, Optional

from .codec import copy_bytes, is_array
from .protocol import Message

__all__ = ["Transport", "InProcNetwork", "InProcTransport", "IntoFn"]

# Called with a received message that carries data; returns a writable buffer of exactly
# len(data) bytes to receive the data into, or None to let the transport allocate.
IntoFn = Callable[[Message], Optional[Any]]


class Transport(ABC):
    """Point-to-point messages between ranks 0..size-1.

    Messages from one sender to one receiver arrive in the order sent. ``data`` is a
    bytes-like object or a flat ``uint8`` array; the transport owns it after ``send``
    (the caller must not change it until :meth:`flush` returns). A transport is used by
    one thread at a time.
    """

    rank: int
    size: int

    @abstractmethod
    def send(self, dest: int, kind: int, rid: int = 0, tag: str | None = None,
             arg: Any = None, data: Any = None) -> None:
        """Queue a message for ``dest`` and return without waiting for the receiver."""

    @abstractmethod
    def recv(self, timeout: float | None = None, into: IntoFn | None = None,
             peers: Collection[int] | None = None) -> Message | None:
        """The next message for this rank, or None after ``timeout`` seconds (None: wait on).

        With ``into``, a message's data is received into the buffer ``into`` returns;
        the receive may still be in flight until :meth:`wait_incoming` returns.
        ``peers``: the ranks whose messages the caller waits for (None: any), a hint
        that lets a transport sleep until one of them wakes it (any message is
        still returned, whoever sent it).
        """

    def wait_incoming(self) -> None:
        """Wait until every data receive started by ``recv(into=...)`` has completed."""

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every send has completed (buffers reusable); False on timeout."""
        return True

    def progress(self) -> None:
        """Let pending sends move on without waiting (call it from idle loops)."""

    def has_pending_sends(self) -> bool:
        """True while some large send is still in flight."""
        return False


class InProcNetwork:
    """``size`` endpoints in one process, each a queue guarded by a condition variable."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._queues: list[deque[Message]] = [deque() for _ in range(size)]
        self._conds = [threading.Condition() for _ in range(size)]

    def endpoint(self, rank: int) -> InProcTransport:
        """The transport for ``rank`` (one per thread that uses it)."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank must be in 0..{self.size - 1}, got {rank}")
        return InProcTransport(self, rank)

    def _deliver(self, dest: int, msg: Message) -> None:
        cond = self._conds[dest]
        with cond:
            self._queues[dest].append(msg)
            cond.notify()

    def _take(self, rank: int, timeout: float | None) -> Message | None:
        cond = self._conds[rank]
        queue = self._queues[rank]
        with cond:
            if not queue and timeout != 0:
                cond.wait_for(lambda: bool(queue), timeout)
            return queue.popleft() if queue else None


class InProcTransport(Transport):
    """One endpoint of an :class:`InProcNetwork`; waiting blocks on a condition (no polling)."""

    def __init__(self, network: InProcNetwork, rank: int) -> None:
        self.network = network
        self.rank = rank
        self.size = network.size

    def send(self, dest: int, kind: int, rid: int = 0, tag: str | None = None,
             arg: Any = None, data: Any = None) -> None:
        if isinstance(data, bytearray) or is_array(data):
            data = data.copy()  # the receiver gets its own bytes, as over MPI
        self.network._deliver(dest, Message(self.rank, kind, rid, tag, arg, data))

    def recv(self, timeout: float | None = None, into: IntoFn | None = None,
             peers: Collection[int] | None = None) -> Message | None:
        msg = self.network._take(self.rank, timeout)
        if msg is not None and into is not None and msg.data is not None:
            buf = into(msg)
            if buf is not None:
                copy_bytes(buf, msg.data)
                msg.data = buf
        return msg
