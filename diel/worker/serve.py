"""The worker's side of the search protocol (docs/contracts.md): take a task, run the
trial with a runner, report each epoch and the result.

A runner is anything with ``run(info, reporter, timeout) -> Outcome`` and ``close()``:
:class:`~diel.worker.isolated.IsolatedRunner` (a child process),
:class:`~diel.worker.inprocess.InProcessRunner` (this rank) or
:class:`~diel.worker.program.ProgramRunner` (a program per trial).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Protocol

from diel.search.protocol import prune_tag, report_tag, task_tag
from diel.worker.outcome import Outcome, result_report
from diel.worker.trial import Reporter

__all__ = ["serve_tasks", "Runner", "WorkerSpace"]


class WorkerSpace(Protocol):
    """The part of the tuple-space client a worker uses."""

    def tput(self, tag: str, value: Any) -> None: ...
    def tget(self, tag: str, timeout: float | None = None) -> Any: ...
    def try_tget(self, tag: str) -> Any: ...


class Runner(Protocol):
    """Runs one trial to its outcome."""

    def run(self, info: dict[str, Any], reporter: Reporter, timeout: float | None) -> Outcome: ...
    def close(self) -> None: ...


def serve_tasks(space: WorkerSpace, study: str, copy: int, runner: Runner,
                timeout: float | None = None, params: Mapping[str, Any] | None = None,
                device: int | None = None) -> int:
    """Serve ``study``'s tasks until the master's ``None``; return how many ran.

    Each trial's params are ``params`` (fixed values) updated with the task's. Its epoch
    reports go to the master as they come; the master's prune order is the reporter's
    answer. Every outcome, failures included, becomes one result report.
    """
    served = 0
    while (task := space.tget(task_tag(study))) is not None:
        number = task["trial"]
        info = {"number": number, "study": study, "copy": copy, "device": device,
                "params": {**(params or {}), **task["params"]}}
        started = time.perf_counter()
        outcome = runner.run(info, _reporter(space, study, copy, number, started), timeout)
        space.tput(report_tag(study), result_report(number, copy, outcome, started))
        served += 1
    return served


def _reporter(space: WorkerSpace, study: str, copy: int, number: int, started: float) -> Reporter:
    """Puts each epoch report for the master; True once the master ordered a prune."""
    def report(step: int, metrics: dict[str, Any]) -> bool:
        space.tput(report_tag(study), {
            "kind": "epoch", "trial": number, "epoch": step, "worker": copy,
            "metrics": {"time": time.perf_counter() - started, **metrics}})
        return space.try_tget(prune_tag(study, number)) is True
    return report
