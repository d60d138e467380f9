"""Opening a results store: :func:`get_storage`, the one way to, and the plug-ins it
chooses from.

A storage is a :class:`~diel.results.Storage` subclass registered in the entry-point
group ``diel.storages`` under the URL scheme it serves. diel registers two:

* ``memory``: :class:`~diel.results.MemoryStorage`, for ``memory://`` (a throwaway
  store inside one process, for tests and benchmarks);
* ``sql``: :class:`~diel.results.ResultsStore`, the fallback, which takes every URL no
  other entry claims (SQLAlchemy's: ``sqlite:///...``, ``postgresql+psycopg://...``,
  ...) and every plain path (a SQLite file).

A URL's scheme is what comes before ``://``, in lower case and without a driver
(``postgresql+psycopg`` is ``postgresql``); a package adds a storage for its own scheme
with one entry point (docs/extending.md). A path and the schemes of diel's SQL store
(:data:`SQL_SCHEMES`: ``sqlite``, ``postgresql``) go to ``sql`` without reading the
installed entry points (:mod:`diel.plugins`: tens of milliseconds a rank), as ``memory``
and ``sql`` themselves do.
"""

from __future__ import annotations

import re
from pathlib import Path

from diel.plugins import BUILTINS, load_plugin, plugin_names
from diel.results._storage import Storage
from diel.results._urls import resolve_url

__all__ = ["get_storage", "storage_class", "scheme_of", "GROUP", "FALLBACK", "SQL_SCHEMES"]

GROUP = "diel.storages"
FALLBACK = "sql"   # the entry that takes every URL no other entry claims
SQL_SCHEMES = ("sqlite", "postgresql")   # diel's SQL store's own, never a plug-in's
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9.-]*)(?:\+[^:/]*)?://")


def scheme_of(url: str) -> str:
    """The scheme of ``url`` in lower case, without its driver; ``""`` for a path."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else ""


def storage_class(url: str, path: str = "database") -> type[Storage]:
    """The storage class serving ``url``: the one registered under its scheme, else the
    ``sql`` fallback. A plug-in that fails to load, is registered twice or is not a
    :class:`Storage` is a :class:`~diel.errors.ConfigError` at ``path``."""
    scheme = scheme_of(url)
    name = scheme if scheme in BUILTINS[GROUP] or (
        scheme and scheme not in SQL_SCHEMES and scheme in plugin_names(GROUP)) else FALLBACK
    return load_plugin(GROUP, name, path, "storage",
                       lambda names: f"no storage {name!r} is installed in {GROUP} (found: "
                                     f"{', '.join(names) or 'none'}); reinstall diel",
                       base=Storage, base_name="diel.results.Storage")


def get_storage(url_or_storage: str | Path | Storage, path: str = "database") -> Storage:
    """The results store ``url_or_storage`` names, open for a search master to write: a
    :class:`Storage` is returned as it is; a URL opens the storage its scheme picks
    (module docstring); a path, a SQLite file (relative to the current folder).
    Raises :class:`~diel.errors.ResultsError` when the store cannot be opened, and a
    :class:`~diel.errors.ConfigError` at ``path`` for a broken plug-in."""
    if isinstance(url_or_storage, Storage):
        return url_or_storage
    url = str(url_or_storage)
    if not scheme_of(url):
        url = resolve_url(url)
    return storage_class(url, path)(url)
