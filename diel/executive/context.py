"""The ``ctx`` every module's ``main(ctx)`` receives.

It tells a module who it is (name, copy, rank, iteration, settings), hands it its
communicators, the tuple-space client and direct messaging by module name, and lets
a service ask whether the workflow is over.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping

from mpi4py import MPI

from diel.executive.config import Workflow
from diel.executive.layout import Layout, Placement
from diel.executive.messaging import Messenger
from diel.executive.node import NodeShare

if TYPE_CHECKING:
    import tuplespace

    from diel.executive.walltime import WallTime

__all__ = ["Context"]


class Context:
    """What a module sees of the running workflow (see docs/contracts.md)."""

    def __init__(self, *, placement: Placement, layout: Layout, settings: Mapping[str, Any],
                 comm: MPI.Comm, module_comm: MPI.Comm, space_comm: MPI.Comm,
                 space_servers: tuple[int, ...], messenger: Messenger,
                 stop_requested: Callable[[], bool], workflow: Workflow,
                 node: NodeShare, wall_time: WallTime | None = None) -> None:
        self.name = placement.module
        self.copy = placement.copy
        self.rank = placement.rank
        self.size = placement.size
        self.config: dict[str, Any] = dict(settings)
        self.iteration = 0
        self.comm = comm
        self.module_comm = module_comm
        self.world = MPI.COMM_WORLD
        self.space_comm = space_comm
        self.space_servers = space_servers
        self.workflow = workflow
        self.workflow_dir = workflow.path.parent
        self.workflow_name = workflow.name   # its name: setting, by default the file's stem
        self.local_rank = node.local_rank
        self.local_size = node.local_size
        self.threads = node.threads
        self.wall_time = wall_time   # when the job is to stop and keep its progress
        self.log = logging.getLogger(f"diel.{self.name}")
        self._layout = layout
        self._messenger = messenger
        self._stop_requested = stop_requested
        self._space: "tuplespace.Client | None" = None

    @property
    def space(self) -> "tuplespace.Client":
        """The tuple-space client; RuntimeError when the workflow has no tuplespace module."""
        if self._space is None:
            if not self.space_servers:
                raise RuntimeError(f"module '{self.name}' used ctx.space, but the workflow has no "
                                   "tuplespace module; add one (function: tuplespace) and list "
                                   "it under 'services'")
            import tuplespace
            self._space = tuplespace.Client(self.space_comm, self.space_servers)
        return self._space

    def send(self, module: str, obj: Any, copy: int = 0, rank: int = 0) -> None:
        """Send ``obj`` to ``rank`` of ``copy`` of ``module`` without waiting."""
        self._messenger.send(module, obj, copy, rank)

    def recv(self, module: str, copy: int = 0, rank: int = 0) -> Any:
        """Wait for the next object from ``rank`` of ``copy`` of ``module``."""
        return self._messenger.recv(module, copy, rank)

    def module_copies(self, module: str) -> int:
        """How many copies ``module`` runs (ValueError for an unknown module)."""
        return self._layout.copies(module)

    def module_settings(self, module: str) -> dict[str, Any]:
        """A copy of another module's settings (ValueError for an unknown module)."""
        return self._layout.settings(module)

    def module_ranks(self, module: str, copy: int | None = None) -> list[int]:
        """World ranks of ``module`` (one copy of it when ``copy`` is given)."""
        return self._layout.world_ranks(module, copy)

    def stop_requested(self) -> bool:
        """For services: True once every group has finished (never blocks)."""
        return self._stop_requested()

    def close(self) -> None:
        """Close the tuple-space client if this module opened one."""
        if self._space is not None:
            self._space.close()
            self._space = None

    def __repr__(self) -> str:
        return (f"<Context {self.name} copy={self.copy} rank={self.rank}/{self.size} "
                f"iteration={self.iteration}>")
