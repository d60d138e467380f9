"""What a SQLite file holds, read without SQLAlchemy and without writing anything: its
first bytes (:func:`sqlite_file_problem`) and its table names (:func:`sqlite_table_names`).

The checks a search makes of its results file before it starts
(:mod:`diel.results._check`) need nothing more, so the ranks that make them do not
import SQLAlchemy for it; the reader's (:mod:`diel.results._database`) use them too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

__all__ = ["SQLITE_HEADER", "sqlite_file_problem", "sqlite_table_names"]

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file


def sqlite_file_problem(path: Path) -> str | None:
    """Why the existing file ``path`` cannot be a SQLite database (``"the file is empty"``,
    ``"not a SQLite database file"``), else ``None``. Reads 16 bytes and nothing else, so
    the file is untouched whatever it holds (SQLite itself would treat an empty file as an
    empty database)."""
    with path.open("rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if not head:
        return "the file is empty"
    if head != SQLITE_HEADER:
        return "not a SQLite database file"
    return None


def sqlite_table_names(path: Path) -> set[str] | None:
    """The table names of the SQLite file ``path``, read with ``immutable=1`` (nothing is
    written, not even the ``-wal``/``-shm`` files a read-only connection to a WAL database
    would leave beside another program's file), or ``None`` where the file cannot be read
    as a database. A page a live writer is changing may be read torn: callers treat the
    answer as a hint, and the real open reports a file that is really damaged."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", ("table",))
        return {name for (name,) in rows}
    except sqlite3.Error:
        return None  # not a database, or a writer moved in meanwhile
    finally:
        conn.close()
