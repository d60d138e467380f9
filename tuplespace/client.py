"""The tuple-space client: tput / tget / tread / try_tget / tget_any / dist_tput / dist_tget /
dist_tread.

One client per rank per communicator (it takes every reply that reaches its rank), used
from one thread. Requests carry an id; the server answers each with VALUE, EMPTY (the
timeout passed on the server, which decides alone, so a value is never both timed out
and delivered) or ERROR. A STOPPED notice from a server makes every call that needs it
raise :class:`ServerStoppedError` instead of waiting forever.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .codec import decode, encode, encode_array, is_array, payload_nbytes
from .dist import meta_tag, plan_chunks
from .errors import (BadTagError, ClientClosedError, MessageTooLargeError, RemoteError,
                     ServerStoppedError, SpaceTimeoutError, ValueEncodingError)
from .protocol import (EMPTY as EMPTY_KIND, ERROR, HELLO, PUT, READ, SHUTDOWN, STOPPED, TAKE,
                       TAKE_ANY, TAKE_MANY, VALUES, Message)
from .server import make_transport
from .tags import TagPlacement, check_tag, namespace

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Client", "EMPTY"]

FLUSH_SLICE = 0.05   # how often a client waiting for a large send looks for a stop notice


class _Empty:
    """The type of :data:`EMPTY`."""

    _instance: _Empty | None = None

    def __new__(cls) -> _Empty:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "tuplespace.EMPTY"

    def __bool__(self) -> bool:
        return False


EMPTY = _Empty()
"""Returned by :meth:`Client.try_tget` when the tag holds no value."""


def _check_timeout(timeout: Any, call: str) -> float | None:
    if timeout is None:
        return None
    if type(timeout) not in (int, float) or timeout != timeout:
        raise TypeError(f"{call}: timeout must be None or a number of seconds, got {timeout!r}")
    if timeout < 0:
        raise ValueError(f"{call}: timeout must be >= 0, got {timeout!r}")
    return float(timeout)


class Client:
    """Talks to the tuple servers ``servers`` (ranks of ``comm``).

    ``comm`` is an mpi4py communicator kept for the tuple space (all servers and clients
    use the same one, e.g. a ``Dup`` of COMM_WORLD), or a
    :class:`~tuplespace.transport.Transport`.
    """

    def __init__(self, comm: Any, servers: Sequence[int]) -> None:
        self._t = make_transport(comm)
        servers = list(servers)
        for s in servers:
            if type(s) is not int or not 0 <= s < self._t.size:
                raise ValueError(f"servers must be ranks in 0..{self._t.size - 1}, got {servers!r}")
        self._place = TagPlacement(servers)
        self.servers = servers
        self.rank = self._t.rank
        self._rids = itertools.count(1)
        self._uids = itertools.count(1)
        self._limits: dict[int, int | None] = {}   # server -> max_message_bytes, after HELLO
        self._stopped: set[int] = set()
        self._deferred: list[Exception] = []
        self._replies: dict[int, Message] = {}
        self._closed = False

    # -- plain operations --------------------------------------------------------
    def tput(self, tag: str, value: Any) -> None:
        """Add ``value`` under ``tag`` and return without waiting for the server.

        Values put by this client on one tag arrive in order. An array above the
        transport's inline size (64 KiB over MPI) is sent without a copy, so the call
        returns once the server has received its bytes (the caller may then reuse it).
        """
        self._ready()
        if type(tag) is not str or not tag or tag[0] == "\x00":
            check_tag(tag)
        server = self._place.home(tag)
        meta, data = encode(value, tag)
        self._send_value(server, PUT, tag, meta, data, f"tput({tag!r})")

    def tget(self, tag: str, timeout: float | None = None) -> Any:
        """Take the oldest value under ``tag``, waiting up to ``timeout`` s (None: forever)."""
        return self._get(TAKE, tag, timeout, "tget")

    def tread(self, tag: str, timeout: float | None = None) -> Any:
        """Like :meth:`tget` but leave the value in place."""
        return self._get(READ, tag, timeout, "tread")

    def try_tget(self, tag: str) -> Any:
        """Take the oldest value under ``tag`` if there is one, else return :data:`EMPTY`.

        Never waits for a value (one round trip to the server).
        """
        self._ready()
        check_tag(tag)
        server = self._place.home(tag)
        msg = self._request(server, TAKE, tag, 0, f"try_tget({tag!r})")
        return EMPTY if msg.kind == EMPTY_KIND else decode(msg.arg, msg.data)

    def tget_many(self, tag: str, limit: int, timeout: float | None = None) -> list[Any]:
        """Take up to ``limit`` values of ``tag`` in one round trip, oldest first.

        Waits (up to ``timeout`` s, None: forever) only for the first value; returns at
        once with every value already stored, up to ``limit``. A reader of many results
        (the search master) saves a round trip per value.
        """
        self._ready()
        check_tag(tag)
        timeout = _check_timeout(timeout, "tget_many")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"tget_many({tag!r}): limit must be an int >= 1, got {limit!r}")
        what = f"tget_many({tag!r})"
        msg = self._request(self._place.home(tag), TAKE_MANY, tag, (limit, timeout), what)
        if msg.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{what}: no value within {timeout} s")
        if msg.kind == VALUES:
            return [decode(meta, data) for meta, data in msg.arg]
        return [decode(msg.arg, msg.data)]

    def tget_any(self, tags: Iterable[str] | None = None, prefix: str | None = None,
                 timeout: float | None = None) -> tuple[str, Any]:
        """Take a value from any of ``tags`` or any tag starting with ``prefix``: (tag, value).

        All the tags (and the prefix) must be in one namespace (the part before the
        first ``/``), so that one server holds them all: ``prefix`` must contain a
        ``/`` (e.g. ``"study/"``). Among matching values the one put first is taken;
        waiters are served in arrival order.
        """
        self._ready()
        timeout = _check_timeout(timeout, "tget_any")
        if tags is None and prefix is None:
            raise TypeError("tget_any: give tags=[...] or prefix='namespace/...'")
        spaces = set()
        tag_list = None
        if tags is not None:
            if isinstance(tags, str):
                raise TypeError(f"tget_any: tags must be a list of str, got the str {tags!r}")
            tag_list = tuple(check_tag(t, "tget_any: each tag") for t in tags)
            if not tag_list:
                raise ValueError("tget_any: tags is empty")
            spaces.update(namespace(t) for t in tag_list)
        if prefix is not None:
            check_tag(prefix, "tget_any: prefix")
            if "/" not in prefix:
                raise BadTagError(f"tget_any: prefix {prefix!r} must name its namespace, "
                                  f"e.g. {prefix + '/'!r}: tags are placed on servers by the "
                                  "part before the first '/'")
            spaces.add(namespace(prefix))
        if len(spaces) > 1:
            raise BadTagError(f"tget_any: tags must share one namespace (the part before the "
                              f"first '/') so one server holds them; got {sorted(spaces)}")
        server = self._place.home(spaces.pop())
        what = f"tget_any(tags={tag_list!r}, prefix={prefix!r})"
        msg = self._request(server, TAKE_ANY, None, (tag_list, prefix, timeout), what)
        if msg.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{what}: no value within {timeout} s")
        return msg.tag, decode(msg.arg, msg.data)

    # -- distributed store -------------------------------------------------------
    def dist_tput(self, tag: str, array: Any) -> None:
        """Store ``array`` cut into chunks over all servers; the tag's home server keeps the plan.

        Returns once every chunk has reached its server (no copy of ``array`` is made).
        """
        self._ready()
        check_tag(tag)
        if not is_array(array):
            raise ValueEncodingError(f"dist_tput({tag!r}): expected a NumPy or CuPy array, "
                                     f"got {type(array).__name__}")
        ameta, flat = encode_array(array, tag)
        uid = f"{self.rank}.{next(self._uids)}"
        plan = plan_chunks(tag, flat.nbytes, _dtype(ameta).itemsize, self.servers, uid)
        what = f"dist_tput({tag!r})"
        for server, ctag, offset, size in plan:
            self._send_value(server, PUT, ctag, None, flat[offset:offset + size], what, flush=False)
        self._flush([p[0] for p in plan], what)
        meta, data = encode((ameta, plan), tag)
        self._send_value(self._place.home(tag), PUT, meta_tag(tag), meta, data, what)

    def dist_tget(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any:
        """Take the array stored by :meth:`dist_tput` under ``tag``, fetching all chunks at once.

        ``timeout`` bounds the wait for the array to appear (then :class:`SpaceTimeoutError`).
        ``out``: a C-contiguous NumPy array of the stored shape and dtype to receive into
        (returned), as NumPy's ``out=``: a loop that fetches arrays of one shape saves a
        fresh allocation, and its page faults, every time.
        """
        return self._dist_get(TAKE, tag, timeout, out, "dist_tget")

    def dist_tread(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any:
        """Like :meth:`dist_tget` but leave the array stored (several ranks may read it).

        A reader never waits for a chunk: should a taker take the array between the
        reader's look at its plan and its chunks, the read raises
        :class:`SpaceTimeoutError` saying so instead of waiting for chunks that are gone.
        """
        return self._dist_get(READ, tag, timeout, out, "dist_tread")

    def _dist_get(self, kind: int, tag: str, timeout: Any, out: np.ndarray | None, call: str) -> Any:
        """Fetch a distributed array: the plan from its home server, then every chunk at
        once, each straight into its slice of ``out``; ``kind`` TAKE removes it, READ
        leaves it."""
        self._ready()
        check_tag(tag)
        timeout = _check_timeout(timeout, call)
        what = f"{call}({tag!r})"
        msg = self._request(self._place.home(tag), kind, meta_tag(tag), timeout, what)
        if msg.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{what}: no distributed array under this tag within {timeout} s")
        ameta, plan = decode(msg.arg, msg.data)
        if out is None:
            out = _empty_like_meta(ameta)
        elif not _fits(out, ameta):
            if kind == TAKE:   # put the plan back: the array stays stored
                self._send_value(self._place.home(tag), PUT, meta_tag(tag), msg.arg, msg.data, what)
            raise ValueError(f"{what}: out must be a C-contiguous NumPy array of shape "
                             f"{tuple(ameta[2])} and dtype {_dtype(ameta)}; got "
                             f"{getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)} "
                             "(the array stays stored)")
        chunk_wait = None if kind == TAKE else 0   # a taken plan's chunks are ours alone
        flat = out.reshape(-1).view("uint8")
        targets: dict[int, np.ndarray] = {}
        waiting: dict[int, int] = {}
        for server, ctag, offset, size in plan:
            rid = next(self._rids)
            targets[rid] = flat[offset:offset + size]
            waiting[rid] = server
            self._t.send(server, kind, rid, ctag, chunk_wait)
        replies = self._collect(waiting, what, into=lambda m: targets.get(m.rid))
        self._t.wait_incoming()
        for reply in replies.values():
            self._check_reply(reply, what)
            if reply.kind == EMPTY_KIND:
                raise SpaceTimeoutError(f"{what}: the array was taken while it was being read")
        if ameta[3] == "cupy":
            try:
                import cupy
            except ImportError:
                return out
            return cupy.asarray(out)
        return out

    # -- lifetime ----------------------------------------------------------------
    def shutdown(self, timeout: float = 10.0) -> None:
        """Ask every server to stop, and wait until each has said it stopped."""
        if self._closed:
            raise ClientClosedError("shutdown: the client is closed")
        for server in self.servers:
            if server not in self._stopped:
                self._t.send(server, SHUTDOWN)
        deadline = time.monotonic() + timeout
        while not self._stopped.issuperset(self.servers):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(self.servers) - self._stopped)
                raise SpaceTimeoutError(f"shutdown: servers {missing} did not stop within {timeout} s")
            msg = self._t.recv(left)
            if msg is not None:
                self._note(msg)

    def close(self) -> None:
        """Finish sending what was put, then refuse further calls. Idempotent."""
        if not self._closed:
            self._t.flush(timeout=5.0)
            self._closed = True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------
    def _get(self, kind: int, tag: str, timeout: Any, call: str) -> Any:
        self._ready()
        check_tag(tag)
        timeout = _check_timeout(timeout, call)
        msg = self._request(self._place.home(tag), kind, tag, timeout, f"{call}({tag!r})")
        if msg.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{call}({tag!r}): no value within {timeout} s")
        return decode(msg.arg, msg.data)

    def _ready(self) -> None:
        """Refuse calls on a closed client; pick up notices; raise a deferred server error."""
        if self._closed:
            raise ClientClosedError("the tuple-space client is closed")
        msg = self._t.recv(0)
        while msg is not None:
            self._note(msg)
            msg = self._t.recv(0)
        if self._deferred:
            raise self._deferred.pop(0)

    def _note(self, msg: Message) -> None:
        """File a message that is not the reply being waited for."""
        if msg.kind == STOPPED:
            self._stopped.add(msg.source)
        elif msg.kind == ERROR and msg.rid == 0:
            self._deferred.append(RemoteError(msg.arg))
        else:
            self._replies[msg.rid] = msg

    def _alive(self, server: int, what: str) -> None:
        if server in self._stopped:
            raise ServerStoppedError(f"{what}: tuple server rank {server} has stopped")

    def _send_value(self, server: int, kind: int, tag: str, meta: Any, data: Any, what: str,
                    flush: bool = True) -> None:
        self._alive(server, what)
        if server not in self._limits:
            self._limits[server] = self._request(server, HELLO, None, None, what).arg["max_message_bytes"]
        limit = self._limits[server]
        if limit is not None:
            size = payload_nbytes(meta, data)
            if size > limit:
                raise MessageTooLargeError(f"{what}: value of {size} bytes exceeds the server's "
                                           f"max_message_bytes={limit}")
        self._t.send(server, kind, 0, tag, meta, data)
        if flush and is_array(data):
            self._flush([server], what)

    def _flush(self, servers: list[int], what: str) -> None:
        """Wait for large sends to finish, but raise if a server they go to stops."""
        while not self._t.flush(timeout=FLUSH_SLICE):
            msg = self._t.recv(0)
            while msg is not None:
                self._note(msg)
                msg = self._t.recv(0)
            for server in servers:
                self._alive(server, what)

    def _request(self, server: int, kind: int, tag: str | None, arg: Any, what: str) -> Message:
        self._alive(server, what)
        rid = next(self._rids)
        self._t.send(server, kind, rid, tag, arg)
        reply = self._collect({rid: server}, what)[rid]
        return self._check_reply(reply, what)

    def _check_reply(self, msg: Message, what: str) -> Message:
        if msg.kind == ERROR:
            raise RemoteError(f"{what}: {msg.arg}")
        return msg

    def _collect(self, waiting: dict[int, int], what: str, into: Any = None) -> dict[int, Message]:
        """Wait for the replies to the requests ``waiting`` (rid -> server)."""
        replies: dict[int, Message] = {}
        pending = dict(waiting)
        for rid in list(pending):
            if rid in self._replies:
                replies[rid] = self._replies.pop(rid)
                del pending[rid]
        while pending:
            for server in pending.values():
                self._alive(server, what)
            msg = self._t.recv(None, into)
            if msg.rid in pending and msg.kind != STOPPED:
                replies[msg.rid] = msg
                del pending[msg.rid]
            else:
                self._note(msg)
        return replies


def _dtype(ameta: tuple) -> np.dtype:
    """The dtype recorded in an array's meta."""
    from numpy.lib import format as npformat

    return npformat.descr_to_dtype(ameta[1])


def _fits(out: Any, ameta: tuple) -> bool:
    """Whether ``out`` can receive the array described by ``ameta`` in place."""
    import numpy as np

    return (isinstance(out, np.ndarray) and out.flags.c_contiguous and out.flags.writeable
            and out.shape == tuple(ameta[2]) and out.dtype == _dtype(ameta))


def _empty_like_meta(ameta: tuple) -> np.ndarray:
    """An uninitialised array of the shape and dtype recorded in an array's meta."""
    import numpy as np

    return np.empty(ameta[2], dtype=_dtype(ameta))
