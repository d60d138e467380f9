"""Ranks that share a node share its cores and GPUs.

Run before NumPy is imported: BLAS libraries read their thread count once, when they
load. With ``ranks x threads`` above the cores every rank slows down, so each rank gets
``cores // ranks on the node`` threads (at least one) unless the user set a count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mpi4py import MPI

__all__ = ["NodeShare", "share_node", "THREAD_VARIABLES"]

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class NodeShare:
    """This rank's place on its node and the BLAS threads it may use."""

    local_rank: int
    local_size: int
    threads: int


def share_node(world: MPI.Comm) -> NodeShare:
    """Find the ranks on this node (collective) and set the BLAS thread variables.

    A count the user set in any thread variable is kept and used for the others too. ``DIEL_LOCAL_RANK`` and
    ``DIEL_LOCAL_SIZE`` are exported too, for modules and the programs they start.
    """
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.rank)
    local_rank, local_size = node.rank, node.size
    node.Free()
    threads = _user_threads()
    if threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        threads = max(1, (cores or 1) // local_size)
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, str(threads))
    os.environ["DIEL_LOCAL_RANK"] = str(local_rank)
    os.environ["DIEL_LOCAL_SIZE"] = str(local_size)
    return NodeShare(local_rank, local_size, threads)


def _user_threads() -> int | None:
    """The thread count the user set in any of the BLAS variables, if a valid one."""
    for variable in THREAD_VARIABLES:
        value = os.environ.get(variable, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None
