"""The results database of diel searches (SQLAlchemy 2; SQLite by default), and the only
door to it: no other package touches its tables (tests/test_layering.py checks it).

Read with :func:`open` (``.studies()``, ``.trials(...)``, ``.pareto(...)``, and what
following a study needs: ``.config``, ``.epochs``, ``.workers``, ``.runs``,
``.versions``, ``.lineage``). The search master writes through the :class:`Storage` interface and
opens its store with :func:`get_storage`, which picks the implementation by the URL's
scheme from the entry-point group ``diel.storages``: :class:`ResultsStore` (SQLAlchemy)
for databases, :class:`MemoryStorage` for ``memory://``; :func:`check_database` checks a
URL before a search starts. :func:`pareto_front` is the one definition of a Pareto
front; :func:`best_first` and :func:`pareto_trials` rank trial dicts as the reader does.
See docs/search.md and docs/extending.md. Names load on first use, so that the ``diel``
command starts without importing SQLAlchemy.
"""

from diel.lazy import names_from

_HOMES = {
    "open": "_query", "Results": "_query", "parse_filter": "_query",
    "default_url": "_urls", "resolve_url": "_urls", "is_sqlite_file": "_urls",
    "format_trials": "_format", "format_studies": "_format",
    "get_storage": "_factory", "storage_class": "_factory", "scheme_of": "_factory",
    "SQL_SCHEMES": "_factory", "check_database": "_check",
    "folder_problem": "_check", "keeps_results": "_check",
    "ResultsStore": "_store", "MemoryStorage": "_memory",
    "Storage": "_storage", "Lease": "_storage", "StudyState": "_storage",
    "StoredTrial": "_storage", "TrialStart": "_storage", "StartedRecord": "_storage",
    "EpochRecord": "_storage", "ResultRecord": "_storage", "HEARTBEAT_S": "_storage",
    "STALE_AFTER_S": "_storage", "DatabaseProblem": "_storage", "crash_error": "_storage",
    "ObjectiveSpec": "_storage", "pareto_front": "_pareto", "ParetoFront": "_pareto",
    "best_first": "_ranking", "pareto_trials": "_ranking", "finite_number": "_pareto",
    "choose_objectives": "_objectives", "describe_objectives": "_objectives",
    "whole_number": "_numbers", "whole_number_type": "_numbers", "LARGEST": "_numbers",
    "STATUSES": "_status", "FINISHED": "_status", "ATTEMPT_STATUSES": "_status",
    "Checkpoint": "_storage", "Segment": "_storage", "Suggested": "_storage",
}

__all__ = list(_HOMES)
__getattr__ = names_from(__name__, _HOMES)
