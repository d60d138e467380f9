"""Waiting without burning a core.

MPICH's blocking receive spins, and our ranks are often oversubscribed (more ranks
than cores), so a rank that waits in ``comm.recv`` steals CPU from the ranks doing
work. Everything in diel and tuplespace that waits therefore polls a non-blocking
check (``Iprobe``, ``Test``) through :class:`Backoff`: it spins for a few tens of
microseconds while traffic flows, then sleeps with pauses that grow to a few
milliseconds, and after a longer stretch of idleness to at most 1% of the time it has
been idle (capped at 50 ms), so an idle waiter costs almost nothing and the latency it
adds stays a small fraction of the wait.

Every wake-up costs about 40-60 µs of CPU on a virtual machine (the sleep system call
and the scheduler, measured), so a rank that wakes every 4 ms uses 1.5-2.5% of a core
whatever it polls; the idle pauses bring that under 1%.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Callable, TypeVar

__all__ = ["Backoff", "wait_until", "wait_for", "precise_sleeps"]

T = TypeVar("T")

SPIN_SECONDS = 50e-6
FIRST_SLEEP = 20e-6
MAX_SLEEP = 4e-3
IDLE_FRACTION = 0.01   # once idle, a pause may last this fraction of the idle time so far
IDLE_MAX_SLEEP = 50e-3


PR_SET_TIMERSLACK = 29
TIMER_SLACK_NS = 1000


def precise_sleeps() -> bool:
    """Ask Linux to end short sleeps on time (1 µs timer slack instead of 50 µs).

    A waiter sleeps between polls; with the default slack even ``sleep(1e-6)`` lasts
    about 60 µs, which becomes the latency of every hop through a server. The setting is
    per thread and inherited by threads started later. Returns False where unsupported.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


precise_sleeps()


class Backoff:
    """Pauses between polls: brief yielding spin first, then growing sleeps.

    Call :meth:`pause` after each unsuccessful poll and :meth:`reset` after each
    success. Sleeps double from ``first_sleep`` to ``max_sleep``; after that, a pause
    may grow to ``idle_fraction`` of the time spent idle, up to ``idle_max_sleep``, so
    a waiter idle for a second wakes about every 10 ms and one idle for longer every
    50 ms, while the latency added to the wait stays about 1% of it.
    ``hold`` keeps the sleeps at ``first_sleep`` for that long after the spin: in a
    chain of waiters (A waits for B, who waits for a server), growing sleeps feed on each
    other until every hop costs ``max_sleep``; short sleeps while traffic is recent keep
    hops short without spinning a shared core.
    """

    def __init__(self, spin: float = SPIN_SECONDS, first_sleep: float = FIRST_SLEEP,
                 max_sleep: float = MAX_SLEEP, hold: float = 0.0,
                 idle_fraction: float = IDLE_FRACTION,
                 idle_max_sleep: float = IDLE_MAX_SLEEP) -> None:
        if spin < 0 or hold < 0 or first_sleep <= 0 or max_sleep < first_sleep:
            raise ValueError("need spin >= 0, hold >= 0 and 0 < first_sleep <= max_sleep")
        if idle_fraction < 0 or idle_max_sleep < max_sleep:
            raise ValueError("need idle_fraction >= 0 and idle_max_sleep >= max_sleep")
        self.spin = spin
        self.hold = hold
        self.first_sleep = first_sleep
        self.max_sleep = max_sleep
        self.idle_fraction = idle_fraction
        self.idle_max_sleep = idle_max_sleep
        self.reset()

    def reset(self) -> None:
        """Start again from the spinning phase (call after a poll succeeded)."""
        self._idle_since = time.perf_counter()
        self._sleep = self.first_sleep

    def pause(self, limit: float | None = None,
              sleep: Callable[[float], object] = time.sleep) -> None:
        """Wait a little before the next poll; longer the longer nothing happened.

        ``limit`` (seconds) caps this one sleep, so a caller with a deadline (a
        timeout, a periodic stop check) never oversleeps it. ``sleep`` sleeps: a
        doorbell's wait (:mod:`tuplespace.doorbell`) ends it early when rung.
        """
        idle = time.perf_counter() - self._idle_since
        if idle < self.spin:
            os.sched_yield()
            return
        nap = self._sleep if limit is None else min(self._sleep, max(limit, 0.0))
        if nap > 0:
            sleep(nap)
        if idle >= self.spin + self.hold:
            cap = max(self.max_sleep, min(idle * self.idle_fraction, self.idle_max_sleep))
            self._sleep = min(self._sleep * 2, cap)


def wait_until(ready: Callable[[], bool], timeout: float | None = None,
               backoff: Backoff | None = None) -> bool:
    """Poll ``ready()`` with backoff until it returns true or ``timeout`` seconds pass.

    Returns True when ``ready()`` did, False on timeout. ``timeout=None`` waits forever.
    """
    backoff = backoff or Backoff()
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ready():
        if deadline is None:
            backoff.pause()
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        backoff.pause(left)
    return True


def wait_for(probe: Callable[[], T | None], backoff: Backoff | None = None) -> T:
    """Poll ``probe()`` with backoff until it returns something other than None; return it.

    For a sleeping blocking receive: ``wait_for(lambda: comm.improbe(source, tag)).recv()``.
    """
    backoff = backoff or Backoff()
    while (found := probe()) is None:
        backoff.pause()
    return found
