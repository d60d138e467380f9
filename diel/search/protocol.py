"""Tuple-space tags and message shapes of the search (docs/contracts.md, "Search
protocol"), named in one place for the master and the workers; and which study a search
runs, so that its master and its workers compute the study (the tags' namespace) the
same way, from the search's settings alone.

Reports, all on :func:`report_tag`: ``start`` (a worker took a trial's task), ``epoch``
(one ``trial.report``), ``result`` (the trial's end), and ``fatal`` (a worker cannot
serve at all, e.g. its trial function does not load; the master ends the job, charging
no trial an attempt). A value there may also be a list of reports, handled in order: a
worker puts a result and its next start together when the next task was already queued,
so that the start report costs no message of its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from diel.executive.config import ModuleSpec, Workflow

__all__ = ["task_tag", "report_tag", "prune_tag", "is_report", "REPORT_KINDS", "start_report",
           "fatal_report", "study_of_search", "searches_served_by", "SEARCH_BUILTIN",
           "DEFAULT_WORKERS"]

REPORT_KINDS = ("start", "epoch", "result", "fatal")
SEARCH_BUILTIN = "search"    # the builtin module name of the search master
DEFAULT_WORKERS = "trainer"  # the worker module a search's ``workers`` names by default


def task_tag(study: str) -> str:
    """Where the master puts ``{"trial", "params"}`` tasks, and one ``None`` per worker."""
    return f"{study}/task"


def report_tag(study: str) -> str:
    """Where workers put ``{"kind": "start" | "epoch" | "result" | "fatal", ...}`` reports."""
    return f"{study}/report"


def prune_tag(study: str, trial: int) -> str:
    """Where the master puts ``True`` to stop ``trial`` early."""
    return f"{study}/prune/{trial}"


def is_report(value: Any) -> bool:
    """True for a report dict; False for anything else, e.g. ``try_tget``'s EMPTY."""
    return isinstance(value, dict) and value.get("kind") in REPORT_KINDS


def start_report(trial: int, worker: int) -> dict[str, Any]:
    """The report a worker puts as it takes ``trial``'s task: ``at`` is its wall clock
    (seconds since the epoch), which the master records as the trial's ``started_at``."""
    return {"kind": "start", "trial": trial, "worker": worker, "at": time.time()}


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
