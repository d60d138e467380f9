"""The tuple space's exceptions: one root class, specific subclasses.

Each subclass also inherits the builtin that fits, so ``except TimeoutError`` or
``except TypeError`` in user code keeps working.
"""

from __future__ import annotations

__all__ = [
    "TupleSpaceError", "BadTagError", "ValueEncodingError", "MessageTooLargeError",
    "SpaceTimeoutError", "ServerStoppedError", "ClientClosedError", "RemoteError",
]


class TupleSpaceError(Exception):
    """Root of every error the tuple space raises."""


class BadTagError(TupleSpaceError, TypeError, ValueError):
    """A tag that is not a non-empty ``str`` (or uses the reserved ``\\x00`` prefix)."""


class ValueEncodingError(TupleSpaceError, TypeError):
    """A value that cannot travel: unpicklable, or not an array where one is needed."""


class MessageTooLargeError(TupleSpaceError, ValueError):
    """A value bigger than the server's ``max_message_bytes``."""


class SpaceTimeoutError(TupleSpaceError, TimeoutError):
    """A blocking call's timeout passed before a value arrived."""


class ServerStoppedError(TupleSpaceError, RuntimeError):
    """The server this call needs has stopped; the call can never be answered."""


class ClientClosedError(TupleSpaceError, RuntimeError):
    """The client was closed with :meth:`Client.close`."""


class RemoteError(TupleSpaceError, RuntimeError):
    """The server refused a request; the message says why."""
