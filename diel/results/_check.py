"""Checking a results database before a search starts, without touching it.

``diel validate`` (and every rank of ``diel run``, before any module starts) calls
:func:`check_database` on the URL the search master will open, so that a database the
master could not open or write is a one-line configuration error instead of a traceback
after the workflow has started. It asks the storage the URL picks
(:meth:`~diel.results.Storage.check`); the SQL one's checks (:func:`check_sql_url`) are:

- the URL parses and names a dialect SQLAlchemy knows, whose driver is installed (the
  message names what to install, e.g. ``pip install -e '.[postgres]'``);
- a SQLite file that exists is a regular file holding a SQLite database (or nothing
  yet), and not another program's database; the file and its folder can be written
  (WAL mode writes ``-wal`` and ``-shm`` files beside it);
- a SQLite file that does not exist yet can be created: its nearest existing folder is
  a folder, writable, on a file system that is neither read-only nor a kernel
  pseudo file system such as ``/proc`` (where even root cannot create files).

A path the system refuses (a name too long, a NUL character) is a problem like the others.
Nothing is created or modified: an existing SQLite file is read with ``immutable=1``.
Servers (PostgreSQL, ...) are not contacted; their URL and driver are checked. A plain
``sqlite:///FILE`` URL (what a path or the default database becomes) and ``memory://``
are checked without importing SQLAlchemy, which the search master's rank then loads
only to open its store (and ``diel validate`` not at all).

:func:`folder_problem` makes the same checks of a folder the search keeps files in (its
checkpoints): it exists as a folder, or can be created, and files can be written there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from diel.checks import did_you_mean
from diel.executive.paths import os_reason, shown_path
from diel.results._factory import storage_class
from diel.results._filesystem import mount_of
from diel.results._sqlite_files import sqlite_file_problem, sqlite_table_names
from diel.results._storage import DatabaseProblem
from diel.results._urls import plain_sqlite_database

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["check_database", "check_sql_url", "keeps_results", "folder_problem",
           "DatabaseProblem", "DIEL_TABLES"]

DIEL_TABLES = frozenset({"studies", "trials"})  # present in every schema version
POSTGRES_EXTRA = "pip install -e '.[postgres]'"
PSEUDO_FILESYSTEMS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs",
                                "tracefs", "securityfs", "configfs", "pstore", "bpf",
                                "mqueue", "efivarfs", "binfmt_misc", "fusectl"})
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
URL_EXAMPLE = "a file path such as results.db, sqlite:///FILE or postgresql+psycopg://USER@HOST/DB"


def check_database(url: str, path: str = "database") -> None:
    """Raise :class:`DatabaseProblem` if the master could not open and write ``url``
    (a URL as :func:`~diel.results.get_storage` takes it), as the storage it picks
    checks it; a broken storage plug-in is a :class:`~diel.errors.ConfigError` at
    ``path``. Creates, writes and connects to nothing. A plain SQLite URL, which only
    diel's SQL store serves, is checked without loading that store (nor SQLAlchemy)."""
    if plain_sqlite_database(url) is not None:
        check_sql_url(url)
    else:
        storage_class(url, path).check(url)


def keeps_results(url: str, path: str = "database") -> bool:
    """Whether the storage ``url`` picks keeps its results after the job (its
    :attr:`~diel.results.Storage.durable`; a broken plug-in is a
    :class:`~diel.errors.ConfigError` at ``path``). The SQL store of a plain SQLite URL
    does, told without loading it."""
    return plain_sqlite_database(url) is not None or storage_class(url, path).durable


def check_sql_url(url: str) -> None:
    """Raise :class:`DatabaseProblem` if the master could not open and write the
    SQLAlchemy URL ``url`` (see :func:`diel.results.resolve_url`). Reads at most the
    first bytes and the table names of an existing SQLite file; never creates, opens
    for writing or connects. A plain SQLite URL (driver: Python's own ``sqlite3``) is
    read without SQLAlchemy; SQLAlchemy parses any other, and finds its driver.
    """
    database = plain_sqlite_database(url)
    if database is None:
        parsed = _parse(url)
        _check_driver(parsed)
        if parsed.get_backend_name() != "sqlite":
            return
        database = parsed.database
    if database not in (None, "", ":memory:"):
        path = Path(database)
        try:
            _check_sqlite_file(path)
        except DatabaseProblem:
            raise
        except (OSError, ValueError, RuntimeError) as e:   # too long, a NUL, ~nosuchuser
            raise DatabaseProblem(f"{shown_path(path)} cannot be used: {os_reason(e)}") from None


def _parse(url: str) -> URL:
    """The parsed URL; a malformed one is a DatabaseProblem (any password hidden)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except ArgumentError:
        problem = "it cannot be parsed"
    except ValueError:  # SQLAlchemy's int() of the port
        problem = "its port is not a number"
    shown = _PASSWORD.sub(r"\1***@", url)
    raise DatabaseProblem(f"'{shown}' is not a database URL ({problem}); expected "
                          f"{URL_EXAMPLE}")


def _check_driver(url: URL) -> None:
    """The dialect exists and its DB-API module imports; otherwise say what to install."""
    from sqlalchemy.exc import NoSuchModuleError

    safe = url.render_as_string(hide_password=True)
    try:
        dialect = url.get_dialect()
    except NoSuchModuleError:
        raise DatabaseProblem(_unknown_dialect(url, safe)) from None
    try:
        dialect.import_dbapi()
    except ImportError as e:
        missing = e.name or url.get_driver_name()
        raise DatabaseProblem(f"{safe}: the {url.get_backend_name()} driver "
                              f"'{url.get_driver_name()}' is not installed (no module "
                              f"'{missing}'); {_install_hint(url, missing)}") from None


def _unknown_dialect(url: URL, safe: str) -> str:
    """The message for a URL whose dialect or driver SQLAlchemy does not have."""
    from sqlalchemy.dialects import __all__ as dialects

    backend = url.get_backend_name()
    if backend in dialects:
        return (f"{safe}: SQLAlchemy's {backend} dialect has no driver "
                f"'{url.get_driver_name()}'; for {backend} write e.g. "
                f"{_example(backend)}")
    return (f"{safe}: unknown database dialect '{backend}'{did_you_mean(backend, dialects)}; "
            f"expected {URL_EXAMPLE}")


def _example(backend: str) -> str:
    return {"postgresql": "postgresql+psycopg://USER@HOST/DB",
            "sqlite": "sqlite:///FILE"}.get(backend, f"{backend}://USER@HOST/DB")


def _install_hint(url: URL, missing: str) -> str:
    """What to install for a missing driver: the ``postgres`` extra where it fits."""
    if url.get_backend_name() == "postgresql":
        if url.get_driver_name() == "psycopg":
            return f"install it with {POSTGRES_EXTRA}"
        return (f"pip install {missing}, or use postgresql+psycopg://... "
                f"({POSTGRES_EXTRA})")
    return f"install the Python package that provides '{missing}'"


def _check_sqlite_file(path: Path) -> None:
    """An existing file must be a writable SQLite database (or empty); a new one creatable."""
    path = path.expanduser().absolute()
    try:
        info = path.stat()
    except FileNotFoundError:
        _check_creatable(path)
        return
    except OSError as e:  # NotADirectoryError, PermissionError, ...
        _check_creatable(path, e)
        return
    if path.is_dir():
        raise DatabaseProblem(f"{path} is a folder; expected a SQLite file "
                              f"(e.g. {path / 'results.db'})")
    if not path.is_file():
        raise DatabaseProblem(f"{path} is not a regular file; expected a SQLite file")
    if info.st_size:
        _check_sqlite_content(path)
    if not os.access(path, os.R_OK | os.W_OK, effective_ids=_effective_ids()):
        raise DatabaseProblem(f"{path} cannot be written (no permission); the search "
                              "master writes its results there")
    _check_folder(path.parent, path)


def _check_sqlite_content(path: Path) -> None:
    """The file starts with the SQLite header and is a diel database or has no tables."""
    try:
        problem = sqlite_file_problem(path)
    except OSError as e:
        raise DatabaseProblem(f"{path} cannot be read: {e.strerror}") from None
    if problem is not None:
        raise DatabaseProblem(f"{path} exists but is not a SQLite database; point "
                              "'database' at a new file or at a diel results database")
    tables = sqlite_table_names(path) or set()   # unreadable: the master's open will say
    if tables and not DIEL_TABLES <= tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise DatabaseProblem(f"{path} is another program's SQLite database (tables: "
                              f"{shown}), not a diel results database; point 'database' "
                              "at a new file")


def folder_problem(folder: Path) -> str | None:
    """Why the search could not keep files in ``folder`` (making it and its parents when
    missing), in one line; None when it can. Creates and writes nothing."""
    folder = Path(folder)
    try:
        folder = folder.expanduser().absolute()
        nearest = folder
        while True:   # the nearest part of the path that exists
            try:
                nearest.stat()
                break
            except (FileNotFoundError, NotADirectoryError):   # missing, or under a file
                if nearest == nearest.parent:
                    break
                nearest = nearest.parent
        if not nearest.is_dir():
            return (f"{shown_path(folder)} cannot be created: {shown_path(nearest)} is a file, "
                    "not a folder")
        _check_folder(nearest, folder)
    except DatabaseProblem as e:
        return str(e)
    except (OSError, ValueError, RuntimeError) as e:   # too long, a NUL, ~nosuchuser
        return f"{shown_path(folder)} cannot be used: {os_reason(e)}"
    return None


def _check_creatable(path: Path, error: OSError | None = None) -> None:
    """A new file at ``path`` (and the folders the master makes for it) can be created."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise DatabaseProblem(f"{path} cannot be created: {folder} is a file, not a folder")
    if error is not None and not isinstance(error, FileNotFoundError):
        raise DatabaseProblem(f"{path} cannot be created: {error.strerror}")
    _check_folder(folder, path)


def _check_folder(folder: Path, path: Path) -> None:
    """The search can create files in ``folder`` (for ``path`` and SQLite's WAL files)."""
    kind = _pseudo_filesystem(folder)
    if kind is not None:
        raise DatabaseProblem(f"{path} cannot be created: {folder} is on the kernel's "
                              f"{kind} file system, which holds no ordinary files")
    if _read_only(folder):
        raise DatabaseProblem(f"{path} cannot be written: {folder} is on a read-only "
                              "file system")
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=_effective_ids()):
        raise DatabaseProblem(f"{path} cannot be written: no permission to create files "
                              f"in {folder}")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs on this platform
        return False


def _pseudo_filesystem(folder: Path) -> str | None:
    """The type of the kernel pseudo file system (``proc``, ``sysfs``...) holding
    ``folder``, read from the mount table; None elsewhere or off Linux."""
    mount = mount_of(folder)
    return mount.type if mount is not None and mount.type in PSEUDO_FILESYSTEMS else None


def _effective_ids() -> bool:
    """Whether ``os.access`` can check with the effective ids (as opening would)."""
    return os.access in os.supports_effective_ids
