"""Results database URLs without SQLAlchemy: the default one, a path made a URL, and
the file of a SQLite URL (read here where the URL is a plain one).

A worker rank needs them only to find its checkpoint folder (beside a SQLite results
file), and importing SQLAlchemy there would cost start-up and teardown for nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from diel.errors import ResultsError
from diel.executive.paths import os_reason, shown_path

__all__ = ["default_url", "resolve_url", "is_sqlite_file", "plain_sqlite_database"]


def default_url(workflow_path: str | Path) -> str:
    """``sqlite:///<dir>/<stem>.db`` next to the workflow file ``workflow_path``."""
    path = Path(workflow_path).resolve()
    return f"sqlite:///{path.with_name(path.stem + '.db')}"


_URL_START = re.compile(r"^(sqlite|postgresql|postgres|mysql|mariadb|oracle|mssql)(\+\w+)?:",
                        re.IGNORECASE)


def resolve_url(url_or_path: str | Path, base_dir: str | Path | None = None) -> str:
    """A SQLAlchemy URL for ``url_or_path``: URLs are kept, paths become
    ``sqlite:///<absolute path>`` (relative ones resolved against ``base_dir``). Anything
    that starts like a URL (``scheme:`` with a dialect's name, e.g. a mistyped
    ``sqlite:/x.db``) is kept as a URL, so that it fails as a malformed one instead of
    becoming a folder named ``sqlite:``. A path that cannot be resolved (a NUL
    character, ``~user`` of no such user) raises :class:`ResultsError`."""
    text = str(url_or_path)
    if "://" in text or _URL_START.match(text):
        return text
    try:
        path = Path(text).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return f"sqlite:///{path.resolve()}"
    except (OSError, ValueError, RuntimeError) as e:   # a NUL, ~nosuchuser, a loop...
        raise ResultsError(f"results database {shown_path(text)}: not a usable path "
                           f"({os_reason(e)})") from None


# ``sqlite:///<path>`` with nothing SQLAlchemy would decode or split off (``%``
# escapes, a ``?query``, ``@``): its database is ``<path>`` as written.
_PLAIN_SQLITE = re.compile(r"sqlite:///([^?%@]*)")


def plain_sqlite_database(url: str) -> str | None:
    """The database of ``url`` when it is a plain ``sqlite:///<path>`` (the form diel
    itself writes), as SQLAlchemy would read it: ``<path>`` as written (``""`` for an
    in-memory one); ``None`` for any other URL."""
    plain = _PLAIN_SQLITE.fullmatch(url)
    return None if plain is None else plain.group(1)


def is_sqlite_file(url: str) -> Path | None:
    """The file of a file-backed SQLite URL, else ``None`` (other backends, memory).
    A plain ``sqlite:///path`` (the form diel itself writes) and ``memory://`` are read
    here; any other URL is parsed by SQLAlchemy, imported only then."""
    database = plain_sqlite_database(url)
    if database is None:
        if url == "memory://":
            return None
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return None
        database = parsed.database
    return None if database in (None, "", ":memory:") else Path(database)
