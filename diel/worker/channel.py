"""Pickled messages over a Unix stream socket: the worker rank's line to its isolated
trial child (:mod:`diel.worker.isolated`, :mod:`diel.worker.child`).

The framing of ``multiprocessing.connection.Connection`` (a length, then the pickle) and
its ``send_handle``/``recv_handle`` for passing a file descriptor, without importing
``multiprocessing``: that package (its contexts, reduction, ``tempfile`` and ``random``)
cost each worker rank and each started child some 3 ms of CPU at start for these few
calls.
"""

from __future__ import annotations

import math
import pickle
import select
import socket
import struct
from typing import Any

__all__ = ["Channel"]

HEADER = struct.Struct("!Q")   # the pickle's length in bytes
JOIN_BELOW = 16 * 1024          # a shorter pickle goes in one write with its header


class Channel:
    """One end of a connected Unix stream socket, carrying pickled objects.

    :meth:`recv` raises EOFError when the other end closed between messages, OSError
    when it closed in the middle of one (as ``multiprocessing``'s connections do).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        """The channel over the socket whose file descriptor is ``fd`` (it takes it)."""
        return cls(socket.socket(fileno=fd))

    def send(self, message: Any) -> None:
        """Send ``message``, pickled, as one framed message (its length, then the pickle)."""
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        header = HEADER.pack(len(data))
        if len(data) < JOIN_BELOW:
            self.sock.sendall(header + data)
        else:   # no copy of a large pickle just to put 8 bytes before it
            self.sock.sendall(header)
            self.sock.sendall(data)

    def recv(self) -> Any:
        """The next message, waiting for all of it (EOFError, OSError: class docstring)."""
        header = self._read(HEADER.size, at_start=True)
        return pickle.loads(self._read(HEADER.unpack(header)[0]))

    def poll(self, timeout: float | None = None) -> bool:
        """Whether a message (or the end of the other side) is there to be read,
        waiting up to ``timeout`` seconds (None: until one is)."""
        wait = None if timeout is None else math.ceil(max(timeout, 0.0) * 1000)
        return bool(self._poll.poll(wait))

    def send_fd(self, fd: int) -> None:
        """Pass the file descriptor ``fd`` (the other side gets its own, :meth:`recv_fd`)."""
        socket.send_fds(self.sock, [b"\0"], [fd])

    def recv_fd(self) -> int:
        """The file descriptor the other side passed with :meth:`send_fd`."""
        data, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
        if not data or not fds:
            raise EOFError("the channel closed before a file descriptor came")
        return fds[0]

    def fileno(self) -> int:
        """The socket's file descriptor (to wait on it with others)."""
        return self.sock.fileno()

    def close(self) -> None:
        """Close this end (the other end's :meth:`recv` then raises EOFError)."""
        self.sock.close()

    def _read(self, size: int, at_start: bool = False) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        done = 0
        while done < size:
            got = self.sock.recv_into(view[done:])
            if got == 0:
                if at_start and done == 0:
                    raise EOFError("the channel closed")
                raise OSError("the channel closed in the middle of a message")
            done += got
        return buffer
