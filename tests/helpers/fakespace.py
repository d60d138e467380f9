"""An in-memory tuple space with the client's semantics (docs/contracts.md), for tests:
FIFO per tag, blocking takes with timeouts, ``try_tget`` returning :data:`EMPTY`, and a
distributed store (``dist_tput``, ``dist_tget``, ``dist_tread``) of array copies."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Any

import numpy as np

EMPTY = object()


class FakeSpace:
    """A dict of deques under one condition variable; ``log`` records every put."""

    def __init__(self) -> None:
        self._tags: dict[str, deque] = defaultdict(deque)
        self._cond = threading.Condition()
        self.log: list[tuple[str, Any]] = []

    def tput(self, tag: str, value: Any) -> None:
        with self._cond:
            self._tags[tag].append(value)
            self.log.append((tag, value))
            self._cond.notify_all()

    def tput_many(self, tag: str, values: list[Any]) -> None:
        for value in values:
            self.tput(tag, value)

    def _wait(self, take: Any, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (found := take()) is EMPTY:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no tuple")
                self._cond.wait(left)
            return found

    def tget(self, tag: str, timeout: float | None = None) -> Any:
        return self._wait(lambda: self._pop(tag), timeout)

    def tread(self, tag: str, timeout: float | None = None) -> Any:
        return self._wait(lambda: self._tags[tag][0] if self._tags[tag] else EMPTY, timeout)

    def tget_many(self, tag: str, limit: int, timeout: float | None = None) -> list[Any]:
        def take() -> Any:
            values = self._tags.get(tag)
            if not values:
                return EMPTY
            return [values.popleft() for _ in range(min(limit, len(values)))]
        return self._wait(take, timeout)

    def try_tget(self, tag: str) -> Any:
        with self._cond:
            return self._pop(tag)

    def tget_any(self, tags: list[str] | None = None, prefix: str | None = None,
                 timeout: float | None = None) -> tuple[str, Any]:
        def take() -> Any:
            for tag, values in self._tags.items():
                if values and (tags is None or tag in tags) and \
                        (prefix is None or tag.startswith(prefix)):
                    return tag, values.popleft()
            return EMPTY
        return self._wait(take, timeout)

    def dist_tput(self, tag: str, array: np.ndarray) -> None:
        self.tput(("dist", tag), np.array(array, copy=True))

    def dist_tget(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any:
        taken = _into(self.tread(("dist", tag), timeout), out)   # a wrong out leaves it stored
        self.try_tget(("dist", tag))
        return taken

    def dist_tread(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any:
        return _into(self.tread(("dist", tag), timeout), out)

    def dist_open(self, tag: str, timeout: float | None = None) -> None:
        """None: a fake space holds no memory files (its readers get copies)."""
        self.tread(("dist", tag), timeout)   # raises as the client does when none is stored
        return None

    def dist_keys(self) -> list[str]:
        """The tags that hold a distributed array."""
        with self._cond:
            return [tag[1] for tag, values in self._tags.items()
                    if isinstance(tag, tuple) and tag[0] == "dist" and values]

    def _pop(self, tag: str) -> Any:
        values = self._tags.get(tag)
        return values.popleft() if values else EMPTY

    def pending(self) -> dict[str, int]:
        """Tags that still hold values, with how many."""
        with self._cond:
            return {tag: len(v) for tag, v in self._tags.items() if v}


def _into(array: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """A copy of a stored array, in ``out`` when given (as the client's ``out=``)."""
    if out is None:
        return array.copy()
    if out.shape != array.shape or out.dtype != array.dtype:
        raise ValueError(f"out must be of shape {array.shape} and dtype {array.dtype}")
    out[...] = array
    return out
