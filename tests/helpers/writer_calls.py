"""The callbacks a checkpoint writer made, for the writer's tests."""

from __future__ import annotations

import threading
from pathlib import Path

from diel.checkpoints import Written

WAIT_S = 30


class Calls:
    """The callbacks a writer made, in order, with the thread each came from."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.threads: set[str] = set()
        self.changed = threading.Condition()

    def durable(self, written: Written) -> None:
        self._add(("durable", int(Path(written.path).parent.name[6:]), written.step, written))

    def failed(self, key: int, step: int, reason: str) -> None:
        self._add(("failed", key, step, reason))

    def _add(self, event: tuple) -> None:
        with self.changed:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[tuple]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.events) >= count, WAIT_S), self.events
            return list(self.events)

    def steps(self) -> list[tuple[str, int, int]]:
        return [event[:3] for event in self.events]
