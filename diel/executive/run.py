"""The MPI executive: lays out ranks, splits communicators and runs the group DAG.

Every rank runs :func:`run_workflow`. It finds its placement, takes part in the
two-level split (one communicator per module, one per copy), then either serves (a
service module runs once, until the executive asks it to stop) or waits for its
group's dependencies and runs its module for each of the group's iterations. Any
exception in a module ends the whole job: it is logged with the module, copy and rank,
output is flushed and ``COMM_WORLD.Abort(1)`` stops every rank, so nothing hangs.

Two endings are not failures. A user's mistake found only at run time (a
:class:`~diel.errors.ConfigError`, or :class:`~diel.errors.StudyBusy`: the study is
being run by another job) is one line on stderr and exit status 2 for the whole job,
with MPI's own abort notice silenced. A results database whose disk is full (or whose
quota is exceeded: :class:`~diel.errors.DatabaseUnwritable`) is a fault, not a bug: one
line saying so and how to resume, exit status 1. An interrupt
(:class:`~diel.executive.interrupts.Interrupted`, SIGINT or SIGTERM) unwinds the rank without any
report; ``diel run`` then exits 130 or 143 (see :mod:`diel.executive.interrupts`). A
search stopped before the wall-time limit with its trials paused
(:class:`~diel.executive.walltime.Stopped`) ends the job with its one line and
:data:`~diel.executive.walltime.STOPPED_STATUS` (75): run the same command to resume.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from mpi4py import MPI

from diel.executive.placeholders import fill_placeholders
from diel.executive.config import ModuleSpec, Workflow
from diel.executive.context import Context
from diel.errors import ConfigError, DatabaseUnwritable, ModuleFailed, StudyBusy
from diel.executive.interrupts import Interrupted
from diel.executive.walltime import STOPPED_STATUS, Stopped, WallTime
from diel.executive.coordinator import Coordinator
from diel.executive.layout import Layout, Placement
from diel.executive.messaging import Messenger
from diel.executive.node import NodeShare
from diel.executive.modules import SPACE_BUILTIN, resolve_function, resolve_program
from diel.executive.waiting import sleeping_barrier

__all__ = ["run_workflow", "abort", "end_job", "USAGE_ERROR"]

log = logging.getLogger("diel.executive")

OUTPUT_GRACE = 0.2  # seconds between flushing and MPI_Abort
USAGE_ERROR = 2  # the exit status of a user's mistake, as diel's CLI gives it
USAGE_ERRORS = (ConfigError, StudyBusy)
FAULT_STATUS = 1  # the exit status of a fault of the machine (a full disk), not of diel


def run_workflow(workflow: Workflow, node: NodeShare,
                 started: Callable[[], None] = lambda: None,
                 wall_time: WallTime | None = None) -> int:
    """Run ``workflow`` on this rank of COMM_WORLD (already validated); returns 0 once
    every group has finished and this rank's module has ended (the ranks have not met:
    the caller meets them before MPI ends, as ``diel run`` does), or raises
    :class:`~diel.executive.interrupts.Interrupted` when the job is interrupted.

    COMM_WORLD's size must equal ``workflow.total_ranks``; the caller checks it.
    ``node`` says where this rank sits on its node (for GPUs and threads). ``started``
    is called once this rank is past the start's blocking collectives (the splits),
    before its module runs: ``diel run`` lets interrupts in from there on.
    ``wall_time`` (``ctx.wall_time``) says when the job is to stop and keep its progress.
    """
    world = MPI.COMM_WORLD
    layout = Layout(workflow)
    placement = layout.of(world.rank)
    module = workflow.module(placement.module)
    group = workflow.group_of(module.name)
    try:
        module_comm = world.Split(placement.module_index, world.rank)
        copy_comm = module_comm.Split(placement.copy, world.rank)
        group_color = workflow.groups.index(group) if group else MPI.UNDEFINED
        group_comm = world.Split(group_color, world.rank)
        coordinator = Coordinator(world.Dup(), workflow)
        messenger = Messenger(world.Dup(), layout)
        space_comm = world.Dup()
        space_servers = _space_servers(workflow, layout)
        ctx = Context(placement=placement, layout=layout, settings=module.settings,
                      comm=copy_comm, module_comm=module_comm, space_comm=space_comm,
                      space_servers=space_servers, messenger=messenger,
                      stop_requested=coordinator.all_finished, workflow=workflow, node=node,
                      wall_time=wall_time or WallTime())
        runner = _runner(module, workflow, placement)
        started()
        if group is None:
            log.debug("serving as %s", module.name)
            _run_guarded(runner, ctx, placement, workflow.path)
        else:
            coordinator.wait_for(group.after, f"group '{group.name}' to start")
            for iteration in range(group.iterations):
                ctx.iteration = iteration
                _run_guarded(runner, ctx, placement, workflow.path)
                if iteration == group.iterations - 1:
                    ctx.close()  # deliver its last tputs before services may be stopped
                sleeping_barrier(group_comm)
            if group_comm.rank == 0:
                coordinator.announce(group.name)
                log.debug("group '%s' finished (%d iteration(s))", group.name, group.iterations)
        ctx.close()
        messenger.flush(log)
        coordinator.close()   # every group has finished
        if space_servers and world.rank == _closer(workflow, layout):
            _stop_space(space_comm, space_servers)
    except Exception:
        abort(f"the executive failed on world rank {world.rank}", traceback.format_exc())
    return 0


def _space_servers(workflow: Workflow, layout: Layout) -> tuple[int, ...]:
    for module in workflow.modules:
        if module.function == SPACE_BUILTIN:
            return tuple(layout.world_ranks(module.name))
    return ()


def _closer(workflow: Workflow, layout: Layout) -> int:
    """The world rank that stops the tuple space once every group has finished: the
    lowest rank of a module that runs in a group (-1: none does)."""
    return min((placement.world_rank for placement in layout.placements
                if workflow.group_of(placement.module) is not None), default=-1)


def _stop_space(space_comm: MPI.Comm, servers: tuple[int, ...]) -> None:
    """Tell the tuple-space servers that the workflow is over (a ``SHUTDOWN`` each) and
    wait until they have stopped: the moment every group has finished, rather than at
    the server's next look at ``ctx.stop_requested()`` (every 50 ms), which the whole job
    waited for at its end."""
    import tuplespace

    tuplespace.Client(space_comm, servers).shutdown()


def _runner(module: ModuleSpec, workflow: Workflow, placement: Placement) -> Callable[[Context], Any]:
    """What this rank runs each time its module is called: a function or a program."""
    if module.command is None:
        return resolve_function(module)
    argv = resolve_program(module, workflow.directory)
    import tempfile   # here, as only a rank that runs a program needs the program code

    from diel.executive.command import program_environment, run_program

    def run_command(ctx: Context) -> None:
        fields = {**module.settings, "module": ctx.name, "copy": ctx.copy, "rank": ctx.rank,
                  "size": ctx.size, "iteration": ctx.iteration,
                  "world_rank": placement.world_rank}
        with tempfile.TemporaryDirectory(prefix="diel-") as folder:
            result_file = Path(folder) / "result.json"
            run_program(fill_placeholders(argv, fields), program_environment(fields, result_file),
                        cwd=workflow.directory, timeout=module.timeout)
            if result_file.exists():
                ctx.log.info("result: %s", result_file.read_text(encoding="utf-8")[:500])

    return run_command


def _run_guarded(runner: Callable[[Context], Any], ctx: Context, placement: Placement,
                 source: Path) -> None:
    """Run the module once. An interrupt goes on up (the rank ends quietly); a user's
    mistake ends the job with one line and status 2 (``source`` is the workflow file it
    is attributed to), a database that cannot be written with one line and status 1, a
    search stopped with its trials paused with its one line and status 75; any other
    failure aborts the whole job with where it happened."""
    try:
        runner(ctx)
    except Interrupted:
        raise
    except Stopped as exc:
        end_job(str(exc), STOPPED_STATUS)
    except USAGE_ERRORS as exc:
        if isinstance(exc, ConfigError) and exc.source is None:
            exc = exc.in_file(str(source))
        end_job(f"diel: error: {exc}", USAGE_ERROR)
    except DatabaseUnwritable as exc:
        end_job(f"diel: error: {exc}", FAULT_STATUS)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the job, not hang it
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            return
        details = str(exc) if isinstance(exc, ModuleFailed) else traceback.format_exc()
        where = (f"module '{placement.module}' failed on copy {placement.copy}, rank "
                 f"{placement.rank} (world rank {placement.world_rank}), iteration {ctx.iteration}")
        abort(where, details)


def _flush() -> None:
    """Flush every output, then give the launcher a moment to forward it: MPI_Abort
    kills every rank at once, and output still in the launcher's pipes can be lost."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(OUTPUT_GRACE)


def abort(where: str, details: str) -> None:
    """Log ``where`` and ``details``, flush every output, and abort COMM_WORLD."""
    log.critical("%s:\n%s", where, details.rstrip())
    _flush()
    MPI.COMM_WORLD.Abort(1)


def end_job(line: str, status: int) -> None:
    """Print ``line`` on stderr and end every rank of the job at once with ``status``.
    MPI's own notice of the abort is silenced: a user's mistake is one line, not a
    crash report, and no rank is left waiting for this one."""
    sys.stderr.write(line + "\n")  # one write: mpiexec merges the ranks' output
    _flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    MPI.COMM_WORLD.Abort(status)
