"""Doorbells: a rank waiting for a message sleeps until the sender wakes it.

MPICH's blocking receive spins, so a waiting rank polls ``improbe`` between sleeps
(:mod:`tuplespace.backoff`). Each poll is a wake-up (40-60 µs of CPU on a virtual
machine), and to keep hops short the sleeps after traffic are short: in a busy search
the ranks spent most of their CPU waking to find nothing. A doorbell removes those
wake-ups between ranks of one node: each process has a datagram socket in Linux's
abstract namespace (no file, gone with the process); a sender that knows the receiver's
bell sends it one byte after each message, and a receiver whose awaited peers all ring
sleeps in ``poll`` on its socket, with long sleeps (:data:`FIRST_SLEEP` growing as in
:class:`~tuplespace.backoff.Backoff`) only as a safety net.

Ranks learn each other's bells in band, so nothing collective is needed: the first
envelope a process sends to a peer carries its bell's address and node, later ones a
flag saying whether this message was rung. A receiver counts on a peer's rings only after
a message from it arrived rung (and stops at the first one that was not), so a message
from a peer that does not (yet) know its bell, or from another node, is never waited for
on the bell alone: :meth:`Doorbell.rung_by` is false and the caller polls as before.

Everything is per process and keyed by world rank (a bell wakes the process, whichever
communicator the message came on), so a second client a rank makes later (the executive's
shutdown client) rings at once. Two threads of one process waiting at once (each with its
own communicator) may take each other's rings; each then wakes at its safety-net sleep.
Linux only; elsewhere :func:`doorbell` is None.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
from typing import Any, Iterable

from .memfiles import node_identity

__all__ = ["Doorbell", "doorbell", "FIRST_SLEEP"]

#: The first sleep of a wait whose peers all ring (then doubling, as any Backoff): only a
#: ring that never comes (a peer's failed send) is waited out this long.
FIRST_SLEEP = 1e-3
_DRAIN_BYTES = 256

_lock = threading.Lock()
_bell: Doorbell | None = None


def doorbell() -> Doorbell | None:
    """This process's doorbell (made on first use), or None where there are none."""
    global _bell
    if not sys.platform.startswith("linux"):
        return None
    with _lock:
        if _bell is None or _bell.pid != os.getpid():   # a forked child makes its own
            try:
                _bell = Doorbell()
            except OSError:
                return None
        return _bell


class Doorbell:
    """This process's socket and what it knows of its peers' (by world rank): their
    addresses on this node, which of them were told ours, and which ring."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.node = node_identity()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind("")   # Linux picks a free abstract address
        self._socket.setblocking(False)
        self.address: bytes = self._socket.getsockname()
        self._poll = select.poll()
        self._poll.register(self._socket.fileno(), select.POLLIN)
        self._peers: dict[int, bytes] = {}   # world rank -> its bell, on this node
        self._told: set[int] = set()         # peers our address was sent to
        self._ringing: set[int] = set()      # peers whose last message was rung
        self.changes = 0   # how often the ringing peers changed (for callers' caches)

    def stamp(self, peer: int) -> Any:
        """What the next envelope to world rank ``peer`` carries: our address, node and
        whether it will be rung on the first message, then only that flag."""
        rung = peer in self._peers
        if peer in self._told:
            return rung
        self._told.add(peer)
        return (self.address, self.node, rung)

    def ring(self, peer: int) -> None:
        """Wake ``peer`` (after a message stamped as rung went to it); a peer whose bell
        is gone (it ended) is not rung again, and its next messages say so (another
        thread of this process may have found that first)."""
        address = self._peers.get(peer)
        if address is None:
            return
        try:
            self._socket.sendto(b"\0", address)
        except BlockingIOError:
            pass   # its socket is full of rings: it is awake or about to be
        except OSError:
            self._peers.pop(peer, None)

    def heard(self, peer: int, stamp: Any) -> None:
        """Note a message's stamp from world rank ``peer``."""
        if type(stamp) is tuple:
            address, node, stamp = stamp
            if node == self.node:
                self._peers[peer] = address
        if (stamp is True) != (peer in self._ringing):
            self.changes += 1
            if stamp is True:
                self._ringing.add(peer)
            else:
                self._ringing.discard(peer)

    def rung_by(self, peers: Iterable[int]) -> bool:
        """Whether every one of ``peers`` (world ranks) rings this process."""
        ringing = self._ringing
        return all(peer in ringing for peer in peers)

    def drain(self) -> None:
        """Forget the rings so far (call before the last look for a message)."""
        try:
            while True:
                self._socket.recv(_DRAIN_BYTES)
        except BlockingIOError:
            pass

    def wait(self, seconds: float) -> bool:
        """Sleep until rung or ``seconds`` pass (millisecond steps); True when rung."""
        return bool(self._poll.poll(seconds * 1000.0))
