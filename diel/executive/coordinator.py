"""The executive's control plane: who has finished which group.

When a group's last iteration ends on all its ranks, its lowest rank tells every
other rank. Ranks waiting for a group's dependencies, services asking whether to stop,
and ranks waiting for the end of the workflow all read these notices by probing with
backoff, so a waiting rank sleeps instead of spinning.
"""

from __future__ import annotations

import logging
import time

from mpi4py import MPI

from diel.executive.config import Workflow
from diel.executive.waiting import wait_all
from tuplespace.backoff import wait_until

__all__ = ["Coordinator"]

GROUP_DONE_TAG = 1

log = logging.getLogger("diel.executive")


class Coordinator:
    """Tracks finished groups over a private duplicate of COMM_WORLD."""

    def __init__(self, comm: MPI.Comm, workflow: Workflow) -> None:
        self.comm = comm
        self.group_names = [group.name for group in workflow.groups]
        self.done: set[str] = set()
        self._sends: list[MPI.Request] = []

    def poll(self) -> None:
        """Take every group-done notice that has arrived (never blocks)."""
        while True:
            message = self.comm.improbe(source=MPI.ANY_SOURCE, tag=GROUP_DONE_TAG)
            if message is None:
                return
            self.done.add(self.group_names[message.recv()])

    def finished(self, groups: list[str] | tuple[str, ...]) -> bool:
        """True when every group in ``groups`` has finished (checks for news first)."""
        self.poll()
        return self.done.issuperset(groups)

    def all_finished(self) -> bool:
        """True when every group of the workflow has finished."""
        return self.finished(self.group_names)

    def wait_for(self, groups: tuple[str, ...] | list[str], why: str) -> None:
        """Sleep until ``groups`` have finished; logs the wait and the CPU it cost."""
        if not groups:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        wait_until(lambda: self.finished(groups))
        log.debug("waited %.2f s (%.3f s CPU) for %s: %s", time.perf_counter() - wall,
                  time.process_time() - cpu, why, ", ".join(groups))

    def announce(self, group: str) -> None:
        """Tell every rank that ``group`` has finished (called by one rank of the group)."""
        index = self.group_names.index(group)
        self.done.add(group)
        for rank in range(self.comm.size):
            if rank != self.comm.rank:
                self._sends.append(self.comm.isend(index, dest=rank, tag=GROUP_DONE_TAG))

    def close(self) -> None:
        """Wait for the end of the workflow and for every notice to be delivered. The
        ranks do not meet here: ``diel run`` meets them all once, as each leaves
        (:func:`diel.cli._leave`)."""
        self.wait_for(self.group_names, "the end of the workflow")
        wait_all(self._sends)
