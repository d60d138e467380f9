"""Sleeping waits on MPI requests and barriers (MPICH's blocking ones spin)."""

from __future__ import annotations

from mpi4py import MPI

from tuplespace.backoff import wait_until

__all__ = ["wait_request", "wait_all", "sleeping_barrier"]


def wait_request(request: MPI.Request, timeout: float | None = None) -> bool:
    """Wait for ``request`` without burning CPU; False when ``timeout`` ran out."""
    return wait_until(request.Test, timeout)


def wait_all(requests: list[MPI.Request], timeout: float | None = None) -> bool:
    """Wait for every request in ``requests``; False when ``timeout`` ran out."""
    return wait_until(lambda: MPI.Request.Testall(requests), timeout)


def sleeping_barrier(comm: MPI.Comm) -> None:
    """A barrier over ``comm`` whose waiting ranks sleep instead of spinning."""
    wait_request(comm.Ibarrier())
