"""Tuple-space tags and message shapes of the search (docs/contracts.md, "Search
protocol"), named in one place for the master and the workers; and which study a search
runs, so that its master and its workers compute the study (the tags' namespace) the
same way, from the search's settings alone.

Reports, all on :func:`report_tag`: ``start`` (a worker took a trial's task), ``epoch``
(one ``trial.report``), ``checkpoint`` (a checkpoint of the trial is durable: the
master records it), ``suggest`` (a ``trial.suggest_*`` call for a parameter the
``space:`` does not declare: the master's sampler answers on :func:`suggestion_tag`),
``result`` (the trial's end), and ``fatal`` (a worker cannot serve at
all, e.g. its trial function does not load; the master ends the job, charging no trial
an attempt). A value there may also be a list of reports, handled in order: a worker
puts a result and its next start together when the next task was already queued, so
that the start report costs no message of its own.

Orders, on :func:`prune_tag`: :data:`STOP` (prune the trial), :data:`PAUSE`
(checkpoint and stop: the trial ends ``paused`` and resumes later from its checkpoint) or
an :func:`exploit_order` (population-based training: the trial ends its run as on a
pause and is dispatched again at once, with new parameters, from another trial's
checkpoint).
A trial's task names its :class:`DecisionPoints` (``decides``), the epochs at which its
scheduler may order it to stop: a report at one of them waits for the master's answer
(the order, or :func:`go_on`) before ``trial.report`` returns, so that a pruned trial
trains no epoch past its rung; any other report takes an order already there, if any.

Define-by-run: the master puts the declared space once, on :func:`declared_tag` (read,
never taken, by workers whose trials call ``suggest_*``); a suggest request rides the
report tag, so it is in order with the trial's other reports and the master, already
waiting there, answers it in one round trip without polling a second tag.

Where checkpoints go: the search's ``checkpoints.dir``, else beside its results database
(:func:`checkpoint_dir`); its workers learn it from the search, as they learn the study
(:func:`checkpoint_dir_served`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from diel.executive.config import ModuleSpec, Workflow

__all__ = ["DecisionPoints", "go_on", "is_go_on", "hold", "is_hold", "exploit_order", "task_tag", "report_tag", "prune_tag", "checkpoint_tag", "is_report", "REPORT_KINDS",
           "start_report", "checkpoint_report", "fatal_report", "STOP", "PAUSE", "study_of_search",
           "searches_served_by", "database_url", "checkpoint_dir", "checkpoint_dir_of_search",
           "checkpoint_dir_served", "SEARCH_BUILTIN", "DEFAULT_WORKERS", "CHECKPOINTS_FOLDER"]

REPORT_KINDS = ("start", "epoch", "checkpoint", "suggest", "result", "fatal")
SEARCH_BUILTIN = "search"    # the builtin module name of the search master
DEFAULT_WORKERS = "trainer"  # the worker module a search's ``workers`` names by default
STOP = True                  # the order to stop a trial early (prune it)
PAUSE = "pause"              # the order to checkpoint and stop (the trial ends paused)
CHECKPOINTS_FOLDER = "checkpoints"   # beside the workflow, when the database is no file


@dataclass(frozen=True)
class DecisionPoints:
    """The epochs at which a trial's scheduler may answer a report with an order: from
    ``first`` on, every epoch (``factor`` and ``every`` None), ``first * factor**i`` (a
    halving rung) or ``first + every * i`` (population-based training's intervals), and
    only below ``below`` when it is given. The worker waits for the master's answer at
    these epochs only; elsewhere a report costs it no wait."""

    first: int = 1
    factor: int | None = None
    below: int | None = None
    every: int | None = None

    def includes(self, epoch: int) -> bool:
        """True when ``epoch`` is one of these points."""
        if epoch < self.first or (self.below is not None and epoch >= self.below):
            return False
        if self.every is not None:
            return (epoch - self.first) % self.every == 0
        if self.factor is None:
            return True
        point = self.first
        while point < epoch:
            point *= self.factor
        return point == epoch

    def as_task(self) -> list[int | None]:
        """As a task carries them: ``[first, factor, below, every]``."""
        return [self.first, self.factor, self.below, self.every]

    @classmethod
    def from_task(cls, value: Any) -> "DecisionPoints | None":
        """The points a task's ``decides`` names; None for none (no scheduler: the
        worker never waits) or a value of another shape."""
        if not isinstance(value, list) or len(value) != 4 or \
                not all(v is None or (isinstance(v, int) and v >= 1) for v in value) or \
                value[0] is None or (value[1] is not None and value[3] is not None):
            return None
        return cls(*value)


def exploit_order(donor: int, step: int | None, params: Mapping[str, Any]) -> dict[str, Any]:
    """The order to exploit: the trial ends this run as on :data:`PAUSE` (a worker
    treats it as one); the master dispatches it again at once with ``params`` from
    trial ``donor``'s checkpoint of ``step`` (the step whose score ranked it, waited for
    while it is being written; None: no step known and none recorded yet, and the trial
    may go on from its own with resampled parameters)."""
    return {"exploit": donor, "step": step, "params": dict(params)}


def go_on(epoch: int) -> dict[str, int]:
    """The master's answer to a report at a decision point that orders nothing: the
    trial trains on. It names the epoch it answers, so that a worker that stopped
    waiting for it (:data:`~diel.worker.link.ANSWER_WAIT`) never takes it for a later
    report's answer."""
    return {"go": epoch}


def is_go_on(value: Any) -> bool:
    """True for an answer made by :func:`go_on`."""
    return isinstance(value, dict) and isinstance(value.get("go"), int)


def hold(epoch: int) -> dict[str, int]:
    """The master's word that its answer to the report of ``epoch`` is held until other
    trials have reported (synchronous pbt's generation, which lasts as long as its
    slowest member's epochs): the worker then waits for the answer without a time limit
    (a pause order at the job's stop releases it). Read as no order anywhere else."""
    return {"hold": epoch}


def is_hold(value: Any) -> bool:
    """True for a word made by :func:`hold`."""
    return isinstance(value, dict) and isinstance(value.get("hold"), int)


def task_tag(study: str) -> str:
    """Where the master puts ``{"trial", "params", "restore", "decides"}`` tasks
    (``restore``: None, or the checkpoint to resume from: ``step``, ``path``,
    ``nbytes``, ``checksum`` and ``older``, the earlier kept ones, newest first;
    ``decides``: :meth:`DecisionPoints.as_task`, or None without a scheduler), and one
    ``None`` per worker."""
    return f"{study}/task"


def report_tag(study: str) -> str:
    """Where workers put ``{"kind": "start" | "epoch" | "checkpoint" | "result" | "fatal",
    ...}`` reports (a result's ``status``: ok, failed, pruned, or paused)."""
    return f"{study}/report"


def prune_tag(study: str, trial: int) -> str:
    """Where the master puts its order to ``trial``: :data:`STOP` (``True``: prune it) or
    :data:`PAUSE` (checkpoint and stop), at most one order a trial; and its answer
    :func:`go_on` to each report at one of the trial's decision points that orders
    nothing."""
    return f"{study}/prune/{trial}"


def checkpoint_tag(study: str, trial: int) -> str:
    """Where a worker keeps the latest durable checkpoint of ``trial``, ended paused, in
    the tuple space's distributed store (the checkpoint file's bytes, ``dist_tput``; a
    newer one replaces it), so that its resume in the same job is served from memory.
    In a study whose scheduler asks for checkpoints (a task's ``checkpoint_every``:
    pbt), every durable checkpoint is kept there, so that a member exploiting ``trial``
    reads it (``dist_tread``: the copy stays) into its own rank."""
    return f"{study}/ckpt/{trial}"


def suggestion_tag(study: str, trial: int) -> str:
    """Where the master answers ``trial``'s ``suggest`` report: ``{"value": v}`` (the
    parameter's value) or ``{"error": text}`` (the call cannot be served: the trial
    fails with ``text``); one answer per request, taken by the trial's worker."""
    return f"{study}/suggested/{trial}"


def declared_tag(study: str) -> str:
    """Where the master puts, once per run and before any task, the declared space
    (:meth:`diel.search.space.SearchSpace.declarations`: ``{name: {"forms", "text",
    "when"}}``; empty when the search declares none). Workers read it (never take it)
    to check ``suggest_*`` calls for declared parameters without asking the master."""
    return f"{study}/declared"


def suggest_report(trial: int, worker: int, name: str,
                   distribution: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's ``suggest_*`` call for ``name``, a parameter the space does not declare:
    ``distribution`` in diel's JSON form (:mod:`diel.search.distributions`)."""
    return {"kind": "suggest", "trial": trial, "worker": worker, "name": name,
            "distribution": dict(distribution)}


def is_report(value: Any) -> bool:
    """True for a report dict; False for anything else, e.g. ``try_tget``'s EMPTY."""
    return isinstance(value, dict) and value.get("kind") in REPORT_KINDS


def start_report(trial: int, worker: int) -> dict[str, Any]:
    """The report a worker puts as it takes ``trial``'s task: ``at`` is its wall clock
    (seconds since the epoch), which the master records as the trial's ``started_at``."""
    return {"kind": "start", "trial": trial, "worker": worker, "at": time.time()}


def checkpoint_report(trial: int, worker: int, step: int, path: str, nbytes: int,
                      checksum: str) -> dict[str, Any]:
    """The report a worker puts once a checkpoint of ``trial`` as of ``step`` is durable
    at ``path`` (never before: the master records it, and a resume may use it, at once);
    ``checksum`` names its algorithm (``"crc32:<8 hex>"``)."""
    return {"kind": "checkpoint", "trial": trial, "worker": worker, "step": step,
            "path": path, "nbytes": nbytes, "checksum": checksum}


def fatal_report(worker: int, rank: int, setting: str, error: str) -> dict[str, Any]:
    """The report of a worker that cannot serve: ``setting`` is the worker module's
    setting at fault (``run``), ``error`` one line saying why."""
    return {"kind": "fatal", "worker": worker, "rank": rank, "setting": setting, "error": error}


def study_of_search(settings: Mapping[str, Any], workflow_name: str) -> str:
    """The study a search with ``settings`` (its module's raw settings) runs: its
    ``study``, else the workflow's name."""
    study = settings.get("study")
    return study if isinstance(study, str) and study.strip() else workflow_name


def searches_served_by(workflow: Workflow, worker: str) -> list[ModuleSpec]:
    """The builtin search modules of ``workflow`` whose ``workers`` is module ``worker``."""
    return [spec for spec in workflow.modules
            if spec.function == SEARCH_BUILTIN and spec.name != worker and
            isinstance(spec.settings, Mapping) and
            spec.settings.get("workers", DEFAULT_WORKERS) == worker]


def database_url(database: str | None, folder: str | Path, workflow_name: str) -> str:
    """The URL the master opens with :func:`diel.results.get_storage`: ``database`` (a URL,
    whose scheme picks the storage, or a path relative to the workflow's ``folder``), else
    ``sqlite:///<folder>/<workflow name>.db``."""
    from diel.results import default_url, resolve_url

    if database:
        return resolve_url(database, folder)
    return default_url(Path(folder) / f"{workflow_name}.yaml")


def checkpoint_dir(setting: str | None, url: str, folder: str | Path) -> Path:
    """The folder of a search's durable checkpoints (absolute): its ``checkpoints.dir``
    ``setting`` (``~`` expanded; relative to the workflow's ``folder``); else, with a
    SQLite file as its results database (``url``), ``<that file>.checkpoints`` beside
    it; else (PostgreSQL, ``memory://``) ``<folder>/checkpoints``. Checkpoints go in
    ``<this folder>/<study>/``."""
    from diel.results import is_sqlite_file

    if setting:
        return (Path(folder) / Path(setting).expanduser()).absolute()
    sqlite_file = is_sqlite_file(url)
    if sqlite_file is not None:   # a relative one is where SQLite opens it: in the cwd
        sqlite_file = sqlite_file.absolute()
        return sqlite_file.with_name(sqlite_file.name + ".checkpoints")
    return (Path(folder) / CHECKPOINTS_FOLDER).absolute()


def checkpoint_dir_of_search(settings: Mapping[str, Any], folder: str | Path,
                             workflow_name: str) -> Path:
    """The checkpoint folder of a search with ``settings`` (its module's raw, validated
    settings) in a workflow in ``folder`` named ``workflow_name`` (:func:`checkpoint_dir`)."""
    checkpoints = settings.get("checkpoints")
    setting = checkpoints.get("dir") if isinstance(checkpoints, Mapping) else None
    database = settings.get("database")
    return checkpoint_dir(setting if isinstance(setting, str) else None,
                          database_url(database if isinstance(database, str) else None,
                                       folder, workflow_name), folder)


def checkpoint_dir_served(workflow: Workflow, worker: str) -> Path:
    """The checkpoint folder of the builtin search that worker module ``worker`` serves
    (:func:`checkpoint_dir_of_search`); with no builtin search naming it (a master of
    the user's own), ``<workflow folder>/checkpoints``."""
    searches = searches_served_by(workflow, worker)
    if not searches:
        return (workflow.directory / CHECKPOINTS_FOLDER).absolute()
    return checkpoint_dir_of_search(searches[0].settings, workflow.directory, workflow.name)
