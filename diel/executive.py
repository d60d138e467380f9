"""The MPI executive: lays out ranks, splits communicators and runs the group DAG.

Every rank runs :func:`run_workflow`. It finds its placement, takes part in the
two-level split (one communicator per module, one per copy), then either serves (a
service module runs once, until the executive asks it to stop) or waits for its
group's dependencies and runs its module for each of the group's iterations. Any
exception in a module ends the whole job: it is logged with the module, copy and rank,
output is flushed and ``COMM_WORLD.Abort(1)`` stops every rank, so nothing hangs.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

from mpi4py import MPI

from diel.command import program_environment, run_program
from diel.placeholders import fill_placeholders
from diel.config import ModuleSpec, Workflow
from diel.context import Context
from diel.errors import ModuleFailed
from diel.coordinator import Coordinator
from diel.layout import Layout, Placement
from diel.messaging import Messenger
from diel.node import NodeShare
from diel.modules import SPACE_BUILTIN, resolve_function, resolve_program
from diel.waiting import sleeping_barrier

__all__ = ["run_workflow", "abort"]

log = logging.getLogger("diel.executive")


def run_workflow(workflow: Workflow, node: NodeShare) -> int:
    """Run ``workflow`` on this rank of COMM_WORLD (already validated); returns 0.

    COMM_WORLD's size must equal ``workflow.total_ranks``; the caller checks it.
    ``node`` says where this rank sits on its node (for GPUs and threads).
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
                      stop_requested=coordinator.all_finished, workflow_path=workflow.path,
                      node=node)
        runner = _runner(module, workflow, placement)
        if group is None:
            log.debug("serving as %s", module.name)
            _run_guarded(runner, ctx, placement)
        else:
            coordinator.wait_for(group.after, f"group '{group.name}' to start")
            for iteration in range(group.iterations):
                ctx.iteration = iteration
                _run_guarded(runner, ctx, placement)
                if iteration == group.iterations - 1:
                    ctx.close()  # deliver its last tputs before services may be stopped
                sleeping_barrier(group_comm)
            if group_comm.rank == 0:
                coordinator.announce(group.name)
                log.info("group '%s' finished (%d iteration(s))", group.name, group.iterations)
        ctx.close()
        messenger.flush(log)
        coordinator.close()
    except Exception:
        abort(f"the executive failed on world rank {world.rank}", traceback.format_exc())
    return 0


def _space_servers(workflow: Workflow, layout: Layout) -> tuple[int, ...]:
    for module in workflow.modules:
        if module.function == SPACE_BUILTIN:
            return tuple(layout.world_ranks(module.name))
    return ()


def _runner(module: ModuleSpec, workflow: Workflow, placement: Placement) -> Callable[[Context], Any]:
    """What this rank runs each time its module is called: a function or a program."""
    if module.command is None:
        return resolve_function(module)
    argv = resolve_program(module, workflow.directory)

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


def _run_guarded(runner: Callable[[Context], Any], ctx: Context, placement: Placement) -> None:
    """Run the module once; any failure aborts the whole job with where it happened."""
    try:
        runner(ctx)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the job, not hang it
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            return
        details = str(exc) if isinstance(exc, ModuleFailed) else traceback.format_exc()
        where = (f"module '{placement.module}' failed on copy {placement.copy}, rank "
                 f"{placement.rank} (world rank {placement.world_rank}), iteration {ctx.iteration}")
        abort(where, details)


def abort(where: str, details: str) -> None:
    """Log ``where`` and ``details``, flush every output, and abort COMM_WORLD."""
    log.critical("%s:\n%s", where, details.rstrip())
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(1)
