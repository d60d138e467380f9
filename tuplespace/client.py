"""The tuple-space client: tput / tget / tread / try_tget / tget_any / dist_tput / dist_tget /
dist_tread.

One client per rank per communicator (it takes every reply that reaches its rank), used
from one thread. Requests carry an id; the server answers each with VALUE, EMPTY (the
timeout passed on the server, which decides alone, so a value is never both timed out
and delivered) or ERROR. A STOPPED notice from a server makes every call that needs it
raise :class:`ServerStoppedError` instead of waiting forever.

A read of a distributed array held whole by one server on this node, as a memory file
(:mod:`tuplespace.memfiles`), maps that file (copy on write) instead of receiving its
bytes; should the map fail, the bytes are received as from any other server.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from . import memfiles
from .codec import decode, encode, encode_array, is_array, payload_nbytes
from .dist import chunk_meta, meta_tag, plan_chunks
from .errors import (BadTagError, ClientClosedError, MessageTooLargeError, RemoteError,
                     ServerStoppedError, SpaceTimeoutError, ValueEncodingError)
from .protocol import (EMPTY as EMPTY_KIND, ERROR, HELLO, MAPPED, OPENED, PUT, PUT_MANY, READ,
                       READ_MAP, SHUTDOWN, STOPPED, TAKE, TAKE_ANY, TAKE_MANY, VALUES, Message)
from .server import make_transport
from .tags import TagPlacement, check_tag, namespace

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Client", "EMPTY"]

FLUSH_SLICE = 0.05   # how often a client waiting for a large send looks for a stop notice
BATCHED_MAX = 64 * 1024   # tput_many sends bigger values (and arrays) in messages of their own


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
        self._welcomes: dict[int, dict] = {}   # server -> its settings, after HELLO
        self._node: str | None = None          # this node's identity, once a read needs it
        self._maps_refused: set[int] = set()   # servers whose memory files would not open
        #: how the distributed arrays this client fetched came: mapped from a memory file
        #: of a server on this node (or opened to be: dist_open), or copied (received)
        self.dist_reads = {"mapped": 0, "copied": 0}
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

    def tput_many(self, tag: str, values: Iterable[Any]) -> None:
        """Add ``values`` under ``tag``, in order, as :meth:`tput` one by one would, in one
        message: a writer of many values (the search master putting a pass's tasks) saves
        a message per value, and the server a request. Arrays and values over
        :data:`BATCHED_MAX` bytes go in messages of their own, in their place in the order.
        A value too large for the server is refused before any is sent.
        """
        self._ready()
        if type(tag) is not str or not tag or tag[0] == "\x00":
            check_tag(tag)
        server = self._place.home(tag)
        what = f"tput_many({tag!r})"
        encoded = [encode(value, tag) for value in values]
        if not encoded:
            return
        self._alive(server, what)
        for meta, data in encoded:   # every one, before any is sent
            self._check_size(server, meta, data, what)
        batch: list[tuple[Any, Any]] = []
        for meta, data in encoded:
            if data is None or (type(data) is bytes and len(data) <= BATCHED_MAX):
                batch.append((meta, data))
                continue
            self._send_batch(server, tag, batch, what)
            batch = []
            self._send_value(server, PUT, tag, meta, data, what)
        self._send_batch(server, tag, batch, what)

    def _send_batch(self, server: int, tag: str, batch: list[tuple[Any, Any]], what: str) -> None:
        """Send ``batch`` (encoded values of ``tag``): a PUT for one, a PUT_MANY for more."""
        if len(batch) == 1:
            self._send_value(server, PUT, tag, *batch[0], what)
        elif batch:
            self._t.send(server, PUT_MANY, 0, tag, batch)

    def tget(self, tag: str, timeout: float | None = None) -> Any:
        """Take the oldest value under ``tag``, waiting up to ``timeout`` s (None: forever)."""
        return self._get(TAKE, tag, timeout, "tget")

    def tread(self, tag: str, timeout: float | None = None) -> Any:
        """Like :meth:`tget` but leave the value in place."""
        return self._get(READ, tag, timeout, "tread")

    def try_tget(self, tag: str) -> Any:
        """Take the oldest value under ``tag`` if there is one, else return :data:`EMPTY`.

        Never waits for a value (one round trip to the server, after the client's
        first contact with it).
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
            self._send_value(server, PUT, ctag, chunk_meta(size), flat[offset:offset + size], what,
                             flush=False)
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

        Without ``out``, an array held whole by one server on this node in a memory file
        (one chunk, a space of one server, of at least ``memfiles.MAP_MIN_BYTES``) is not
        copied: the array returned is a private map of the server's file (copy on write:
        change it at will, the stored array stays as it was). Elsewhere, or should the
        map fail, the bytes are received.

        A reader never waits for a chunk: should a taker take the array between the
        reader's look at its plan and its chunks, the read raises
        :class:`SpaceTimeoutError` saying so instead of waiting for chunks that are gone.
        """
        return self._dist_get(READ, tag, timeout, out, "dist_tread")

    def dist_open(self, tag: str, timeout: float | None = None) -> int | None:
        """A read-only file descriptor of the memory file holding the raw bytes of the
        array stored under ``tag``, when one server on this node holds it whole in one
        (as :meth:`dist_tread` would map it); None otherwise (read it then). The array
        stays stored; the caller owns the descriptor (pass it to another process, map
        it privately, close it). :class:`SpaceTimeoutError` as :meth:`dist_tread`."""
        self._ready()
        check_tag(tag)
        timeout = _check_timeout(timeout, "dist_open")
        what = f"dist_open({tag!r})"
        _, plan = self._plan(READ, tag, timeout, what)[1]
        if not self._mappable(plan, what):
            return None
        server, ctag, _, _ = plan[0]
        got = self._open_chunk(server, ctag, what)
        if isinstance(got, Message):
            return None   # its bytes came instead: the server keeps it in ordinary memory
        if got is not None:
            self.dist_reads["mapped"] += 1
        return got

    def _dist_get(self, kind: int, tag: str, timeout: Any, out: np.ndarray | None, call: str) -> Any:
        """Fetch a distributed array: the plan from its home server, then every chunk at
        once, each straight into its slice of ``out``; ``kind`` TAKE removes it, READ
        leaves it."""
        self._ready()
        check_tag(tag)
        timeout = _check_timeout(timeout, call)
        what = f"{call}({tag!r})"
        msg, (ameta, plan) = self._plan(kind, tag, timeout, what)
        if kind == READ and out is None and self._mappable(plan, what):
            mapped = self._read_mapped(plan[0], ameta, what)
            if mapped is not None:
                return _on_device(mapped, ameta)
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
        for server, _, _, _ in plan:   # first contacts before any chunk is asked for
            self._welcome(server, what)
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
        self.dist_reads["copied"] += 1
        return _on_device(out, ameta)

    def _plan(self, kind: int, tag: str, timeout: float | None, what: str) -> tuple[Message, tuple]:
        """The reply holding a distributed array's plan, and the plan: (array meta,
        chunks); ``kind`` TAKE takes it, READ leaves it."""
        msg = self._request(self._place.home(tag), kind, meta_tag(tag), timeout, what)
        if msg.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{what}: no distributed array under this tag within {timeout} s")
        return msg, decode(msg.arg, msg.data)

    def _mappable(self, plan: list, what: str) -> bool:
        """Whether the array of ``plan`` may be mapped: one chunk, large enough to be a
        memory file, on a server of this node whose files this client could open."""
        if len(plan) != 1 or plan[0][3] < memfiles.MAP_MIN_BYTES or not memfiles.supported():
            return False
        server = plan[0][0]
        if server in self._maps_refused:
            return False
        if self._node is None:
            self._node = memfiles.node_identity()
        return self._welcome(server, what).get("node") == self._node

    def _open_chunk(self, server: int, ctag: str, what: str) -> int | Message | None:
        """Ask ``server`` for the chunk ``ctag`` as a memory file: a read-only descriptor
        of it; or the reply that came instead (its bytes: a chunk the server keeps in
        ordinary memory); None when it was granted but would not open (then this server
        is asked for bytes from now on). :class:`SpaceTimeoutError` when it was taken."""
        reply = self._request(server, READ_MAP, ctag, 0, what)
        if reply.kind == EMPTY_KIND:
            raise SpaceTimeoutError(f"{what}: the array was taken while it was being read")
        if reply.kind != MAPPED:
            return reply
        fd = memfiles.open_granted(reply.arg)
        self._t.send(server, OPENED, 0, None, reply.arg.number)   # the server may let it go
        if fd is None:
            self._maps_refused.add(server)
        return fd

    def _read_mapped(self, chunk: tuple, ameta: tuple, what: str) -> Any:
        """The array of the one ``chunk``, a private map of its memory file (or its bytes,
        should they come instead); None when it cannot be mapped (read it then)."""
        import numpy as np

        server, ctag, _, size = chunk
        got = self._open_chunk(server, ctag, what)
        if isinstance(got, Message):
            self.dist_reads["copied"] += 1
            flat = got.data
        elif got is None:
            return None
        else:
            try:
                flat = np.frombuffer(memfiles.map_private(got, size), np.uint8)
            except (OSError, ValueError):   # out of address space or map count: read it
                return None
            finally:
                os.close(got)
            self.dist_reads["mapped"] += 1
        return flat.view(_dtype(ameta)).reshape(ameta[2])

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
            msg = self._t.recv(left, peers=self.servers)
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

    def _welcome(self, server: int, what: str) -> dict:
        """``server``'s settings (its WELCOME), asked on first contact: before this
        client's first request or value to ``server``. The HELLO tells the server this
        client's doorbell and the WELCOME comes back rung, so that every later wait for
        ``server`` sleeps on the bell (:mod:`tuplespace.doorbell`); a first request that
        waits long (a worker's take of its first task) polled for as long as it waited."""
        if server not in self._welcomes:
            self._welcomes[server] = self._request(server, HELLO, None, None, what).arg
        return self._welcomes[server]

    def _check_size(self, server: int, meta: Any, data: Any, what: str) -> None:
        """:class:`MessageTooLargeError` when the encoded value is over ``server``'s
        ``max_message_bytes``."""
        limit = self._welcome(server, what)["max_message_bytes"]
        if limit is not None:
            size = payload_nbytes(meta, data)
            if size > limit:
                raise MessageTooLargeError(f"{what}: value of {size} bytes exceeds the server's "
                                           f"max_message_bytes={limit}")

    def _send_value(self, server: int, kind: int, tag: str, meta: Any, data: Any, what: str,
                    flush: bool = True) -> None:
        self._alive(server, what)
        self._check_size(server, meta, data, what)
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
        if kind != HELLO:
            self._welcome(server, what)
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
            msg = self._t.recv(None, into, peers=pending.values())
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


def _on_device(array: np.ndarray, ameta: tuple) -> Any:
    """``array`` as a CuPy array if it was one when put and CuPy imports, else as it is."""
    if ameta[3] == "cupy":
        try:
            import cupy
        except ImportError:
            return array
        return cupy.asarray(array)
    return array


def _empty_like_meta(ameta: tuple) -> np.ndarray:
    """An uninitialised array of the shape and dtype recorded in an array's meta."""
    import numpy as np

    return np.empty(ameta[2], dtype=_dtype(ameta))
