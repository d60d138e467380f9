"""TagStore logic without any transport: FIFO, waiter order, readers, any-of, deadlines."""

from __future__ import annotations

from tuplespace.store import TagStore, Waiter


def test_fifo_and_take() -> None:
    store = TagStore()
    for i in range(3):
        assert store.put("t", (i, None)) == []
    got = [store.request(Waiter(1, r, "t", True), None, 0.0) for r in range(3)]
    assert [entry[0] for _, entry in got] == [0, 1, 2]
    assert store.request(Waiter(1, 9, "t", True), 0, 0.0) is None   # try: not registered
    assert store.waiting_count() == 0


def test_waiters_served_in_arrival_order_readers_then_taker() -> None:
    store = TagStore()
    reader = Waiter(1, 1, "t", take=False)
    first, second = Waiter(2, 2, "t", True), Waiter(3, 3, "t", True)
    anyw = Waiter(4, 4, None, True, prefix="t")
    for w in (reader, first, anyw, second):
        assert store.request(w, None, 0.0) is None
    assert store.put("t", ("v1", None)) == [reader, first]
    assert store.put("t", ("v2", None)) == [anyw]
    assert store.put("t", ("v3", None)) == [second]
    assert store.stored_count() == (0, 0)


def test_any_takes_oldest_value_and_deadlines() -> None:
    store = TagStore()
    store.put("b", ("old", None))
    store.put("a", ("new", None))
    tag, entry = store.request(Waiter(1, 1, None, True, tags=frozenset({"a", "b"})), None, 0.0)
    assert (tag, entry[0]) == ("b", "old")
    w = Waiter(1, 2, "x", True)
    assert store.request(w, 0.5, now=10.0) is None
    assert store.next_deadline() == 10.5
    assert store.expire(10.4) == [] and store.expire(10.6) == [w]
    assert store.put("x", ("late", None)) == []   # the expired waiter gets nothing
    assert store.stored_count() == (2, 2)
