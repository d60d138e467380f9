"""How a client's waits for a server's reply went, for the MPI scripts that check it
sleeps on its doorbell (mpi_doorbell.py, mpi_first_wait.py), and their one server."""

from __future__ import annotations

from mpi4py import MPI

from tuplespace import Client, Server
from tuplespace.doorbell import Doorbell


def client_of_rank_0() -> Client:
    """Rank 0 (of a copy of the world) serves the space until it is stopped, then its
    process ends; every other rank gets a client of it."""
    space_comm = MPI.COMM_WORLD.Dup()
    if space_comm.rank == 0:
        Server(space_comm, [0]).run()
        raise SystemExit(0)
    return Client(space_comm, [0])


def count_waits(client: Client) -> dict[str, int]:
    """From now on, count in the dict returned the polling pauses of ``client``'s
    transport's backoff (``polling``) and how this process's doorbell waits ended
    (``rung``, ``timed out``)."""
    counts = {"polling": 0, "rung": 0, "timed out": 0}
    pause = client._t.backoff.pause
    wait = Doorbell.wait

    def counted_pause(*args, **kwargs):
        counts["polling"] += 1
        return pause(*args, **kwargs)

    def counted_wait(bell, seconds):
        rung = wait(bell, seconds)
        counts["rung" if rung else "timed out"] += 1
        return rung

    client._t.backoff.pause = counted_pause
    Doorbell.wait = counted_wait
    return counts
