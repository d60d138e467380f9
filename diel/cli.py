"""The ``diel`` command: run and validate workflows, query results.

Each subcommand is a function ``(args) -> exit code``. Usage and configuration
errors print one clear message and exit with status 2, never a traceback; a workflow's
warnings (:class:`~diel.executive.config.ConfigWarning`) are printed once and change nothing else.
"""

from __future__ import annotations

import argparse
import signal
import sys
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from diel import __version__
from diel.executive.config import ConfigWarning, ModuleSpec, Workflow, load_workflow
from diel.errors import ConfigError
from diel.executive.layout import Layout
from diel.executive.logs import LEVELS, setup_logging
from diel.executive.modules import ENTRY_POINT_GROUP, check_workflow, prepare_module
from diel.plugins import BUILTINS

if TYPE_CHECKING:
    from diel.executive.interrupts import Deferral
    from diel.executive.meeting import Meeting
    from diel.executive.node import NodeShare
    from diel.executive.walltime import WallTime

__all__ = ["main", "build_parser"]

USAGE_ERROR = 2


def build_parser(results: bool = True) -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered (``results`` False: only
    ``run`` and ``validate``, for a rank of ``diel run``, which has no use for the
    results, plot and dashboard commands' imports)."""
    parser = argparse.ArgumentParser(
        prog="diel",
        description="Distributed hyperparameter search on MPI clusters. Run a workflow with "
                    "'mpiexec -n N diel run WORKFLOW.yaml'; 'diel validate' tells you N.")
    parser.add_argument("--version", action="version", version=f"diel {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    run = commands.add_parser("run", help="run a workflow (start it under mpiexec)",
                              description="Run a workflow. Start it under 'mpiexec -n N' with N "
                                          "the number of ranks 'diel validate' prints.")
    run.add_argument("workflow", help="the workflow YAML file")
    run.add_argument("--log-level", choices=LEVELS, default="info",
                     help="how much the executive and modules log (default: info; warnings "
                          "and errors are always shown)")
    run.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="debug",
                     help="also log what the services and workers do as they go and end "
                          "(server stopped, trials a worker ran, group finished): "
                          "--log-level debug")
    run.add_argument("--stop-after", type=_duration, metavar="DURATION",
                     help="stop the search this long after the start (90s, 30m, 2h, 1h30m, "
                          "1:30:00), as SIGUSR1 does: running trials pause with their "
                          "checkpoints and the job exits with status 75; run the same "
                          "command to resume")
    run.set_defaults(func=cmd_run)

    validate = commands.add_parser(
        "validate", help="check a workflow and print its rank layout (no MPI needed)",
        description="Check a workflow file without running it: print the rank layout "
                    "(module, copy, world ranks), the group order and the mpiexec line "
                    "that runs it. Exit status 2 when the workflow has a mistake.")
    validate.add_argument("workflow", help="the workflow YAML file")
    validate.set_defaults(func=cmd_validate)

    if results:
        _register_results(commands)
    return parser


def _register_results(commands: argparse._SubParsersAction) -> None:
    try:
        from diel.dashboard.cli import register as register_dashboard
        from diel.plot.cli import register as register_plot
        from diel.results.cli import register
    except ImportError:
        return
    register(commands)
    register_plot(commands)
    register_dashboard(commands)


class _AfterMPI(Exception):
    """This rank's module is checked once MPI has started (:func:`load_checked`)."""


def load_checked(path: str, rank: int | None = None, size: int | None = None,
                 before_mpi: bool = False) -> tuple[Workflow, list[ConfigWarning]]:
    """Load the workflow at ``path`` and resolve its modules (ConfigError on a mistake);
    also return the warnings its checks gave (:class:`ConfigWarning`), once each.

    ``rank`` and ``size``: this is world rank ``rank`` of a job of ``size`` ranks (``diel
    run``): the size must be the workflow's, and only the module this rank runs is
    resolved (:func:`~diel.executive.modules.check_workflow`); all of them when the size
    is not the workflow's, so that a mistake in a module is told before the size.
    ``before_mpi``: MPI has not started, and a check that may import code of the user's
    (or of another package) raises :class:`_AfterMPI` instead (:func:`_checked_before_mpi`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        workflow = load_workflow(path)
        sized = size == workflow.total_ranks
        running = Layout(workflow).of(rank).module if rank is not None and sized else None
        if before_mpi and (running is None or not _checked_before_mpi(workflow, running)):
            raise _AfterMPI
        try:
            check_workflow(workflow, running)
        except ConfigError as exc:
            raise exc.in_file(path) from None
        if size is not None and not sized:
            raise ConfigError("", f"the workflow needs {workflow.total_ranks} ranks "
                                  f"({_rank_summary(workflow)}) but {size} were started; "
                                  f"run: mpiexec -n {workflow.total_ranks} diel run {path}", path)
    found: dict[str, ConfigWarning] = {}
    for caught_warning in caught:
        warning = caught_warning.message
        if isinstance(warning, ConfigWarning):
            warning = warning.in_file(path)
            found.setdefault(str(warning), warning)
        else:   # a module's import warned: show it as Python would have
            warnings.showwarning(warning, caught_warning.category, caught_warning.filename,
                                 caught_warning.lineno)
    return workflow, list(found.values())


def _checked_before_mpi(workflow: Workflow, running: str) -> bool:
    """Whether the module ``running`` may be checked before MPI starts: a program, or one
    of diel's builtin modules, whose checks import nothing that starts MPI; the builtin
    ``search`` only where its workers' module is one too, as its check imports theirs; a
    worker only where its trial is not a ``package.module`` (its check imports the
    package, to find the module: :func:`diel.worker.loading.check_run_spec`). A
    module of the user's may import ``mpi4py.MPI`` (``from mpi4py import MPI`` at its
    top), which starts MPI there, and ``MPI_Init`` waits for every rank: the node's other
    ranks, meeting before MPI's start (:mod:`diel.executive.meeting`), would wait for it
    in vain."""
    module = workflow.module(running)
    workers = module.settings.get("workers") if module.function == "search" else None
    others = [other for other in workflow.modules if other.name == workers]
    return _ours(module) and not _trial_in_package(module) and all(map(_ours, others))


def _ours(module: ModuleSpec) -> bool:
    """Whether ``module`` is a program or one of diel's builtin modules."""
    return module.command is not None or module.function in BUILTINS[ENTRY_POINT_GROUP]


def _trial_in_package(module: ModuleSpec) -> bool:
    """Whether ``module``'s ``run`` (a worker's trial) names a ``package.module``."""
    run = module.settings.get("run") if module.command is None else None
    target = run.rpartition(":")[0] if isinstance(run, str) else ""
    return "." in target and not target.endswith(".py")


def _print_warnings(found: list[ConfigWarning] | list[str]) -> None:
    for warning in found:
        print(f"diel: warning: {warning}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    """Print the layout of a valid workflow, or its first mistake (exit 2); warnings go
    to stderr and leave the exit status 0."""
    import mpi4py
    mpi4py.rc.initialize = False  # builtins may import mpi4py.MPI; validation must not start MPI
    try:
        workflow, found = load_checked(args.workflow)
    except ConfigError as exc:
        print(f"diel: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    _print_warnings(found)
    print(describe(workflow, args.workflow))
    return 0


def describe(workflow: Workflow, path: str) -> str:
    """The human summary ``diel validate`` prints."""
    lines = [f"workflow '{workflow.name}' ({path}) is valid", "", Layout(workflow).describe(), ""]
    if workflow.services:
        lines.append(f"services: {', '.join(workflow.services)} (run for the whole workflow)")
    lines.append("groups, in order:")
    for group in workflow.groups:
        after = f", after {', '.join(group.after)}" if group.after else ""
        plural = "s" if group.iterations != 1 else ""
        lines.append(f"  {group.name}: {', '.join(group.modules)} "
                     f"({group.iterations} iteration{plural}{after})")
    lines += ["", f"run it with: mpiexec -n {workflow.total_ranks} diel run {path}"]
    return "\n".join(lines)


def _duration(text: str) -> float:
    """``--stop-after``'s value in seconds; argparse's usage error (status 2) otherwise."""
    from diel.executive.walltime import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_run(args: argparse.Namespace) -> int:
    """Run the workflow (:func:`_run`). SIGINT and SIGTERM end this rank quietly with
    130 / 143 (see diel.executive.interrupts); the search master first saves what it has.
    SIGUSR1 and ``--stop-after`` stop the search keeping its progress (status 75, see
    diel.executive.walltime).

    Python's cyclic garbage collector is off while the rank starts, and on again, with
    what the start made frozen (:func:`_collect_from_here`), as the workflow begins to
    run: a rank's start makes some hundreds of thousands of objects that live as long as
    it does (modules, classes, functions: NumPy's, SQLAlchemy's) and no garbage to speak
    of, which the collector would scan again and again as they pile up (some 45 ms of the
    search master's start, which every rank waits for: 0.04 s of a 500-trial search's
    0.84). A copy forked meanwhile collects from its start
    (:func:`diel.executive.process_groups.fork`)."""
    import gc

    from diel.executive.interrupts import Interrupted, hold_signals, raise_on_signals
    from diel.executive.walltime import WallTime

    gc.disable()
    try:
        try:
            start = _start_before_mpi(args)
        except KeyboardInterrupt:   # before MPI: nothing is left half-way
            return 128 + signal.SIGINT
        wall_time = WallTime(args.stop_after)
        wall_time.listen()      # every rank: mpiexec passes SIGUSR1 to them all
        held = hold_signals()   # until every rank is past the start's collectives
        try:
            code = _run(args, started=lambda: raise_on_signals(held), wall_time=wall_time,
                        start=start, held=held)
        except Interrupted as exc:
            return exc.exit_status
        return _leave(code) if code == 0 else code
    finally:
        gc.enable()   # where the rank ended before its workflow ran (a mistake, a signal)


@dataclass
class _Checked:
    """A rank's check of its module (:func:`load_checked`): the workflow and its warnings,
    or the mistake found (told by rank 0, for the job, once MPI has started)."""

    workflow: Workflow | None = None
    error: str | None = None
    found: list[ConfigWarning] = field(default_factory=list)


@dataclass
class _Start:
    """What a rank did before MPI started, where the launcher told it its place."""

    rank: int
    node: NodeShare
    meeting: Meeting | None
    checked: _Checked | None   # None: the module is checked once MPI has started


def _start_before_mpi(args: argparse.Namespace) -> _Start | None:
    """Where the launcher's environment tells this rank its place (world rank, job size,
    place on its node), all this rank can do before MPI starts: share the node's cores
    (before any module imports NumPy), join the node's meeting (its leader is bound from
    here on), check this rank's module (:func:`load_checked`; a mistake is held, and
    told once MPI has started) and fork an isolated worker's trial child (while a fork is
    safe, before the signal handlers: :mod:`diel.worker.early`). None elsewhere: MPI
    starts first, as it did before (the trial child is forked all the same where the
    world rank is known)."""
    from diel.executive.meeting import open_meeting
    from diel.executive.node import share_node_early
    from diel.worker import early

    place = early.world_place()
    node = share_node_early() if place is not None and place[1] is not None else None
    if place is None or node is None:   # no job size (place[1]) gives no node either
        early.fork_trial_child(args.workflow)
        return None
    rank, size = place
    meeting = open_meeting(node.local_rank, node.local_size)
    setup_logging(args.log_level, rank)
    try:
        checked: _Checked | None = _check(args.workflow, rank, size, before_mpi=True)
    except _AfterMPI:
        checked = None
    if checked is not None and checked.workflow is not None:
        early.fork_trial_child(args.workflow, checked.workflow)
    return _Start(rank, node, meeting, checked)


def _check(path: str, rank: int, size: int, before_mpi: bool = False) -> _Checked:
    """This rank's check of its module, a mistake held (:class:`_Checked`)."""
    try:
        workflow, found = load_checked(path, rank, size, before_mpi)
    except ConfigError as exc:
        return _Checked(error=str(exc))
    return _Checked(workflow, found=found)


def _prepare(checked: _Checked, rank: int, node: NodeShare) -> None:
    """Let this rank's module, checked, start what takes time (:func:`prepare_module`);
    end a trial child forked for this rank that it has no use for (a mistake, another
    module: :func:`diel.worker.early.discard`)."""
    from diel.worker import early

    if checked.workflow is not None:
        prepare_module(checked.workflow, Layout(checked.workflow).of(rank).module, node)
    early.discard()


def _leave(code: int) -> int:
    """End this rank of a job that succeeded without the interpreter's teardown: output
    flushed, every rank met (sleeping: MPICH's own wait in ``MPI_Finalize`` spins) and
    MPI finalized, then the C library's ``exit(code)``, which runs MPI's exit handlers
    (after ``os._exit`` mpiexec would kill the job as failed) but not Python's teardown
    of every module imported (SQLAlchemy's, the user's). mpiexec ends when its last rank
    exits, and that teardown was 0.5 s of the 2.6 s of a small search. Safe because by
    now each module has closed what it opened (the master its database, the workers
    their trial processes); a rank with another thread still running (not a daemon), or
    output that cannot be flushed, returns ``code`` and exits as usual, MPI finalized."""
    import logging
    import threading

    from mpi4py import MPI

    from diel.executive.waiting import sleeping_barrier

    try:
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        flushed = True
    except (OSError, ValueError):   # a closed pipe (main says so) or a closed stream
        flushed = False
    if not MPI.Is_finalized():   # every rank comes here: the barrier cannot wait for ever
        sleeping_barrier(MPI.COMM_WORLD)
        MPI.Finalize()
    if flushed and not any(thread is not threading.main_thread() and not thread.daemon
                           for thread in threading.enumerate()):
        _exit_process(code)
    return code


def _exit_process(code: int) -> None:
    """The C library's ``exit(code)`` (its handlers, no Python teardown); returns only
    where it cannot be called."""
    import ctypes

    try:
        ctypes.CDLL(None).exit(code)
    except (OSError, AttributeError):
        pass


def _run(args: argparse.Namespace, started: Callable[[], None],
         wall_time: WallTime | None = None, start: _Start | None = None,
         held: Deferral | None = None) -> int:
    """Validate (each rank its own module; before MPI's start where ``start`` says it
    was), report a mistake or the warnings once (rank 0), then run the workflow
    (``started`` is called once the job has started: see run_workflow). A signal
    ``held`` back ends the rank at the node's meeting (:class:`Interrupted`), without
    MPI: a rank interrupted while it checked its module has left without it, and
    ``MPI_Init`` would wait for that rank for ever. So does the end of another rank of
    the node before MPI started (status 1: :class:`~diel.executive.meeting.RankEnded`)."""
    from diel.executive.mpi_start import start_mpi

    checked = None
    if start is not None:
        checked = start.checked
        if checked is not None:   # e.g. a worker's trial process loads the user's code
            _prepare(checked, start.rank, start.node)
        if start.meeting is not None:   # the node's ranks start MPI together
            from diel.executive.meeting import RankEnded

            try:
                with held.raising() if held is not None else nullcontext():
                    start.meeting.meet()
            except RankEnded as ended:
                print(f"diel: error: rank {start.rank}: {ended}; the job ends without "
                      f"starting MPI", file=sys.stderr)
                return 1
    MPI = start_mpi()   # before the modules below import mpi4py.MPI, which would start it
    from diel.executive.node import share_node
    from diel.executive.run import run_workflow
    from diel.executive.waiting import sleeping_barrier

    world = MPI.COMM_WORLD
    if start is None:
        node = share_node(world)  # before any module imports NumPy
        setup_logging(args.log_level, world.rank)
    else:
        node = start.node
    if checked is None:   # e.g. a worker's trial process starts while the others check
        checked = _check(args.workflow, world.rank, world.size)
        _prepare(checked, world.rank, node)
    workflow, error, found = checked.workflow, checked.error, checked.found
    # each rank checked its own module, some faster than others: they meet sleeping
    # (MPICH's blocking collectives spin), then rank 0 speaks for the job, the first
    # mistake (in rank order, the workflow's order of modules) or every warning, once each
    sleeping_barrier(world)
    gathered = world.gather((error, [str(warning) for warning in found]), root=0)
    failed = False
    if world.rank == 0:
        errors = [message for message, _ in gathered if message]
        failed = bool(errors)
        if failed:
            print(f"diel: error: {errors[0]}", file=sys.stderr)
        else:
            _print_warnings(list(dict.fromkeys(line for _, lines in gathered for line in lines)))
    if world.bcast(failed, root=0):
        return USAGE_ERROR
    _collect_from_here()
    return run_workflow(workflow, node, started, wall_time)


def _collect_from_here() -> None:
    """Turn the garbage collector on (:func:`cmd_run` turned it off), leaving out of its
    scans for good what the rank's start made (``gc.freeze``): the modules and the objects
    the rank keeps, which a scan would only walk through."""
    import gc

    gc.freeze()
    gc.enable()


def _rank_summary(workflow: Workflow) -> str:
    parts = []
    for module in workflow.modules:
        shape = str(module.size) if module.copies == 1 else f"{module.copies}x{module.size}"
        parts.append(f"{module.name} {shape}")
    return ", ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``diel`` console script; returns the exit status."""
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(results=given[:1] != ["run"])
    try:
        args = parser.parse_args(given)
        code = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
    except BrokenPipeError:
        return _stdout_closed()
    return code


def _stdout_closed() -> int:
    """The reader of our output went away (``diel results db | head -1``): end quietly
    with the status of a program killed by SIGPIPE. As Python's docs on SIGPIPE advise,
    stdout is pointed at /dev/null, so the flush at exit does not fail again."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE
