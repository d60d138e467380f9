"""The keys a filter or a sort may name in one database, and naming one: its trial
columns, and the parameter and extra-metric names its trials recorded or its studies'
stored spaces declare. An unknown key is a :class:`ValueError` with the closest
spelling and every key there is.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from sqlalchemy import func, select, true

from diel.results._models import StudyModel, TrialModel

__all__ = ["Keys", "COLUMNS", "OPTIONAL", "read_keys", "resolver"]

COLUMNS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
           "attempts")
OPTIONAL = ("attempts", "queued_at")  # trial fields from schema 2 on, schema 5 on


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none recorded yet"


@dataclass(frozen=True)
class Keys:
    """The keys a filter or a sort may name in one database: its trial columns, and the
    parameter and extra-metric names its trials recorded (or its studies' spaces
    declare)."""

    columns: tuple[str, ...]
    params: frozenset[str]
    metrics: frozenset[str]

    def resolve(self, key: str) -> str | None:
        """``key`` as a column name, ``params.NAME`` or ``metrics.NAME``; a bare name is
        a parameter, else a metric. None when this database has no such key."""
        if key in self.columns:
            return key
        source, dot, name = key.partition(".")
        if dot and source in ("params", "metrics"):
            return key if name in getattr(self, source) else None
        if key in self.params:
            return f"params.{key}"
        return f"metrics.{key}" if key in self.metrics else None

    def spellings(self) -> list[str]:
        """Every way to name a key, for "did you mean"."""
        return [*self.columns, *self.params, *self.metrics,
                *(f"params.{p}" for p in self.params), *(f"metrics.{m}" for m in self.metrics)]

    def describe(self) -> str:
        return (f"columns: {', '.join(self.columns)}; parameters: {_listing(self.params)}; "
                f"metrics: {_listing(self.metrics)}")


def read_keys(session: Any, dialect: str, fields: Iterable[str]) -> Keys:
    """The keys of the database ``session`` reads, whose trials have ``fields``."""
    fields = set(fields)
    columns = tuple(c for c in COLUMNS if c not in OPTIONAL or c in fields)
    params = _json_keys(session, dialect, TrialModel.params) | _space_names(session)
    return Keys(columns, frozenset(params),
                frozenset(_json_keys(session, dialect, TrialModel.metrics)))


def resolver(session: Any, dialect: str, fields: Iterable[str],
             label: str) -> Callable[[str, str], str]:
    """A function ``(key, what) -> resolved key`` raising a :class:`ValueError` that
    lists the keys there are (in the database ``label``); the names are read from the
    database only when some key is not a column."""
    found: list[Keys] = []

    def resolve(key: str, what: str) -> str:
        if key in COLUMNS:
            return key
        if not found:
            found.append(read_keys(session, dialect, fields))
        resolved = found[0].resolve(key)
        if resolved is None:
            raise _unknown_key(key, what, label, found[0])
        return resolved
    return resolve


def _json_keys(session: Any, dialect: str, column: Any) -> set[str]:
    """The distinct top-level keys of a JSON column over all trials, computed in the
    database where it can (SQLite json_each, PostgreSQL json_object_keys)."""
    if dialect == "sqlite":
        each = func.json_each(column).table_valued("key")
        query = (select(each.c.key).select_from(TrialModel).join(each, true())
                 .where(func.json_type(column) == "object").distinct())
    elif dialect == "postgresql":
        query = (select(func.json_object_keys(column))
                 .where(func.json_typeof(column) == "object").distinct())
    else:
        return {key for value in session.scalars(select(column))
                if isinstance(value, dict) for key in value}
    return {str(key) for key in session.scalars(query)}


def _space_names(session: Any) -> set[str]:
    """The parameter names the studies' stored search spaces declare (so a filter on a
    parameter of a study that has no trial yet is not an unknown key)."""
    names: set[str] = set()
    for config in session.scalars(select(StudyModel.config)):
        space = config.get("space") if isinstance(config, dict) else None
        if isinstance(space, dict):
            names.update(str(name) for name in space)
    return names


def _unknown_key(key: str, what: str, label: str, keys: Keys) -> ValueError:
    """One line naming the unknown key, a near miss if any, and every key there is."""
    close = difflib.get_close_matches(key, keys.spellings(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"unknown key {key!r} in {what}{hint}; the keys in {label} are "
                      f"{keys.describe()}")
