"""The tuple server: answers PUT/TAKE/READ/TAKE_ANY until told to stop.

Run one on each server rank: ``Server(comm, servers).run(should_stop=...)``. It stops
when ``should_stop()`` turns true (checked every ``stop_check_interval`` seconds, since
the check may itself cost an MPI probe) or when a client sends SHUTDOWN
(:meth:`tuplespace.Client.shutdown`). On stopping it sends STOPPED to every non-server
rank, so a client waiting on it (or calling it later) raises instead of hanging, and
logs one line with what it served and what was still stored.

Chunks of the distributed store of at least :data:`~tuplespace.memfiles.MAP_MIN_BYTES`
are received into memory files (:mod:`tuplespace.memfiles`), sealed on arrival. A
READ_MAP from a client on this node is answered with a grant of the file instead of its
bytes; the server keeps the grant (and so the file, should the value be taken meanwhile)
until the reader says it has opened it (OPENED), or for :data:`GRANT_SECONDS` at most (a
reader that died). A file is closed once nothing refers to it: the store, a send in
flight, a grant.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any, Callable, Sequence

from . import memfiles
from .codec import payload_nbytes
from .dist import chunk_nbytes
from .protocol import (EMPTY, ERROR, HELLO, MAPPED, OPENED, PUT, PUT_MANY, READ, READ_MAP,
                       SHUTDOWN, STOPPED, TAKE, TAKE_ANY, TAKE_MANY, VALUE, VALUES, WELCOME,
                       KIND_NAMES, Message)
from .store import Entry, TagStore, Waiter
from .transport import Transport

__all__ = ["Server", "make_transport"]

STOP_CHECK_INTERVAL = 0.05   # a stop may wait this long; checking more often wakes an
                             # idle server more often (each wake costs ~50 us of CPU)
GRANT_SECONDS = 60.0         # a grant not acknowledged by then is dropped (its reader died)


def make_transport(comm: Any) -> Transport:
    """``comm`` as a :class:`Transport`: an mpi4py communicator is wrapped, a Transport kept."""
    if isinstance(comm, Transport):
        return comm
    from .mpi_transport import MpiTransport   # mpi4py only when MPI is used
    return MpiTransport(comm)


def _check_timeout(timeout: Any) -> str | None:
    """None if ``timeout`` is valid (None or a number >= 0), else what is wrong."""
    if timeout is None or (type(timeout) in (int, float) and timeout >= 0):
        return None
    return f"timeout must be None or a number >= 0, got {timeout!r}"


class Server:
    """One tuple-space server rank. ``servers`` lists all server ranks (for the stop notice)."""

    def __init__(self, comm: Any, servers: Sequence[int] | None = None, *,
                 max_message_bytes: int | None = None, log: logging.Logger | None = None,
                 stop_check_interval: float = STOP_CHECK_INTERVAL) -> None:
        self.transport = make_transport(comm)
        self.rank = self.transport.rank
        self.servers = list(servers) if servers is not None else [self.rank]
        if self.rank not in self.servers:
            raise ValueError(f"rank {self.rank} runs a server but is not in servers={self.servers}")
        if max_message_bytes is not None and (type(max_message_bytes) is not int
                                              or max_message_bytes <= 0):
            raise ValueError(f"max_message_bytes must be a positive int or None, "
                             f"got {max_message_bytes!r}")
        if stop_check_interval <= 0:
            raise ValueError(f"stop_check_interval must be > 0, got {stop_check_interval!r}")
        self.max_message_bytes = max_message_bytes
        self.log = log or logging.getLogger("tuplespace.server")
        self.stop_check_interval = stop_check_interval
        self.store = TagStore()
        self.requests = 0
        self.maps_granted = 0
        self._stopping = False
        self._node = memfiles.node_identity()
        self._arriving: memfiles.MemoryFile | None = None   # the chunk being received
        self._grants: dict[int, tuple[float, memfiles.MemoryFile]] = {}   # by number, oldest first
        self._grant_numbers = itertools.count(1)
        self._handlers: dict[int, Callable[[Message], None]] = {
            PUT: self._on_put, PUT_MANY: self._on_put_many, TAKE: self._on_get,
            READ: self._on_get, READ_MAP: self._on_get, OPENED: self._on_opened,
            TAKE_ANY: self._on_take_any, TAKE_MANY: self._on_take_many,
            HELLO: self._on_hello, SHUTDOWN: self._on_shutdown}

    # -- the loop ----------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] | None = None) -> dict:
        """Serve until ``should_stop()`` is true or a SHUTDOWN arrives; returns the stats."""
        transport, store = self.transport, self.store
        interval = self.stop_check_interval
        now = time.monotonic()
        next_check = now + interval
        wait: float | None = interval if should_stop is not None else None
        clients = [rank for rank in range(transport.size) if rank not in self.servers]
        while not self._stopping:
            msg = transport.recv(wait, self._receive_into, clients)
            if msg is not None:
                transport.wait_incoming()
                self._dispatch(msg)
            now = time.monotonic()
            deadline = store.next_deadline()
            if deadline is not None and deadline <= now:
                for waiter in store.expire(now):
                    transport.send(waiter.source, EMPTY, waiter.rid)
                deadline = store.next_deadline()
            if should_stop is not None:
                if now >= next_check:
                    next_check = now + interval
                    if should_stop():
                        break
                wait = next_check - now
            else:
                wait = None
            if deadline is not None:
                wait = deadline - now if wait is None else min(wait, deadline - now)
            if transport.has_pending_sends():
                transport.progress()
        return self._finish()

    def _receive_into(self, msg: Message) -> object | None:
        """Where an arriving payload goes: a new memory file for a large chunk (kept in
        ``_arriving`` for :meth:`_on_put`), else None (ordinary memory)."""
        size = chunk_nbytes(msg.arg) if msg.kind == PUT else None
        if size is None or size < memfiles.MAP_MIN_BYTES or not memfiles.supported():
            return None
        try:
            self._arriving = memfiles.MemoryFile(size, "tuplespace-chunk")
        except OSError as e:   # out of descriptors or memory: ordinary memory then
            self.log.debug("tuplespace server %d: a chunk is kept in ordinary memory: %s",
                           self.rank, e)
            return None
        return self._arriving.data

    def _dispatch(self, msg: Message) -> None:
        self.requests += 1
        handler = self._handlers.get(msg.kind)
        try:
            if handler is None:
                raise ValueError(f"unknown message kind {msg.kind!r}")
            handler(msg)
        except Exception as e:  # a bad request must never take the server down
            name = KIND_NAMES.get(msg.kind, str(msg.kind))
            self.log.warning("tuplespace server %d: bad %s from rank %d: %s",
                             self.rank, name, msg.source, e)
            self.transport.send(msg.source, ERROR, msg.rid, msg.tag if type(msg.tag) is str else None,
                                f"server rank {self.rank} refused {name}: {e}")

    def _finish(self) -> dict:
        """Tell every client rank that this server stopped, then log and return the stats."""
        transport = self.transport
        for rank in range(transport.size):
            if rank not in self.servers:
                transport.send(rank, STOPPED)
        flushed = transport.flush(timeout=5.0)
        values, tags = self.store.stored_count()
        self._grants.clear()
        stats = {"rank": self.rank, "requests": self.requests, "values_left": values,
                 "tags_left": tags, "waiters_released": self.store.waiting_count(),
                 "maps_granted": self.maps_granted}
        self.log.debug("tuplespace server rank %d stopped: %d requests served, %d values left "
                      "in %d tags, %d waiters released%s", self.rank, self.requests, values, tags,
                      stats["waiters_released"], "" if flushed else " (some sends unfinished)")
        return stats

    # -- handlers ----------------------------------------------------------------
    def _on_put(self, msg: Message) -> None:
        tag = msg.tag
        file, self._arriving = self._arriving, None
        if file is not None:
            msg.data = None   # the receive buffer: let go of it, so that the file seals
            msg.data = file.seal()
        if type(tag) is not str or not tag:
            raise ValueError(f"PUT needs a non-empty str tag, got {tag!r}")
        limit = self.max_message_bytes
        if limit is not None and payload_nbytes(msg.arg, msg.data) > limit:
            raise ValueError(f"tput({tag!r}): value of {payload_nbytes(msg.arg, msg.data)} bytes "
                             f"exceeds max_message_bytes={limit}; it was dropped")
        self._keep(tag, (msg.arg, msg.data, file))

    def _keep(self, tag: str, entry: Entry) -> None:
        """Keep ``entry`` under ``tag``, or hand it to the waiters it releases."""
        for waiter in self.store.put(tag, entry):
            self._hand(waiter, tag, entry)

    def _on_put_many(self, msg: Message) -> None:
        """Several values for one tag, stored in order as PUTs would be; all or none (one
        over ``max_message_bytes`` refuses the message)."""
        tag, values = msg.tag, msg.arg
        if type(tag) is not str or not tag:
            raise ValueError(f"PUT_MANY needs a non-empty str tag, got {tag!r}")
        if type(values) is not list or not all(type(v) is tuple and len(v) == 2 for v in values):
            raise ValueError("PUT_MANY needs a list of (meta, data) pairs")
        limit = self.max_message_bytes
        if limit is not None:
            for meta, data in values:
                if payload_nbytes(meta, data) > limit:
                    raise ValueError(f"tput_many({tag!r}): a value of {payload_nbytes(meta, data)} "
                                     f"bytes exceeds max_message_bytes={limit}; none of the "
                                     f"{len(values)} values was stored")
        for meta, data in values:
            self._keep(tag, (meta, data, None))

    def _on_get(self, msg: Message) -> None:
        tag, timeout = msg.tag, msg.arg
        if type(tag) is not str or not tag:
            raise ValueError(f"a take or read needs a non-empty str tag, got {tag!r}")
        problem = _check_timeout(timeout)
        if problem:
            raise ValueError(problem)
        self._answer(Waiter(msg.source, msg.rid, tag, msg.kind == TAKE,
                            mapped=msg.kind == READ_MAP), timeout)

    def _on_take_many(self, msg: Message) -> None:
        tag, (limit, timeout) = msg.tag, msg.arg
        if type(tag) is not str or not tag:
            raise ValueError(f"a take needs a non-empty str tag, got {tag!r}")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"take_many needs a limit >= 1, got {limit!r}")
        problem = _check_timeout(timeout)
        if problem:
            raise ValueError(problem)
        entries = self.store.take_many(tag, limit)
        if entries:
            self.transport.send(msg.source, VALUES, msg.rid, tag,
                                [(meta, data) for meta, data, _ in entries])
        else:  # wait like a take: the first value to arrive is the whole answer
            self._answer(Waiter(msg.source, msg.rid, tag, True), timeout)

    def _on_take_any(self, msg: Message) -> None:
        tags, prefix, timeout = msg.arg
        problem = _check_timeout(timeout)
        if problem:
            raise ValueError(problem)
        if tags is None and prefix is None:
            raise ValueError("take_any needs tags or a prefix")
        waiter = Waiter(msg.source, msg.rid, None, True,
                        frozenset(tags) if tags is not None else None, prefix)
        self._answer(waiter, timeout)

    def _answer(self, waiter: Waiter, timeout: float | None) -> None:
        found = self.store.request(waiter, timeout, time.monotonic())
        if found is not None:
            self._hand(waiter, *found)
        elif timeout is not None and timeout <= 0:
            self.transport.send(waiter.source, EMPTY, waiter.rid)

    def _hand(self, waiter: Waiter, tag: str, entry: Entry) -> None:
        """Answer ``waiter`` with ``entry``: a grant of its memory file for a reader on
        this node that asked for one, else the value itself."""
        meta, data, file = entry
        if not (waiter.mapped and file is not None):
            self.transport.send(waiter.source, VALUE, waiter.rid, tag, meta, data)
            return
        now = time.monotonic()
        grants = self._grants
        while grants:   # drop the grants of readers that never said they opened the file
            oldest = next(iter(grants))
            if grants[oldest][0] > now:
                break
            del grants[oldest]
        number = next(self._grant_numbers)
        grants[number] = (now + GRANT_SECONDS, file)
        self.maps_granted += 1
        self.transport.send(waiter.source, MAPPED, waiter.rid, tag, file.grant(number))

    def _on_opened(self, msg: Message) -> None:
        self._grants.pop(msg.arg, None)

    def _on_hello(self, msg: Message) -> None:
        self.transport.send(msg.source, WELCOME, msg.rid, None,
                            {"max_message_bytes": self.max_message_bytes, "rank": self.rank,
                             "node": self._node})

    def _on_shutdown(self, msg: Message) -> None:
        self._stopping = True
