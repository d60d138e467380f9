"""How a client's waits for a server's reply went, for the MPI scripts that check it
sleeps on its doorbell (mpi_doorbell.py, mpi_first_wait.py)."""

from __future__ import annotations

from tuplespace import Client
from tuplespace.doorbell import Doorbell


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
