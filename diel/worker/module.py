"""The ``worker`` module (builtin name ``worker``): serves the search with the user's code.

Each copy is one worker of the search. A function trial (``run:``) runs in a reused child
process when the copy has one rank (``isolate: true``, the default there), or in the
copy's ranks themselves; a program trial (``command:``) runs once per trial. See
docs/workers.md for the ``trial`` object, timeouts, attempts and GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from diel.executive.config import ModuleSpec, Workflow
from diel.errors import ConfigError, ModuleFailed
from diel.executive.interrupts import Interrupted
from diel.limits import LOG_TEXT_CHARS, clip
from diel.checkpoints import study_folder
from diel.search.protocol import (CHECKPOINTS_FOLDER, checkpoint_dir_served, fatal_report,
                                  report_tag, searches_served_by, study_of_search)
from diel.worker import early
from diel.worker.environment import trial_environment
from diel.worker.gpu import bind_gpu, visible_gpus
from diel.worker.inprocess import InProcessRunner
from diel.worker.isolated import IsolatedRunner, kept_if_same
from diel.worker.loading import load_function
from diel.worker.outcome import error_text
from diel.worker.program import ProgramRunner
from diel.worker.serve import Runner, serve_tasks
from diel.worker.settings import WorkerSettings, parse_settings

if TYPE_CHECKING:
    from diel.executive.node import NodeShare

__all__ = ["main", "validate_settings", "prepare", "run_worker", "served_study"]

#: The trial process :func:`prepare` started for this rank, until :func:`main` takes it.
_launched: IsolatedRunner | None = None


class _Unloadable(Exception):
    """The trial function cannot be loaded; ``str()`` is one line saying why."""


def validate_settings(settings: dict, path: str, module: ModuleSpec | None = None,
                      workflow: Workflow | None = None) -> None:
    """``diel validate``'s check of the worker's settings (ConfigError names the key)."""
    base = workflow.directory if workflow is not None else Path.cwd()
    parse_settings(settings, path, base, module.size if module is not None else 1)


def prepare(settings: dict, module: ModuleSpec, workflow: Workflow, node: NodeShare) -> None:
    """Start this rank's isolated trial process now (the executive calls this as soon as
    the rank knows it runs this module, before the job's own set-up): the child's start
    and the import of the user's code overlap MPI's set-up and the master's opening of
    the study, so that every copy is ready when the first tasks come (16 copies starting
    their children together, on few cores, took the first trials at different times).
    The child forked before MPI's start (:mod:`diel.worker.early`) is taken instead,
    when there is one. Nothing for programs and trials in the ranks; the load is checked
    by :func:`main`."""
    global _launched
    parsed = parse_settings(settings, f"modules.{module.name}.settings", workflow.directory,
                            module.size)
    if parsed.command is not None or not parsed.isolated(module.size) or not parsed.run:
        return
    environment = trial_environment(bind_gpu(node.local_rank, visible_gpus()))
    _launched = early.take(parsed.run, workflow.directory)
    if _launched is not None:   # forked before MPI's start: it loads with this environment
        try:
            _launched.load(environment)
            return
        except OSError:   # it died meanwhile (killed): a started child replaces it
            _launched.close()
    _launched = IsolatedRunner(parsed.run, workflow.directory, environment, parsed.grace)
    _launched.launch()


def main(ctx: Any) -> None:
    """Serve the search's tasks on this copy until the master says stop."""
    settings = parse_settings(ctx.config, f"modules.{ctx.name}.settings", Path(ctx.workflow_dir),
                              ctx.size)
    run_worker(ctx, settings)


def run_worker(ctx: Any, settings: WorkerSettings,
               function: Callable[[Any], Any] | None = None) -> None:
    """Serve with ``settings`` (``function`` stands in for ``settings.run`` when given).

    The trial function is loaded before any task is taken. When it cannot be (the file
    raises on import, the name is missing), this rank puts a ``fatal`` report instead
    and serves nothing: the master ends the job with one line, and no trial is charged
    an attempt for it (docs/contracts.md, "Search protocol")."""
    study = served_study(ctx, settings)
    try:
        runner, device = _make_runner(ctx, settings, function)
    except _Unloadable as e:
        ctx.space.tput(report_tag(study), fatal_report(ctx.copy, ctx.rank, "run",
                                                       clip(str(e), LOG_TEXT_CHARS)))
        return
    interrupted = False
    try:
        if ctx.rank != 0:   # only trials in the ranks span several (settings ensure it)
            if isinstance(runner, InProcessRunner):
                runner.follow()
            return
        served = serve_tasks(ctx.space, study, ctx.copy, runner, settings.timeout,
                             settings.params, device, study_folder(_checkpoint_root(ctx), study))
        if isinstance(runner, InProcessRunner):
            runner.stop_followers()
        ctx.log.debug("worker copy %d ran %d trial(s)", ctx.copy, served)
    except Interrupted:   # the job is stopping: no grace period for the trial's child,
        interrupted = True  # which dies with this rank (PR_SET_PDEATHSIG)
        raise
    finally:
        if not interrupted:
            runner.close()


def served_study(ctx: Any, settings: WorkerSettings) -> str:
    """The study this worker module serves: that of the search module whose ``workers``
    names it (its ``study``, else the workflow's name), so that a study set on the
    search alone reaches its workers. The worker's own ``study`` setting is accepted
    when it agrees, and is the study of a worker no builtin search names (a master of
    the user's own); else the workflow's name. :class:`ConfigError` for a ``study`` that
    disagrees with the search's, and for a module that two searches of different
    studies name as their workers."""
    workflow = getattr(ctx, "workflow", None)
    searches = searches_served_by(workflow, ctx.name) if workflow is not None else []
    studies = {spec.name: study_of_search(spec.settings, ctx.workflow_name) for spec in searches}
    if len(set(studies.values())) > 1:
        named = ", ".join(f"modules.{name} (study {study!r})" for name, study in studies.items())
        raise ConfigError(f"modules.{ctx.name}", f"is the workers of {named}; a worker module "
                          "serves one study: give each search a worker module of its own")
    if not studies:
        return settings.study or ctx.workflow_name
    search, study = next(iter(studies.items()))
    if settings.study is not None and settings.study != study:
        raise ConfigError(f"modules.{ctx.name}.settings.study",
                          f"{settings.study!r}, but the search modules.{search} that this module "
                          f"serves runs study {study!r}; remove this setting: workers serve "
                          "their search's study")
    return study


def _checkpoint_root(ctx: Any) -> Path:
    """The checkpoint folder of the search this worker module serves
    (:func:`~diel.search.protocol.checkpoint_dir_served`); without a workflow (a master
    of the user's own), ``checkpoints`` in the workflow's folder."""
    workflow = getattr(ctx, "workflow", None)
    if workflow is None:
        return (Path(ctx.workflow_dir) / CHECKPOINTS_FOLDER).absolute()
    return checkpoint_dir_served(workflow, ctx.name)


def _make_runner(ctx: Any, settings: WorkerSettings,
                 function: Callable[[Any], Any] | None) -> tuple[Runner, int | None]:
    """The runner for these settings, and ``trial.device``: a trial process (child or
    program) sees only its GPU, as number 0; a trial in the rank sees the rank's GPUs.
    The trial function is loaded here, in the child or in this rank: :class:`_Unloadable`
    when it cannot be."""
    gpu = bind_gpu(ctx.local_rank, visible_gpus())
    base = Path(ctx.workflow_dir)
    if settings.command is not None:
        return (ProgramRunner(settings.command, base, trial_environment(gpu), settings.grace),
                0 if gpu else None)
    if settings.isolated(ctx.size):
        runner = _take_launched(settings.run if function is None else None, base)
        if runner is None:
            runner = IsolatedRunner(settings.run or _spec_of(function), base,
                                    trial_environment(gpu), settings.grace)
        try:
            runner.start()   # imports the user's code while the master opens the study
        except ModuleFailed as e:   # its first line says why; the child's traceback follows
            raise _Unloadable(str(e).splitlines()[0]) from None
        return runner, 0 if gpu else None
    if function is None:
        try:
            function = load_function(settings.run or "", base)
        except Exception as e:  # noqa: BLE001 - whatever the user's file raises on import
            raise _Unloadable(f"cannot load the trial function {settings.run}: "
                              f"{error_text(e)}") from None
    runner = InProcessRunner(function, ctx.comm if ctx.size > 1 else None, settings.grace)
    return runner, gpu.index if gpu else None


def _take_launched(spec: str | None, base: Path) -> IsolatedRunner | None:
    """The runner :func:`prepare` launched, if it runs ``spec`` from ``base``."""
    global _launched
    runner, _launched = _launched, None
    return kept_if_same(runner, spec, base)


def _spec_of(function: Callable[[Any], Any] | None) -> str:
    """``module:name`` of an importable function, for a child process to load."""
    if function is None:
        raise ValueError("a worker needs run: or command: in its settings")
    return f"{function.__module__}:{function.__qualname__}"
