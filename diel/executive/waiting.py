"""Sleeping waits on MPI requests and barriers (MPICH's blocking ones spin).

``mpi4py.MPI`` is imported where it is used (:func:`wait_all`), not with this module:
importing it starts MPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuplespace.backoff import Backoff, wait_until

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["wait_request", "wait_all", "sleeping_barrier", "BARRIER_MAX_SLEEP"]

#: The longest pause of a rank waiting in :func:`sleeping_barrier` before its wait turns
#: idle (then the pauses grow with it, as every wait's do: :class:`Backoff`). MPI moves a
#: non-blocking barrier on only inside a rank's call, and each of its rounds waits for
#: another rank's next look: with the usual 4 ms pauses the rounds of 6 ranks' barrier
#: added 15-25 ms after the last rank came, twice at a job's end.
BARRIER_MAX_SLEEP = 1e-3


def wait_request(request: MPI.Request, timeout: float | None = None) -> bool:
    """Wait for ``request`` without burning CPU; False when ``timeout`` ran out."""
    return wait_until(request.Test, timeout)


def wait_all(requests: list[MPI.Request], timeout: float | None = None) -> bool:
    """Wait for every request in ``requests``; False when ``timeout`` ran out."""
    from mpi4py import MPI

    return wait_until(lambda: MPI.Request.Testall(requests), timeout)


def sleeping_barrier(comm: MPI.Comm) -> None:
    """A barrier over ``comm`` whose waiting ranks sleep instead of spinning, in pauses of
    at most :data:`BARRIER_MAX_SLEEP` until the wait turns idle."""
    wait_until(comm.Ibarrier().Test, backoff=Backoff(max_sleep=BARRIER_MAX_SLEEP))
