"""100 concurrent clients over 3 servers: every tuple arrives exactly once, in order per producer."""

from __future__ import annotations

import threading
from collections import Counter

from tests.helpers.tuplespace import InProcSpace

CLIENTS = 100
PER_CLIENT = 30
TAGS = 7


def test_hundred_clients_exactly_once() -> None:
    space = InProcSpace(n_servers=3, n_clients=CLIENTS + 1)
    taken: list[list] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []

    def work(c: int) -> None:
        client = space.clients[c + 1]
        tag = f"q{c % TAGS}/items"
        try:
            for i in range(PER_CLIENT):
                client.tput(tag, (c, i))
            for _ in range(PER_CLIENT):
                taken[c].append(client.tget(tag, timeout=30))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors[0]
    counts = Counter(v for got in taken for v in got)
    assert len(counts) == CLIENTS * PER_CLIENT and set(counts.values()) == {1}
    for got in taken:   # each consumer sees each producer's values in put order
        for producer in {p for p, _ in got}:
            seq = [i for p, i in got if p == producer]
            assert seq == sorted(seq)
    space.stop()
    assert sum(s["values_left"] for s in space.stats) == 0
    assert len({s["rank"] for s in space.stats if s["requests"] > 0}) == 3   # all servers used
