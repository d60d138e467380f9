"""Ranks that share a node share its cores and GPUs.

Run before NumPy is imported: BLAS libraries read their thread count once, when they
load. With ``ranks x threads`` above the cores every rank slows down, so each rank gets
``cores // ranks on the node`` threads (at least one) unless the user set a count.

A rank learns its place on the node before MPI starts where the launcher's environment
tells it (:func:`share_node_early`: MPICH's Hydra, Open MPI), so that ``diel run`` can
check and prepare its module, NumPy and all, before MPI's start; elsewhere it asks the
other ranks once MPI has started (:func:`share_node`, collective). mpi4py's ``MPI``
(whose import starts MPI) is imported only by the latter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["NodeShare", "share_node", "share_node_early", "local_place", "THREAD_VARIABLES",
           "LOCAL_VARIABLES"]

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: Where launchers give a rank its place among the job's ranks on its node (local rank,
#: local size): MPICH's Hydra, Open MPI.
LOCAL_VARIABLES = (("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                   ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))


@dataclass(frozen=True)
class NodeShare:
    """This rank's place on its node and the BLAS threads it may use."""

    local_rank: int
    local_size: int
    threads: int


def local_place() -> tuple[int, int] | None:
    """This rank's local rank and the number of the job's ranks on its node, as the
    launcher's environment tells them before MPI starts; None where it does not (or
    tells something impossible)."""
    for rank_variable, size_variable in LOCAL_VARIABLES:
        rank, size = os.environ.get(rank_variable, ""), os.environ.get(size_variable, "")
        if rank.isdigit() and size.isdigit() and int(rank) < int(size):
            return int(rank), int(size)
    return None


def share_node_early() -> NodeShare | None:
    """:func:`share_node` from the launcher's environment (:func:`local_place`), before
    MPI starts; None where it does not tell the place (nothing is set then)."""
    place = local_place()
    return None if place is None else _share(*place)


def share_node(world: MPI.Comm) -> NodeShare:
    """Find the ranks on this node (collective) and set the BLAS thread variables.

    A count the user set in any thread variable is kept and used for the others too. ``DIEL_LOCAL_RANK`` and
    ``DIEL_LOCAL_SIZE`` are exported too, for modules and the programs they start.
    """
    from mpi4py import MPI

    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.rank)
    local_rank, local_size = node.rank, node.size
    node.Free()
    return _share(local_rank, local_size)


def _share(local_rank: int, local_size: int) -> NodeShare:
    """Set the thread variables and ``DIEL_LOCAL_*`` for this place on the node."""
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
