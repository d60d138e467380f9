"""The ``worker`` module (builtin name ``worker``): serves the search with the user's code.

Each copy is one worker of the search. A function trial (``run:``) runs in a reused child
process when the copy has one rank (``isolate: true``, the default there), or in the
copy's ranks themselves; a program trial (``command:``) runs once per trial. See
docs/workers.md for the ``trial`` object, timeouts, attempts and GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from diel.config import ModuleSpec, Workflow
from diel.interrupts import Interrupted
from diel.worker.environment import trial_environment
from diel.worker.gpu import bind_gpu, visible_gpus
from diel.worker.inprocess import InProcessRunner
from diel.worker.isolated import IsolatedRunner
from diel.worker.loading import load_function
from diel.worker.program import ProgramRunner
from diel.worker.serve import Runner, serve_tasks
from diel.worker.settings import WorkerSettings, parse_settings

__all__ = ["main", "validate_settings", "run_worker"]


def validate_settings(settings: dict, path: str, module: ModuleSpec | None = None,
                      workflow: Workflow | None = None) -> None:
    """``diel validate``'s check of the worker's settings (ConfigError names the key)."""
    base = workflow.directory if workflow is not None else Path.cwd()
    parse_settings(settings, path, base, module.size if module is not None else 1)


def main(ctx: Any) -> None:
    """Serve the search's tasks on this copy until the master says stop."""
    settings = parse_settings(ctx.config, f"modules.{ctx.name}.settings", Path(ctx.workflow_dir),
                              ctx.size)
    run_worker(ctx, settings)


def run_worker(ctx: Any, settings: WorkerSettings,
               function: Callable[[Any], Any] | None = None) -> None:
    """Serve with ``settings`` (``function`` stands in for ``settings.run`` when given)."""
    runner, device = _make_runner(ctx, settings, function)
    interrupted = False
    try:
        if ctx.rank != 0:   # only trials in the ranks span several (settings ensure it)
            if isinstance(runner, InProcessRunner):
                runner.follow()
            return
        served = serve_tasks(ctx.space, settings.study or ctx.workflow_name, ctx.copy, runner,
                             settings.timeout, settings.params, device)
        if isinstance(runner, InProcessRunner):
            runner.stop_followers()
        ctx.log.info("worker copy %d ran %d trial(s)", ctx.copy, served)
    except Interrupted:   # the job is stopping: no grace period for the trial's child,
        interrupted = True  # which dies with this rank (PR_SET_PDEATHSIG)
        raise
    finally:
        if not interrupted:
            runner.close()


def _make_runner(ctx: Any, settings: WorkerSettings,
                 function: Callable[[Any], Any] | None) -> tuple[Runner, int | None]:
    """The runner for these settings, and ``trial.device``: a trial process (child or
    program) sees only its GPU, as number 0; a trial in the rank sees the rank's GPUs."""
    gpu = bind_gpu(ctx.local_rank, visible_gpus())
    base = Path(ctx.workflow_dir)
    if settings.command is not None:
        return (ProgramRunner(settings.command, base, trial_environment(gpu), settings.grace),
                0 if gpu else None)
    if settings.isolated(ctx.size):
        runner = IsolatedRunner(settings.run or _spec_of(function), base, trial_environment(gpu),
                                settings.grace)
        runner.start()   # imports the user's code while the master opens the study
        return runner, 0 if gpu else None
    runner = InProcessRunner(function or load_function(settings.run or "", base),
                             ctx.comm if ctx.size > 1 else None, settings.grace)
    return runner, gpu.index if gpu else None


def _spec_of(function: Callable[[Any], Any] | None) -> str:
    """``module:name`` of an importable function, for a child process to load."""
    if function is None:
        raise ValueError("a worker needs run: or command: in its settings")
    return f"{function.__module__}:{function.__qualname__}"
