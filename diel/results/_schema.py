"""Schema versions of a results database, and the writer's in-place upgrade.

The version is the ``schema_version`` row of the ``diel_meta`` table; a database with
the results tables but no such row (or no such table) was written by the first release
and is version 1. Version 2 adds ``trials.attempts`` (how many times a trial was
dispatched) and ``diel_meta``; version 3 adds the ``study_leases`` table (which run holds
a study); version 4 adds ``studies.objectives`` and ``trials.objective_values`` (studies
with several objectives); version 5 adds ``trials.queued_at`` (when the master dispatched
a trial; ``started_at`` is from then on when a worker began to run it, and the upgrade
copies each row's ``started_at``, its dispatch time until then, into ``queued_at``);
version 6 adds the ``checkpoints`` and ``attempts`` tables and the trial status
``paused`` (the upgrade creates the two tables, empty: the trials before had neither);
version 7 adds the ``segments`` table (the parameter sets a trial ran with, and whose
checkpoint each was copied from) and ``trials.distributions`` (the distributions of the
parameters a trial's function asked for as it ran); the upgrade creates the table empty
and the column NULL: trials before ran with one parameter set, all declared.
:func:`prepare` runs only in the writer (:class:`ResultsStore`): it creates the tables of
a new database, upgrades an older one (1 to 6) in place and refuses a newer one without
touching it. Readers never call it: they cope with every version they can read (none of
them reads ``study_leases``, ``checkpoints`` or ``attempts``; one without ``segments``
has none to show; a database without the
version 4 columns has only studies of one objective; one without ``queued_at`` has
dispatch times in ``started_at``; ``paused`` is one more status to count and filter).
"""

from __future__ import annotations

import logging

from sqlalchemy import JSON, DateTime, delete, insert, inspect, select, text
from sqlalchemy.engine import Connection, Engine

from diel.errors import ResultsError
from diel.results._tables import META, METADATA, SCHEMA_VERSION, STUDIES, TRIALS

__all__ = ["prepare", "read_version", "SCHEMA_KEY"]

SCHEMA_KEY = "schema_version"
CHANGES = {2: "trials.attempts", 3: "study leases", 4: "objective values",
           5: "trials.queued_at", 6: "checkpoints and attempts",
           7: "trial segments and distributions"}  # what each version added
log = logging.getLogger("diel.results")


def read_version(conn: Connection) -> int | None:
    """The schema version of the database behind ``conn``: the ``diel_meta`` row, else 1
    when the trials table exists, else None (an empty database)."""
    tables = set(inspect(conn).get_table_names())
    value = None
    if META.name in tables:
        value = conn.execute(select(META.c.value).where(META.c.key == SCHEMA_KEY)).scalar()
    if value is None:
        return 1 if "trials" in tables else None
    try:
        return int(value)
    except ValueError:
        raise ResultsError(f"unreadable schema version {value!r} in table {META.name}") \
            from None


def prepare(engine: Engine, safe_url: str) -> None:
    """Make the database behind ``engine`` follow :data:`SCHEMA_VERSION`, in one
    transaction: create the tables of an empty one, upgrade an older one in place (logged
    once at INFO), and raise :class:`ResultsError` for one written by a newer diel before
    changing anything. Tables a version added are created by ``create_all`` (schema 3's
    leases, schema 6's checkpoints and attempts, schema 7's segments); columns added to
    existing tables have their own steps (``_add_attempts``, ``_add_objective_values``,
    ``_add_queued_at``, ``_add_distributions``)."""
    with engine.connect() as conn:
        _begin_write(conn)
        version = read_version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise ResultsError(f"{safe_url} was written by a newer diel (schema {version}); "
                               "upgrade diel")
        if version == 1:
            _add_attempts(conn)
        if version is not None and version < 4:
            _add_objective_values(conn)
        if version is not None and version < 5:
            _add_queued_at(conn)
        if version is not None and version < 7:
            _add_distributions(conn)
        METADATA.create_all(conn)  # only the missing tables (diel_meta, leases, ...)
        if version != SCHEMA_VERSION:
            conn.execute(delete(META).where(META.c.key == SCHEMA_KEY))
            conn.execute(insert(META).values(key=SCHEMA_KEY, value=str(SCHEMA_VERSION)))
        conn.commit()
    if version is not None and version < SCHEMA_VERSION:
        added = ", ".join(CHANGES[v] for v in range(version + 1, SCHEMA_VERSION + 1))
        log.info("upgraded results database %s from schema %d to %d (%s added)",
                 safe_url, version, SCHEMA_VERSION, added)


def _begin_write(conn: Connection) -> None:
    """Open the transaction as a write transaction. SQLite: ``BEGIN IMMEDIATE``, because
    Python's sqlite3 would otherwise run DDL outside any transaction and because it takes
    the write lock at once, so two masters cannot upgrade the same file together."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _lock(conn: Connection, table: str) -> set[str]:
    """The columns of ``table``, read under its lock (PostgreSQL), so that a column is
    checked again in case another master upgraded the database in the meantime."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
    return {c["name"] for c in inspect(conn).get_columns(table)}


def _add_attempts(conn: Connection) -> None:
    """Schema 1 to 2: ``trials.attempts``; every existing row was dispatched once."""
    if "attempts" not in _lock(conn, "trials"):
        conn.execute(text("ALTER TABLE trials ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1"))


def _add_objective_values(conn: Connection) -> None:
    """Schema 3 to 4: ``studies.objectives`` and ``trials.objective_values``, NULL in
    every existing row (every study before had one objective)."""
    json_type = JSON().compile(dialect=conn.dialect)
    for table, column in ((STUDIES.name, "objectives"), (TRIALS.name, "objective_values")):
        if column not in _lock(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {json_type}"))


def _add_queued_at(conn: Connection) -> None:
    """Schema 4 to 5: ``trials.queued_at``, the dispatch time, which ``started_at`` held
    until then: every existing row keeps it in both (its true start was not recorded)."""
    if "queued_at" not in _lock(conn, "trials"):
        timestamp = DateTime(timezone=True).compile(dialect=conn.dialect)
        conn.execute(text(f"ALTER TABLE trials ADD COLUMN queued_at {timestamp}"))
        conn.execute(text("UPDATE trials SET queued_at = started_at"))


def _add_distributions(conn: Connection) -> None:
    """Schema 6 to 7: ``trials.distributions``, NULL in every existing row (their
    parameters were all declared in their study's space)."""
    if "distributions" not in _lock(conn, "trials"):
        json_type = JSON().compile(dialect=conn.dialect)
        conn.execute(text(f"ALTER TABLE trials ADD COLUMN distributions {json_type}"))
