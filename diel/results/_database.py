"""Connecting to a results database: URLs, engines and the one session context manager.

Any SQLAlchemy URL works (``postgresql+psycopg://...`` with the ``postgres`` extra); a
plain path means a SQLite file. SQLite connections are put in WAL mode, so ``diel
results`` can read while a search writes, with a busy timeout so a reader and the
writer wait for each other instead of failing with "database is locked". A file on a
network file system gets the rollback journal instead (:mod:`diel.results._filesystem`).

A read-only :class:`Database` (``readonly=True``, what ``diel results`` uses) never
writes: a SQLite file is opened with ``mode=ro`` and left in whatever journal mode it
has; PostgreSQL sessions are ``READ ONLY``. Other backends rely on the reader issuing
only SELECTs. :func:`~diel.results._sqlite_files.sqlite_file_problem` tells a file that
is not a SQLite database at all (empty, text, garbage) from its first bytes, without
opening it through SQLite; :func:`sqlite_tables_at_rest` lists the tables of one at rest without writing anything.

User mistakes in the URL (no such dialect, a driver that is not installed) raise
:class:`ResultsError` with no ``__cause__``: the CLI reports them as usage errors (exit 2).
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from diel.errors import ResultsError
from diel.results._filesystem import network_mount
from diel.results._sqlite_files import sqlite_table_names
from diel.results._urls import default_url, is_sqlite_file, resolve_url

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = ["Database", "default_url", "resolve_url", "is_sqlite_file", "sqlite_tables_at_rest",
           "BUSY_TIMEOUT_S"]

BUSY_TIMEOUT_S = 30.0
log = logging.getLogger("diel.results")
# A missing driver module -> how to get one (the postgres extra installs psycopg 3).
_DRIVER_HINTS = {"psycopg": "install it with pip install -e '.[postgres]'",
                 "psycopg2": "use postgresql+psycopg://... (pip install -e '.[postgres]')"}


def sqlite_tables_at_rest(path: Path) -> set[str] | None:
    """The table names of the SQLite file ``path`` (:func:`sqlite_table_names`) when the
    file alone holds the whole database, else ``None``: with a ``-wal`` file of changes
    not yet copied back (a search writing right now) the read could miss tables, so it
    is not made, and SQLite's own reader reports what it finds."""
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return None
    return sqlite_table_names(path)


def _sqlite_pragmas(path: Path) -> Callable[[Any, Any], None]:
    """The per-connection settings of the writer of the SQLite file ``path``: WAL
    journal, busy timeout, foreign keys; on a network file system the rollback journal
    instead, whose mode is checked (see :mod:`diel.results._filesystem`)."""
    mount = network_mount(path)
    journal, synchronous = ("DELETE", "FULL") if mount else ("WAL", "NORMAL")
    if mount is not None:
        log.warning("results database %s is on a %s file system (mounted at %s): SQLite "
                    "uses its rollback journal there (journal_mode=DELETE), as WAL mode "
                    "is unsafe on network file systems; see docs/clusters.md", path,
                    mount.type, mount.point)

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            mode = cursor.execute(f"PRAGMA journal_mode={journal}").fetchone()[0]
        except sqlite3.OperationalError:   # "database is locked": WAL in use elsewhere
            if mount is None:
                raise
            mode = "wal"
        if mount is not None and str(mode).upper() != journal:
            cursor.close()
            raise ResultsError(f"results database {path} is on a {mount.type} file system, "
                               f"where WAL mode is unsafe, and cannot leave {mode} mode while "
                               "another process has it open; stop that process (a diel "
                               "results, plot or dashboard reading it) and run again")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
    return pragmas


def _sqlite_reader_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Per-connection settings of a reader: busy timeout, and no writes even by mistake
    (the journal mode is left alone: changing it would write the file)."""
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def _postgres_read_only(dbapi_connection: Any, _record: Any) -> None:
    """Make every transaction of a reader's PostgreSQL session read-only."""
    cursor = dbapi_connection.cursor()
    cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    cursor.close()
    dbapi_connection.commit()  # else the pool's reset-on-return would roll the SET back


def _sqlite_read_only_engine(url: str, path: Path) -> Engine:
    """An engine on the SQLite file ``path`` opened read-only (``mode=ro``)."""
    uri = f"file:{quote(str(path))}?mode=ro"
    engine = create_engine(url, creator=lambda: sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False))
    event.listen(engine, "connect", _sqlite_reader_pragmas)
    return engine


def _engine(url: str, readonly: bool) -> Engine:
    """The engine for ``url``: SQLite with the pragmas above, others with pre-ping."""
    parsed = make_url(url)
    sqlite_file = is_sqlite_file(url)
    if readonly and sqlite_file is not None:
        return _sqlite_read_only_engine(url, sqlite_file)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
        if sqlite_file is not None:
            event.listen(engine, "connect", _sqlite_pragmas(sqlite_file))
        return engine
    engine = create_engine(url, pool_pre_ping=True)
    if readonly and parsed.get_backend_name() == "postgresql":
        event.listen(engine, "connect", _postgres_read_only)
    return engine


def _url_mistake(url: str, error: Exception) -> ResultsError:
    """One line for a URL that names no known dialect or a driver that is not installed."""
    if isinstance(error, ImportError):
        hint = _DRIVER_HINTS.get(error.name or "",
                                 f"install the Python package that provides {error.name}")
        return ResultsError(f"cannot use results database {_safe(url)}: its driver is not "
                            f"installed ({error}); {hint}")
    return ResultsError(f"cannot use results database {_safe(url)}: not a database URL "
                        f"SQLAlchemy can open ({error})")


def _safe(url: str) -> str:
    """``url`` with any password hidden (``url`` itself when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url


class Database:
    """An engine and its sessions for one results database URL; with ``readonly`` the
    database is never written (module docstring)."""

    def __init__(self, url: str, readonly: bool = False) -> None:
        self.url = url
        self.readonly = readonly
        try:
            self.engine: Engine = _engine(url, readonly)
        except (ArgumentError, ImportError, ValueError) as e:  # ValueError: a bad port
            raise _url_mistake(url, e) from None
        except SQLAlchemyError as e:
            raise ResultsError(f"cannot use results database {_safe(url)}: {e}") from e

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits when the block ends, rolls back if it raises, and turns
        database errors into :class:`ResultsError` (the original chained). The ORM is
        imported here, for the readers: the search master's store runs on the engine alone
        (:mod:`diel.results._tables`), without loading it."""
        from sqlalchemy.orm import Session

        session = Session(self.engine, expire_on_commit=False)
        try:
            yield session
            session.commit()
        except SQLAlchemyError as e:
            session.rollback()
            raise ResultsError(f"results database {self.safe_url}: {e}") from e
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @property
    def safe_url(self) -> str:
        """The URL with any password hidden, for messages."""
        return _safe(self.url)

    @property
    def label(self) -> str:
        """How messages name the database: the file of a SQLite URL (what the user
        typed, usually), else the URL with any password hidden."""
        sqlite_file = is_sqlite_file(self.url)
        return str(sqlite_file) if sqlite_file is not None else self.safe_url

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()
