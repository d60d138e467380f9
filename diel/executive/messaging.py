"""Direct module-to-module messages, addressed by module name (openDIEL's IEL_send/recv).

Messages travel on their own duplicate of COMM_WORLD, so they never mix with the
tuple space or the executive's control traffic. Sends do not block; a receive waits
by probing with backoff, so a rank blocked in ``recv`` does not eat a core.
"""

from __future__ import annotations

import logging
from typing import Any

from mpi4py import MPI

from diel.executive.layout import Layout
from diel.executive.waiting import wait_all
from tuplespace.backoff import wait_for

__all__ = ["Messenger"]

MESSAGE_TAG = 0
UNDELIVERED_GRACE_SECONDS = 10.0


class Messenger:
    """Sends and receives Python objects between modules of one workflow."""

    def __init__(self, comm: MPI.Comm, layout: Layout) -> None:
        self.comm = comm
        self.layout = layout
        self._pending: list[MPI.Request] = []

    def send(self, module: str, obj: Any, copy: int = 0, rank: int = 0) -> None:
        """Send ``obj`` to ``rank`` of ``copy`` of ``module``; returns at once."""
        dest = self.layout.world_rank(module, copy, rank)
        self._pending = [request for request in self._pending if not request.Test()]
        self._pending.append(self.comm.isend(obj, dest=dest, tag=MESSAGE_TAG))

    def recv(self, module: str, copy: int = 0, rank: int = 0) -> Any:
        """Wait for the next object sent by ``rank`` of ``copy`` of ``module``."""
        source = self.layout.world_rank(module, copy, rank)
        return wait_for(lambda: self.comm.improbe(source=source, tag=MESSAGE_TAG)).recv()

    def flush(self, log: logging.Logger) -> None:
        """Wait for sends still in flight; warn about any nobody received."""
        if not wait_all(self._pending, UNDELIVERED_GRACE_SECONDS):
            log.warning("%d message(s) sent with ctx.send were never received",
                        sum(1 for request in self._pending if not request.Test()))
