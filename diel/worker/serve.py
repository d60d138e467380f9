"""The worker's side of the search protocol (docs/contracts.md): take a task, say so
(the ``start`` report: the trial's ``started_at``), run the trial with a runner, report
each epoch and the result.

A runner is anything with ``run(info, reporter, timeout) -> TrialOutcome`` and ``close()``:
:class:`~diel.worker.isolated.IsolatedRunner` (a child process),
:class:`~diel.worker.inprocess.InProcessRunner` (this rank) or
:class:`~diel.worker.program.ProgramRunner` (a program per trial).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Protocol

from diel.search.protocol import prune_tag, report_tag, start_report, task_tag
from diel.worker.outcome import TrialOutcome, result_report
from diel.worker.trial import Reporter

__all__ = ["serve_tasks", "Runner", "WorkerSpace"]


class WorkerSpace(Protocol):
    """The part of the tuple-space client a worker uses."""

    def tput(self, tag: str, value: Any) -> None: ...
    def tget(self, tag: str, timeout: float | None = None) -> Any: ...
    def try_tget(self, tag: str) -> Any: ...


class Runner(Protocol):
    """Runs one trial to its outcome."""

    def run(self, info: dict[str, Any], reporter: Reporter, timeout: float | None) -> TrialOutcome: ...
    def close(self) -> None: ...


def serve_tasks(space: WorkerSpace, study: str, copy: int, runner: Runner,
                timeout: float | None = None, params: Mapping[str, Any] | None = None,
                device: int | None = None) -> int:
    """Serve ``study``'s tasks until the master's ``None``; return how many ran.

    Each trial's params are ``params`` (fixed values) updated with the task's. A start
    report goes to the master as the task is taken, its epoch reports as they come; the
    master's prune order is the reporter's answer. Every outcome, failures included,
    becomes one result report. When the next task is already queued, the result and the
    next start go as one value (a list of the two reports): the start report then costs
    the tuple space no message of its own.
    """
    served, finished = 0, None   # finished: the last result report, not put yet
    task = space.tget(task_tag(study))
    while task is not None:
        number = task["trial"]
        start = start_report(number, copy)
        space.tput(report_tag(study), start if finished is None else [finished, start])
        info = {"number": number, "study": study, "copy": copy, "device": device,
                "params": {**(params or {}), **task["params"]}}
        started = time.perf_counter()
        outcome = runner.run(info, _reporter(space, study, copy, number, started), timeout)
        finished = result_report(number, copy, outcome, started)
        served += 1
        task = space.try_tget(task_tag(study))
        if task is not None and not isinstance(task, dict):   # none queued: report, then wait
            space.tput(report_tag(study), finished)
            finished = None
            task = space.tget(task_tag(study))
    if finished is not None:
        space.tput(report_tag(study), finished)
    return served


def _reporter(space: WorkerSpace, study: str, copy: int, number: int, started: float) -> Reporter:
    """Puts each epoch report for the master; True once the master ordered a prune."""
    def report(step: int, metrics: dict[str, Any]) -> bool:
        space.tput(report_tag(study), {
            "kind": "epoch", "trial": number, "epoch": step, "worker": copy,
            "metrics": {"time": time.perf_counter() - started, **metrics}})
        return space.try_tget(prune_tag(study, number)) is True
    return report
