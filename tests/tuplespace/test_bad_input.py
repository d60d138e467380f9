"""Bad input: a clear error on the caller's side, and the server keeps serving."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tuplespace import (EMPTY, Client, InProcNetwork, Server, BadTagError, ClientClosedError, MessageTooLargeError, RemoteError,
                        ServerStoppedError, SpaceTimeoutError, TupleSpaceError,
                        ValueEncodingError)
from tuplespace.protocol import PUT_MANY, TAKE, VALUE

from tests.helpers.tuplespace import InProcSpace


def still_serving(client) -> None:
    client.tput("ok/check", 1)
    assert client.tget("ok/check", timeout=5) == 1


@pytest.mark.parametrize("tag, needle", [(5, "int 5"), (None, "NoneType"), ("", "''"),
                                         ("\x00x", "reserved"), (b"t", "bytes")])
def test_bad_tag(inproc: InProcSpace, tag: object, needle: str) -> None:
    a = inproc.clients[0]
    for call in (lambda: a.tput(tag, 1), lambda: a.tget(tag, timeout=0),
                 lambda: a.tread(tag, timeout=0), lambda: a.try_tget(tag),
                 lambda: a.tget_many(tag, 2, timeout=0),
                 lambda: a.dist_tput(tag, np.zeros(3)), lambda: a.dist_tget(tag, timeout=0)):
        with pytest.raises(BadTagError, match="tag must be a non-empty str|reserved") as info:
            call()
        assert needle in str(info.value)
        assert isinstance(info.value, TupleSpaceError)
    still_serving(a)


@pytest.mark.parametrize("limit", [0, -1, 2.5, None])
def test_tget_many_needs_a_positive_limit(inproc: InProcSpace, limit: object) -> None:
    a = inproc.clients[0]
    with pytest.raises(ValueError, match=r"tget_many\('ok/x'\): limit must be an int >= 1"):
        a.tget_many("ok/x", limit, timeout=0)
    still_serving(a)


def test_unpicklable_value(inproc: InProcSpace) -> None:
    a = inproc.clients[0]
    with pytest.raises(ValueEncodingError, match=r"tag 'bad/x'.*cannot be pickled"):
        a.tput("bad/x", lambda: 1)
    with pytest.raises(ValueEncodingError, match="dtype object"):
        a.dist_tput("bad/o", np.array([object()]))
    still_serving(a)


def test_dist_tput_of_non_array(inproc: InProcSpace) -> None:
    a = inproc.clients[0]
    with pytest.raises(ValueEncodingError, match=r"dist_tput\('bad/d'\): expected a NumPy or CuPy array, got list"):
        a.dist_tput("bad/d", [1, 2, 3])
    still_serving(a)


def test_dist_tget_unknown_tag(inproc: InProcSpace) -> None:
    a = inproc.clients[0]
    with pytest.raises(SpaceTimeoutError, match=r"dist_tget\('nope'\): no distributed array"):
        a.dist_tget("nope", timeout=0.1)
    still_serving(a)


def test_dist_tget_into_out_and_a_wrong_out(inproc: InProcSpace) -> None:
    a = inproc.clients[0]
    data = np.arange(30, dtype=np.float32).reshape(5, 6)
    a.dist_tput("out/x", data)
    for wrong in (np.empty((6, 5), np.float32), np.empty((5, 6), np.float64),
                  np.empty((6, 5), np.float32).T, [0.0] * 30):
        with pytest.raises(ValueError, match=r"dist_tget\('out/x'\): out must be a C-contiguous "
                                             r"NumPy array of shape \(5, 6\) and dtype float32"):
            a.dist_tget("out/x", timeout=5, out=wrong)
    out = np.zeros((5, 6), np.float32)
    assert a.dist_tget("out/x", timeout=5, out=out) is out  # the array stayed stored
    assert np.array_equal(out, data)
    still_serving(a)


@pytest.mark.parametrize("timeout, exc", [(-1, ValueError), ("soon", TypeError), (float("nan"), TypeError)])
def test_bad_timeout(inproc: InProcSpace, timeout: object, exc: type) -> None:
    with pytest.raises(exc, match="timeout"):
        inproc.clients[0].tget("t/x", timeout=timeout)


def test_tget_any_rules(inproc: InProcSpace) -> None:
    a = inproc.clients[0]
    with pytest.raises(BadTagError, match="share one namespace"):
        a.tget_any(tags=["s1/a", "s2/a"], timeout=0)
    with pytest.raises(BadTagError, match="must name its namespace"):
        a.tget_any(prefix="study", timeout=0)
    with pytest.raises(TypeError, match="give tags"):
        a.tget_any()
    with pytest.raises(TypeError, match="list of str"):
        a.tget_any(tags="s1/a")
    still_serving(a)


def test_oversized_message() -> None:
    space = InProcSpace(max_message_bytes=1000)
    a = space.clients[0]
    with pytest.raises(MessageTooLargeError, match=r"tput\('big/x'\): value of \d+ bytes exceeds"):
        a.tput("big/x", bytes(5000))
    with pytest.raises(MessageTooLargeError, match="big/y"):
        a.tput("big/y", np.zeros(1000))
    a.tput("big/z", bytes(500))
    assert a.tget("big/z", timeout=5) == bytes(500)
    space.stop()


def test_oversized_value_in_tput_many_sends_none() -> None:
    space = InProcSpace(max_message_bytes=1000)
    a = space.clients[0]
    with pytest.raises(MessageTooLargeError, match=r"tput_many\('big/m'\): value of \d+ bytes"):
        a.tput_many("big/m", [1, "two", bytes(5000)])
    assert a.try_tget("big/m") is EMPTY
    still_serving(a)
    space.stop()


def test_malformed_put_many_gets_error_and_stores_nothing() -> None:
    """A PUT_MANY the server cannot use (not a list of pairs, a value over its limit)
    stores none of its values; the error comes at the client's next call."""
    space = InProcSpace(n_clients=1, max_message_bytes=1000)
    client = space.clients[0]
    client._t.send(1, PUT_MANY, 0, "pm/bad", "not a list")
    client._t.send(1, PUT_MANY, 0, "pm/bad", [((0, 1), None), ((0, "x" * 2000), None)])
    errors = []
    for _ in range(4):   # the first round trip brings both errors; one raises per call
        try:
            assert client.try_tget("pm/bad") is EMPTY
        except RemoteError as e:
            errors.append(str(e))
    assert len(errors) == 2, errors
    assert "list of (meta, data) pairs" in errors[0], errors
    assert "none of the 2 values was stored" in errors[1], errors
    still_serving(client)
    space.stop()


def test_malformed_request_gets_error() -> None:
    """A request the server cannot use is answered with ERROR, not dropped or fatal."""
    space = InProcSpace(n_clients=1)
    client = space.clients[0]
    client._t.send(1, TAKE, 99, 12345, None)          # a tag that is not a str
    reply = client._t.recv(timeout=5)
    assert reply.kind != VALUE and "non-empty str tag" in reply.arg
    client._t.send(1, 77, 100)                        # an unknown kind
    assert "unknown message kind" in client._t.recv(timeout=5).arg
    still_serving(client)
    space.stop()


def test_calls_after_stop_raise() -> None:
    space = InProcSpace()
    a, b = space.clients
    a.tput("left/x", 1)
    space.stop()
    assert space.stats and sum(s["values_left"] for s in space.stats) == 1
    with pytest.raises(ServerStoppedError, match="has stopped"):
        b.tget("left/x")
    with pytest.raises(ServerStoppedError):
        b.tput("left/x", 2)
    a.close()
    with pytest.raises(ClientClosedError):
        a.tput("left/x", 1)


def test_blocked_tget_released_when_server_stops() -> None:
    network = InProcNetwork(2)
    stop = threading.Event()
    server = Server(network.endpoint(0), [0])
    stats: list[dict] = []
    server_thread = threading.Thread(target=lambda: stats.append(server.run(stop.is_set)),
                                     daemon=True)
    server_thread.start()
    client = Client(network.endpoint(1), [0])
    client.tput("kept/x", 1)
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            client.tget("wait/x")
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.1)
    stop.set()   # as diel's ctx.stop_requested() would turn true
    t.join(timeout=5)
    server_thread.join(timeout=5)
    assert not t.is_alive(), "tget still blocked after the server stopped"
    assert errors and isinstance(errors[0], ServerStoppedError), errors
    assert stats[0]["waiters_released"] == 1 and stats[0]["values_left"] == 1


def test_should_stop_checked_periodically() -> None:
    network = InProcNetwork(2)
    calls = []
    server = Server(network.endpoint(0), [0], stop_check_interval=0.005)
    t0 = time.monotonic()
    deadline = t0 + 0.3   # from t0: a deadline set before the server was made ends sooner
    stats = server.run(should_stop=lambda: calls.append(1) or time.monotonic() > deadline)
    elapsed = time.monotonic() - t0
    assert 0.3 <= elapsed < 1.0
    assert 20 <= len(calls) <= elapsed / 0.004 + 2, len(calls)
    assert stats["requests"] == 0
    assert network._take(1, 1.0).kind  # the client rank got the STOPPED notice


def test_remote_error_type() -> None:
    assert issubclass(RemoteError, TupleSpaceError) and issubclass(SpaceTimeoutError, TimeoutError)
    assert repr(EMPTY) == "tuplespace.EMPTY" and not EMPTY
