"""Wire protocol: message kinds (named constants, with names for logs) and the message.

A message has six fields; what ``tag``, ``arg`` and ``data`` mean depends on its kind:

=========== ========= ===================== ========================= ===============
kind        direction tag                   arg                       data
=========== ========= ===================== ========================= ===============
PUT         c -> s    tag                   value meta (see codec)    value buffer
PUT_MANY    c -> s    tag                   [(meta, buffer), ...]     -
TAKE, READ  c -> s    tag                   timeout (None, 0, secs)   -
READ_MAP    c -> s    tag                   timeout                   -
OPENED      c -> s    -                     grant number              -
TAKE_ANY    c -> s    -                     (tags, prefix, timeout)   -
TAKE_MANY   c -> s    tag                   (limit, timeout)          -
HELLO       c -> s    -                     -                         -
SHUTDOWN    c -> s    -                     -                         -
VALUE       s -> c    the value's tag       value meta                value buffer
VALUES      s -> c    the values' tag       [(meta, buffer), ...]     -
MAPPED      s -> c    the value's tag       memfiles.Grant            -
EMPTY       s -> c    -                     -                         -
WELCOME     s -> c    -                     server settings (dict)    -
ERROR       s -> c    tag or None           message (str)             -
STOPPED     s -> all  -                     -                         -
=========== ========= ===================== ========================= ===============

``rid`` is the client's request id; a reply carries the request's ``rid`` (0 for an
ERROR about a PUT, which has no reply of its own: the client raises it at its next call).

READ_MAP is a READ from a client on the server's node, which may be answered with MAPPED
(the value is a memory file: :mod:`tuplespace.memfiles`) instead of VALUE; the client
opens the file, then sends OPENED (no reply) so that the server may let the file go.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Message", "KIND_NAMES", "PUT", "TAKE", "READ", "TAKE_ANY", "HELLO", "SHUTDOWN",
           "VALUE", "EMPTY", "WELCOME", "ERROR", "STOPPED", "CTRL_TAG", "DATA_TAG", "TAKE_MANY",
           "VALUES", "READ_MAP", "OPENED", "MAPPED", "PUT_MANY"]

# client -> server
PUT = 1
TAKE = 2
READ = 3
TAKE_ANY = 4
HELLO = 5
SHUTDOWN = 6
TAKE_MANY = 7
READ_MAP = 8
OPENED = 9
PUT_MANY = 17
# server -> client
VALUE = 10
EMPTY = 11
WELCOME = 12
ERROR = 13
STOPPED = 14
VALUES = 15
MAPPED = 16

KIND_NAMES = {PUT: "PUT", TAKE: "TAKE", READ: "READ", TAKE_ANY: "TAKE_ANY", HELLO: "HELLO",
              SHUTDOWN: "SHUTDOWN", TAKE_MANY: "TAKE_MANY", VALUE: "VALUE", VALUES: "VALUES", EMPTY: "EMPTY", WELCOME: "WELCOME",
              ERROR: "ERROR", STOPPED: "STOPPED", READ_MAP: "READ_MAP", OPENED: "OPENED",
              MAPPED: "MAPPED", PUT_MANY: "PUT_MANY"}

# MPI tags used on the space's communicator: envelopes, and raw array payloads that
# follow their envelope (same source, in order).
CTRL_TAG = 7701
DATA_TAG = 7702


class Message:
    """One protocol message as a transport hands it over (``source`` set on receipt)."""

    __slots__ = ("source", "kind", "rid", "tag", "arg", "data")

    def __init__(self, source: int, kind: int, rid: int = 0, tag: str | None = None,
                 arg: Any = None, data: Any = None) -> None:
        self.source = source
        self.kind = kind
        self.rid = rid
        self.tag = tag
        self.arg = arg
        self.data = data

    def __repr__(self) -> str:
        name = KIND_NAMES.get(self.kind, str(self.kind))
        return f"Message({name}, source={self.source}, rid={self.rid}, tag={self.tag!r})"
