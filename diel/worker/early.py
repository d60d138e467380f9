"""A worker rank's first isolated trial process, forked before MPI starts.

An isolated worker copy (one rank, ``isolate`` on, a ``run`` function) keeps a child
process for its trials (:mod:`diel.worker.isolated`). Started once its rank has MPI and
has checked its module, that child's interpreter start and imports (some 0.07 s of CPU)
and its warden's competed, on a node's few cores, with the start of every other rank,
the search master's first. So ``diel run`` calls :func:`fork_trial_child` before
``mpi4py.MPI`` is imported: when the launcher's environment gives this rank's place in the
job and the workflow says that place is an isolated worker copy, the child and its warden
are forked from the rank as it is (:meth:`~diel.worker.isolated.IsolatedRunner.fork`), a
few milliseconds each, with the rank's modules already in them. No MPI state exists yet,
so the copies hold none, and they close the launcher's descriptors.

The child then waits. :func:`~diel.worker.module.prepare` takes it (:func:`take`) once the
rank has checked its module, and sends it the rank's environment (the node's thread
counts, ``DIEL_LOCAL_*``, the GPU) with the function to load: before MPI starts too, where
the launcher also tells the rank its place on the node (:mod:`diel.executive.node`), so
that the child loads the user's code while the search master still imports its own. A rank that
finds it runs something else (a mistake in the workflow, another number of ranks) ends it
(:func:`discard`): the child exits at once, quietly. Where the place cannot be told
beforehand (another launcher, a workflow that does not load) nothing is forked and the
child is started as before; so are the children that replace one (after a crash, a
timeout, a trial's damage).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from diel.executive.config import Workflow, load_workflow
from diel.executive.layout import Layout
from diel.plugins import BUILTINS

if TYPE_CHECKING:
    from diel.worker.isolated import IsolatedRunner

__all__ = ["fork_trial_child", "take", "discard", "world_place"]

#: Where launchers give a rank its world rank and the job's size: MPICH's Hydra (PMI),
#: Open MPI, PMIx (rank only).
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
WORKER = ("worker", BUILTINS["diel.modules"]["worker"])   # the builtin's two names

#: The child forked for this rank, until :func:`take` or :func:`discard`.
_forked: IsolatedRunner | None = None


def world_place() -> tuple[int, int | None] | None:
    """This rank's world rank and the job's size (None where only the rank is given), as
    the launcher's environment tells them before MPI starts; None when it does not."""
    rank = next((os.environ[name] for name in RANK_VARIABLES if name in os.environ), None)
    size = next((os.environ[name] for name in SIZE_VARIABLES if name in os.environ), None)
    try:
        return (int(rank), None if size is None else int(size)) if rank is not None else None
    except ValueError:
        return None


def fork_trial_child(path: str, workflow: Workflow | None = None) -> None:
    """Fork this rank's isolated trial child now, if the workflow at ``path`` makes this
    rank an isolated worker copy; else nothing. Only before ``mpi4py.MPI`` is imported,
    with no other thread running: a fork is safe then. ``workflow``: the one at ``path``,
    where the rank has loaded it already."""
    global _forked
    if _forked is not None or "mpi4py.MPI" in sys.modules or not _single_threaded():
        return
    runner = _runner_for(path, workflow)
    if runner is None:
        return
    try:
        runner.fork()
    except OSError:   # out of processes or memory: the child is started as before
        return
    _forked = runner


def _single_threaded() -> bool:
    """Whether this process runs no thread but the main one (a copy would hold the locks
    another thread holds, with no one to release them)."""
    return threading.active_count() == 1


def _runner_for(path: str, workflow: Workflow | None) -> IsolatedRunner | None:
    """The runner of this rank's isolated trials, when the launcher's environment and the
    workflow at ``path`` (``workflow``, where loaded) say it has them; None otherwise, and
    on any mistake (the validation tells it)."""
    place = world_place()
    if place is None:
        return None
    rank, size = place
    try:
        workflow = load_workflow(path) if workflow is None else workflow
        if size not in (None, workflow.total_ranks) or not 0 <= rank < workflow.total_ranks:
            return None
        module = workflow.module(Layout(workflow).of(rank).module)
        if module.function not in WORKER:
            return None
        from diel.worker.settings import parse_settings   # a worker's rank only

        settings = parse_settings(module.settings, f"modules.{module.name}.settings",
                                  workflow.directory, module.size)
    except Exception:  # noqa: BLE001 - told by the validation after MPI's start
        return None
    if settings.command is not None or not settings.run or not settings.isolated(module.size):
        return None
    from diel.worker.isolated import IsolatedRunner

    return IsolatedRunner(settings.run, workflow.directory, {}, settings.grace)


def take(spec: str, base: Path) -> IsolatedRunner | None:
    """The forked child's runner, if it runs ``spec`` from ``base`` (else it is ended);
    None when none was forked. Taken once."""
    from diel.worker.isolated import kept_if_same   # after MPI's start: the rank's module

    global _forked
    runner, _forked = _forked, None
    return kept_if_same(runner, spec, base)


def discard() -> None:
    """End the forked child if nothing took it (this rank runs something else): it exits
    quietly, and nothing of it is left."""
    global _forked
    runner, _forked = _forked, None
    if runner is not None:
        runner.close()
