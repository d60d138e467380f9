"""The results database of diel searches (SQLAlchemy 2; SQLite by default).

Read with :func:`open` (``.studies()``, ``.trials(...)``, ``.pareto(...)``); the search
master writes through the :class:`Storage` interface, which :class:`ResultsStore`
implements with SQLAlchemy; :func:`pareto_front` is the one definition of a Pareto
front. See docs/search.md. Names load on first use, so that the
``diel`` command starts without importing SQLAlchemy.
"""

from importlib import import_module
from typing import Any

_HOMES = {
    "open": "_query", "Results": "_query", "parse_filter": "_query",
    "default_url": "_database", "resolve_url": "_database",
    "format_trials": "_format", "format_studies": "_format",
    "ResultsStore": "_store",
    "Storage": "_storage", "Lease": "_storage", "StudyState": "_storage",
    "StoredTrial": "_storage", "TrialStart": "_storage", "StartedRecord": "_storage",
    "EpochRecord": "_storage", "ResultRecord": "_storage", "HEARTBEAT_S": "_storage",
    "STALE_AFTER_S": "_storage",
    "ObjectiveSpec": "_storage", "pareto_front": "_pareto", "ParetoFront": "_pareto",
    "STATUSES": "_status", "FINISHED": "_status",
}

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'diel.results' has no attribute {name!r}")
    return getattr(import_module(f"diel.results.{_HOMES[name]}"), name)
