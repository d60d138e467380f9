"""diel.executive.waiting: a sleeping barrier looks at its request often while the wait
is short (each round of MPI's barrier waits for another rank's look), rarely once idle."""

from __future__ import annotations

import statistics
import time

from diel.executive import waiting


class _Request:
    """An MPI request that completes ``after`` seconds, recording when it is tested."""

    def __init__(self, after: float) -> None:
        self.done_at = time.perf_counter() + after
        self.looks: list[float] = []

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        self.looks.append(time.perf_counter())
        return self.looks[-1] >= self.done_at


class _Comm:
    def __init__(self, after: float) -> None:
        self.request = _Request(after)

    def Ibarrier(self) -> _Request:  # noqa: N802 - mpi4py's name
        return self.request


def _gaps(looks: list[float], start: float, end: float) -> list[float]:
    return [b - a for a, b in zip(looks, looks[1:]) if start <= a - looks[0] < end]


def test_a_short_barrier_wait_looks_every_millisecond_or_so():
    comm = _Comm(after=0.06)
    waiting.sleeping_barrier(comm)
    gaps = _gaps(comm.request.looks, 0.02, 0.06)   # past the spin and the growing pauses
    assert gaps and statistics.median(gaps) < 3 * waiting.BARRIER_MAX_SLEEP, gaps


def test_a_long_barrier_wait_turns_idle_and_looks_rarely():
    comm = _Comm(after=0.6)
    waiting.sleeping_barrier(comm)
    gaps = _gaps(comm.request.looks, 0.4, 0.6)   # idle: pauses of ~1% of the wait so far
    assert gaps and statistics.median(gaps) > 2 * waiting.BARRIER_MAX_SLEEP, gaps
