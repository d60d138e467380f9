"""Recognizing a diel results database before reading it, and which schema it has.

A file that is not a diel results database (missing, empty, not SQLite, another
program's SQLite) is refused with :class:`ResultsError` (no ``__cause__``: a usage
error) and left byte-for-byte as it was: a SQLite file's first bytes and, when it is at
rest, its table names are read without SQLite writing anything. A database of any
schema version is read as it is: :func:`read_schema` says which trial fields it has
(``attempts`` from schema 2, ``objective_values`` from 4 with ``studies.objectives``,
``queued_at`` from 5), whether it has the leases table (schema 3), the checkpoints
table (schema 6) and the segments table with ``trials.distributions`` (schema 7).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import inspect
from sqlalchemy.exc import DatabaseError

from diel.errors import ResultsError
from diel.results._database import Database, is_sqlite_file, sqlite_tables_at_rest
from diel.results._keys import OPTIONAL
from diel.results._rows import VALUES
from diel.results._sqlite_files import sqlite_file_problem

__all__ = ["Schema", "check_file", "read_schema", "FIELDS"]

FIELDS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
          "params", "metrics", "started_at", "finished_at", "error")  # in every schema
_REQUIRED = {  # what a database must have to be read as a diel results database
    "studies": ("id", "name", "strategy", "objective", "direction", "config", "created_at",
                "updated_at"),
    "trials": ("study_id",) + FIELDS,
}
_LEASES = "study_leases"
_CHECKPOINTS = "checkpoints"
_SEGMENTS = "segments"


@dataclass(frozen=True)
class Schema:
    """What a database holds: its trials' ``fields`` (those of :data:`FIELDS`, then the
    optional ones it has), whether its studies may have several objectives, whether
    it records leases, whether it records checkpoints (schema 6), and whether it records
    segments and distributions (schema 7)."""

    fields: tuple[str, ...]
    several: bool
    leases: bool
    checkpoints: bool = False
    segments: bool = False


def _foreign(label: str, reason: str) -> ResultsError:
    """The error for a database that is not a diel results database (a usage error)."""
    return ResultsError(f"{label} is not a diel results database: {reason}")


def _missing_tables(tables: set[str], columns: dict[str, set[str]]) -> str | None:
    """What makes a database with these tables and columns not ours, else None."""
    missing = [t for t in _REQUIRED if t not in tables]
    if missing:
        found = f"its tables: {', '.join(sorted(tables))}" if tables else "it has no tables"
        return f"no {' or '.join(missing)} table ({found})"
    for table, required in _REQUIRED.items():
        lacking = [c for c in required if c not in columns[table]]
        if lacking:
            return f"its {table} table lacks the columns {', '.join(lacking)}"
    return None


def check_file(db: Database) -> None:
    """For a SQLite file: it exists, starts like a SQLite database (read without
    SQLite, which would take an empty file for an empty database) and, when at rest,
    has our tables (read without leaving ``-wal``/``-shm`` files beside it)."""
    path = is_sqlite_file(db.url)
    if path is None:
        return
    if not path.exists():
        raise ResultsError(f"no results database at {path}")
    if not path.is_file():
        raise _foreign(str(path), "not a file")
    problem = sqlite_file_problem(path)
    if problem is not None:
        raise _foreign(str(path), problem)
    tables = sqlite_tables_at_rest(path)  # another program's file: refused unopened
    if tables is not None and not set(_REQUIRED) <= tables:
        raise _foreign(str(path), _missing_tables(tables, {}) or "")


def read_schema(db: Database) -> Schema:
    """The schema of the database ``db``; :class:`ResultsError` if it is not ours (no
    cause) or cannot be read (the driver's error chained)."""
    try:
        inspector = inspect(db.engine)
        tables = set(inspector.get_table_names())
        columns = {t: {c["name"] for c in inspector.get_columns(t)}
                   for t in _REQUIRED if t in tables}
    except DatabaseError as e:
        if "file is not a database" in str(e.orig):
            raise _foreign(db.label, "not a SQLite database file") from None
        raise ResultsError(f"cannot read {db.label}: {e}") from e
    except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
        raise ResultsError(f"cannot read {db.label}: {e}") from e
    problem = _missing_tables(tables, columns)
    if problem is not None:
        raise _foreign(db.label, problem)
    several = VALUES in columns["trials"] and "objectives" in columns["studies"]
    fields = FIELDS + tuple(name for name in OPTIONAL if name in columns["trials"]) + \
        ((VALUES,) if several else ())
    return Schema(fields, several, _LEASES in tables, _CHECKPOINTS in tables,
                  _SEGMENTS in tables and "distributions" in columns["trials"])
