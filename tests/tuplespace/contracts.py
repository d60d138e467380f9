"""Contract checks shared by the in-process and the MPI runs of the tuple space.

Each contract is a pair of roles run at the same time by two clients, ``a`` and
``b``, against the same 3 servers; each role raises on failure. Tags are namespaced
by contract so contracts cannot see each other's values.
"""

from __future__ import annotations

import time

import numpy as np

import tuplespace
from tuplespace import EMPTY, Client

SERVERS = 3


def fifo(role: str, space: Client) -> None:
    if role == "a":
        for i in range(200):
            space.tput("fifo/x", i)
        space.tput("fifo/x", {"done": np.arange(3)})
    else:
        got = [space.tget("fifo/x", timeout=20) for _ in range(200)]
        if got != list(range(200)):
            raise AssertionError(f"out of order: {got[:20]}...")
        last = space.tget("fifo/x", timeout=20)
        if not np.array_equal(last["done"], np.arange(3)):
            raise AssertionError(f"bad last value {last!r}")


def blocking_release(role: str, space: Client) -> None:
    if role == "b":
        space.tput("rel/ready", True)
        t0 = time.monotonic()
        value = space.tget("rel/x", timeout=20)
        if value != 7 or time.monotonic() - t0 < 0.075:
            raise AssertionError(f"got {value!r} after {time.monotonic() - t0:.3f} s")
    else:
        space.tget("rel/ready", timeout=20)
        time.sleep(0.1)
        space.tput("rel/x", 7)


def tread_leaves(role: str, space: Client) -> None:
    if role == "a":
        space.tput("rd/x", "kept")
        if space.tread("rd/x", timeout=20) != "kept" or space.tread("rd/x", timeout=20) != "kept":
            raise AssertionError("tread did not return the value")
        space.tput("rd/go", 1)
    else:
        space.tget("rd/go", timeout=20)
        if space.tget("rd/x", timeout=20) != "kept":
            raise AssertionError("tread removed the value")
        if space.try_tget("rd/x") is not EMPTY:
            raise AssertionError("value still there after tget")


def timeouts(role: str, space: Client) -> None:
    checks = [lambda: space.tget("to/none", timeout=0.1),
              lambda: space.tread("to/none", timeout=0.1),
              lambda: space.tget_any(prefix="to/", timeout=0.1),
              lambda: space.dist_tget(f"to/dist-{role}", timeout=0.1)]
    for check in checks:
        t0 = time.monotonic()
        try:
            check()
        except TimeoutError as e:
            elapsed = time.monotonic() - t0
            if not 0.09 <= elapsed < 3 or "to/" not in str(e):
                raise AssertionError(f"timeout after {elapsed:.3f} s: {e}") from e
        else:
            raise AssertionError("no TimeoutError")
    if space.try_tget("to/none") is not EMPTY:
        raise AssertionError("try_tget of an absent tag is not EMPTY")


def take_any(role: str, space: Client) -> None:
    if role == "a":
        space.tput("any/b", "first")
        space.tput("any/a", "second")
        space.tput("any/sync", 1)
        space.tget("any/sync2", timeout=20)
        time.sleep(0.1)
        space.tput("any/late", "late")
    else:
        space.tget("any/sync", timeout=20)
        got = space.tget_any(tags=["any/a", "any/b"], timeout=20)
        if got != ("any/b", "first"):
            raise AssertionError(f"oldest value not taken first: {got!r}")
        if space.tget_any(prefix="any/", timeout=20) != ("any/a", "second"):
            raise AssertionError("prefix take failed")
        space.tput("any/sync2", 1)
        got = space.tget_any(tags=["any/late", "any/other"], timeout=20)
        if got != ("any/late", "late"):
            raise AssertionError(f"waiting tget_any got {got!r}")


def take_many(role: str, space: Client) -> None:
    if role == "a":
        for i in range(5):
            space.tput("many/x", i)
        space.tput("many/x", np.arange(40000.0))  # a large array rides along
        space.tput("many/sync", 1)
        space.tget("many/sync2", timeout=20)
        time.sleep(0.1)
        space.tput("many/x", "late")
    else:
        space.tget("many/sync", timeout=20)
        first = space.tget_many("many/x", 3, timeout=20)
        if first != [0, 1, 2]:
            raise AssertionError(f"tget_many took {first!r}, expected the 3 oldest")
        rest = space.tget_many("many/x", 10, timeout=20)
        if rest[:2] != [3, 4] or len(rest) != 3 or not np.array_equal(rest[2], np.arange(40000.0)):
            raise AssertionError(f"tget_many did not take every stored value in order: {rest[:2]!r}")
        space.tput("many/sync2", 1)
        if space.tget_many("many/x", 10, timeout=20) != ["late"]:
            raise AssertionError("a waiting tget_many did not get the value put later")
        try:
            space.tget_many("many/x", 10, timeout=0.05)
        except tuplespace.SpaceTimeoutError:
            pass
        else:
            raise AssertionError("tget_many on an empty tag did not time out")


def put_many(role: str, space: Client) -> None:
    """tput_many keeps the order of its values (arrays and big values go on their own in
    their place), serves a take already waiting, and stores nothing for an empty list."""
    big = "x" * 70000   # over BATCHED_MAX: a PUT of its own
    if role == "a":
        space.tget("pm/waiting", timeout=20)
        time.sleep(0.1)   # b is (most likely) blocked in its tget by now
        space.tput_many("pm/x", [0, {"one": 1}, np.arange(3.0), "two", big, 3])
        space.tput_many("pm/x", [])
        space.tput("pm/x", "after")
    else:
        space.tput("pm/waiting", 1)
        got = [space.tget("pm/x", timeout=20) for _ in range(7)]
        expected = [0, {"one": 1}, None, "two", big, 3, "after"]
        if got[:2] + got[3:] != expected[:2] + expected[3:] or \
                not np.array_equal(got[2], np.arange(3.0)):
            raise AssertionError(f"tput_many's values came as {str(got)[:200]}")
        if space.try_tget("pm/x") is not EMPTY:
            raise AssertionError("an empty tput_many stored a value")


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(42)
    return [np.arange(1001 * 3, dtype=np.float32).reshape(1001, 3),
            rng.integers(-5, 5, size=(7,), dtype=np.int64),
            (rng.random((5, 4)) + 1j).astype(np.complex128),
            rng.random(10) > 0.5,
            np.empty((0,), np.float64), np.empty((0, 4), np.int32),
            np.array(3.5),
            np.asfortranarray(rng.random((6, 5))),
            rng.random((40, 10))[::3, ::2],
            rng.random(700_001).astype(np.float32),           # 2.8 MB: raw out-of-band path
            np.arange(11, dtype=np.uint8)]


def arrays_roundtrip(role: str, space: Client) -> None:
    arrays = _arrays()
    if role == "a":
        for i, arr in enumerate(arrays):
            space.dist_tput(f"arr/d{i}", arr)
            space.tput(f"arr/p{i}", arr)
    else:
        for i, arr in enumerate(arrays):
            for how, got in (("dist", space.dist_tget(f"arr/d{i}", timeout=20)),
                             ("tput", space.tget(f"arr/p{i}", timeout=20))):
                if (not isinstance(got, np.ndarray) or got.dtype != arr.dtype
                        or got.shape != arr.shape or not np.array_equal(got, arr)):
                    raise AssertionError(f"{how} array {i} ({arr.dtype}, {arr.shape}) came back "
                                         f"as {type(got).__name__} {getattr(got, 'shape', '')}")
                got[...] = 0 if got.size else got  # must be writable
        if not isinstance(tuplespace.EMPTY, type(EMPTY)):
            raise AssertionError("EMPTY is not a singleton")


CONTRACTS = {f.__name__: f for f in (fifo, blocking_release, tread_leaves, timeouts, take_any,
                                     take_many, arrays_roundtrip, put_many)}
