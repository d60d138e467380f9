"""The worker's side of the search protocol (docs/contracts.md): take a task, say so
(the ``start`` report: the trial's ``started_at``), run the trial with a runner, report
each epoch, each durable checkpoint and the result.

A runner is anything with ``run(info, link, timeout) -> TrialOutcome`` and ``close()``;
``link`` is the trial's :class:`~diel.worker.link.TrialLink` (reports, orders,
checkpoints), ``info`` the trial's number, study, copy, device, params, ``restore`` (the
task's: the checkpoint to resume from, or None) and ``checkpoints`` (the study's
checkpoint folder, a string, or None). Runners:
:class:`~diel.worker.isolated.IsolatedRunner` (a child process),
:class:`~diel.worker.inprocess.InProcessRunner` (this rank) or
:class:`~diel.worker.program.ProgramRunner` (a program per trial).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Protocol

from diel.search.protocol import DecisionPoints, report_tag, start_report, task_tag
from diel.worker.link import DURABLE_WAIT, RankWriter, TrialLink, WorkerSpace
from diel.worker.outcome import TrialOutcome, result_report

__all__ = ["serve_tasks", "Runner", "WorkerSpace"]


class Runner(Protocol):
    """Runs one trial to its outcome."""

    def run(self, info: dict[str, Any], link: TrialLink, timeout: float | None) -> TrialOutcome: ...
    def close(self) -> None: ...


def serve_tasks(space: WorkerSpace, study: str, copy: int, runner: Runner,
                timeout: float | None = None, params: Mapping[str, Any] | None = None,
                device: int | None = None, checkpoints: Path | None = None) -> int:
    """Serve ``study``'s tasks until the master's ``None``; return how many ran.

    Each trial's params are ``params`` (fixed values) updated with the task's; a task's
    ``restore`` is the checkpoint it resumes from. ``checkpoints``: the study's checkpoint
    folder (:func:`~diel.checkpoints.study_folder`; None: trials cannot checkpoint). A
    start report goes to the master as the task is taken, its epoch reports as they come,
    a checkpoint report once a checkpoint is durable; the master's order (prune, pause)
    is the report's answer (waited for at the task's ``decides`` points). Every outcome, failures included, becomes one result report,
    after the trial's durable checkpoints. When the next task is already queued, the
    result and the next start go as one value (a list of the two reports): the start
    report then costs the tuple space no message of its own.
    """
    writer = RankWriter(checkpoints) if checkpoints is not None else None
    served, finished = 0, None   # finished: the last result report, not put yet
    task = space.tget(task_tag(study))
    while task is not None:
        number = task["trial"]
        start = start_report(number, copy)
        space.tput(report_tag(study), start if finished is None else [finished, start])
        info = {"number": number, "study": study, "copy": copy, "device": device,
                "params": {**(params or {}), **task["params"]}, "restore": task.get("restore"),
                "checkpoint_every": task.get("checkpoint_every"),
                "checkpoints": None if checkpoints is None else str(checkpoints)}
        started = time.perf_counter()
        link = TrialLink(space, study, copy, number, started, writer,
                         resumed=task.get("restore") is not None,
                         decides=DecisionPoints.from_task(task.get("decides")),
                         source=(task.get("restore") or {}).get("trial"),
                         keep_copies=bool(task.get("checkpoint_every")), timeout=timeout)
        outcome = runner.run(info, link, timeout)
        link.finish(paused=outcome.status == "paused")
        finished = result_report(number, copy, outcome, started)
        served += 1
        task = space.try_tget(task_tag(study))
        if task is not None and not isinstance(task, dict):   # none queued: report, then wait
            space.tput(report_tag(study), finished)
            finished = None
            task = space.tget(task_tag(study))
    if finished is not None:
        space.tput(report_tag(study), finished)
    if writer is not None:   # late writes (past DURABLE_WAIT) are reported, and still count
        writer.close(DURABLE_WAIT)
    return served
