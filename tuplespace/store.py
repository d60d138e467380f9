"""The server's state: ``tag -> FIFO of values`` and the requests waiting for values.

Pure logic, no transport: methods return who must be answered with what, and the
server sends. Invariants: a tag with stored values has no waiter on it (a value is
handed to a waiter as soon as both exist); waiters are served in arrival order, across
plain waiters on the tag and ``take_any`` waiters that match it. A reader (``tread``)
gets the value and leaves it; the first taker in arrival order gets it and ends the
hand-out.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any

__all__ = ["Entry", "Waiter", "TagStore"]

Entry = tuple  # (meta, data, file): an encoded value, opaque to the server, and the
               # memory file holding data (tuplespace.memfiles.MemoryFile), or None


class Waiter:
    """A request that waits for a value: from rank ``source``, answered with ``rid``;
    ``mapped``: a reader on the server's node, which may be answered with a value's
    memory file instead of its bytes."""

    __slots__ = ("source", "rid", "tag", "tags", "prefix", "take", "seq", "deadline", "active",
                 "mapped")

    def __init__(self, source: int, rid: int, tag: str | None, take: bool,
                 tags: frozenset | None = None, prefix: str | None = None,
                 mapped: bool = False) -> None:
        self.source = source
        self.rid = rid
        self.tag = tag
        self.tags = tags
        self.prefix = prefix
        self.take = take
        self.mapped = mapped
        self.seq = 0
        self.deadline: float | None = None
        self.active = True

    def matches(self, tag: str) -> bool:
        """For a take_any waiter: whether ``tag`` is one it waits for."""
        if self.tags is not None and tag in self.tags:
            return True
        return self.prefix is not None and tag.startswith(self.prefix)


class TagStore:
    """Values per tag (FIFO) plus waiters per tag, any-of waiters and deadlines."""

    def __init__(self) -> None:
        self._values: dict[str, deque] = {}          # only non-empty FIFOs
        self._order: dict[str, deque] = {}           # put sequence numbers, parallel to _values
        self._waiters: dict[str, deque[Waiter]] = {}  # only non-empty
        self._any: list[Waiter] = []
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._seq = itertools.count(1)

    # -- values arriving ---------------------------------------------------------
    def put(self, tag: str, entry: Entry) -> list[Waiter]:
        """Store ``entry`` under ``tag``; returns the waiters to hand it to, in order.

        If one of them takes it, it is not stored.
        """
        waiting = self._waiters.get(tag)
        if waiting is None and not self._any:
            self._append(tag, entry)
            return []
        served: list[Waiter] = []
        anys = [w for w in self._any if w.matches(tag)] if self._any else []
        while True:
            while waiting and not waiting[0].active:
                waiting.popleft()
            first = waiting[0] if waiting else None
            if anys and (first is None or anys[0].seq < first.seq):
                first = anys.pop(0)
                self._any.remove(first)
            elif first is not None:
                waiting.popleft()
            else:
                break
            first.active = False
            served.append(first)
            if first.take:
                break
        if waiting is not None and not waiting:
            del self._waiters[tag]
        if not served or not served[-1].take:
            self._append(tag, entry)
        return served

    def _append(self, tag: str, entry: Entry) -> None:
        fifo = self._values.get(tag)
        if fifo is None:
            self._values[tag] = fifo = deque()
            self._order[tag] = deque()
        fifo.append(entry)
        self._order[tag].append(next(self._seq))

    # -- requests ----------------------------------------------------------------
    def request(self, waiter: Waiter, timeout: float | None, now: float) -> tuple[str, Entry] | None:
        """Answer ``waiter`` now if a value is there: returns (tag, entry).

        Otherwise, unless ``timeout == 0``, registers it (with a deadline when
        ``timeout`` is a number) and returns None.
        """
        tag = waiter.tag if waiter.tag is not None else self._oldest_match(waiter)
        if tag is not None and tag in self._values:
            fifo = self._values[tag]
            if not waiter.take:
                return tag, fifo[0]
            entry = fifo.popleft()
            self._order[tag].popleft()
            if not fifo:
                del self._values[tag], self._order[tag]
            return tag, entry
        if timeout is not None and timeout <= 0:
            return None
        waiter.seq = next(self._seq)
        if waiter.tag is not None:
            self._waiters.setdefault(waiter.tag, deque()).append(waiter)
        else:
            self._any.append(waiter)
        if timeout is not None:
            waiter.deadline = now + timeout
            heapq.heappush(self._deadlines, (waiter.deadline, waiter.seq, waiter))
        return None

    def take_many(self, tag: str, limit: int) -> list[Entry]:
        """Take up to ``limit`` stored values of ``tag`` at once, oldest first.

        Only values already stored: a tag with values has no waiters (invariant above),
        so taking several never jumps ahead of anyone.
        """
        fifo = self._values.get(tag)
        if not fifo:
            return []
        count = min(limit, len(fifo))
        order = self._order[tag]
        taken = [fifo.popleft() for _ in range(count)]
        for _ in range(count):
            order.popleft()
        if not fifo:
            del self._values[tag], self._order[tag]
        return taken

    def _oldest_match(self, waiter: Waiter) -> str | None:
        """For take_any: the matching tag whose head value was put first."""
        if waiter.tags is not None:
            candidates: Any = (t for t in waiter.tags if t in self._values)
        else:
            candidates = (t for t in self._values if waiter.matches(t))
        best, best_seq = None, None
        for tag in candidates:
            seq = self._order[tag][0]
            if best_seq is None or seq < best_seq:
                best, best_seq = tag, seq
        return best

    # -- time and shutdown -------------------------------------------------------
    def next_deadline(self) -> float | None:
        """The earliest deadline of a waiter still waiting, if any."""
        heap = self._deadlines
        while heap and not heap[0][2].active:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expire(self, now: float) -> list[Waiter]:
        """Remove and return the waiters whose deadline has passed."""
        expired = []
        heap = self._deadlines
        while heap and (heap[0][0] <= now or not heap[0][2].active):
            _, _, waiter = heapq.heappop(heap)
            if waiter.active:
                waiter.active = False
                if waiter.tag is None:
                    self._any.remove(waiter)
                expired.append(waiter)
        if expired:
            for tag in [t for t, q in self._waiters.items() if not any(w.active for w in q)]:
                del self._waiters[tag]
        return expired

    def waiting_count(self) -> int:
        """How many requests are still waiting."""
        return sum(w.active for q in self._waiters.values() for w in q) + len(self._any)

    def stored_count(self) -> tuple[int, int]:
        """(values stored, tags holding them)."""
        return sum(len(q) for q in self._values.values()), len(self._values)
