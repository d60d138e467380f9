"""Reading results: :func:`open` a database and list studies and trials as plain dicts.

Filters (``where``) are strings ``KEY OP VALUE`` with OP one of ``= != < <= > >=``
(:mod:`diel.results._filters` says how a value is read: ``"16"`` is a string, ``16`` a
number, ``true``/``false``/``null`` what JSON means by them). KEY is a trial column
(``number status objective accuracy loss time epoch worker attempts``), ``params.NAME`` or
``metrics.NAME`` (extra metrics), or a bare name: a parameter, else an extra metric. They
are turned into SQLAlchemy expressions, so every value (and every JSON key) reaches the
database as a bound parameter, never as SQL text. A key must exist in the database (a
column, or a name some trial recorded or some study's space declares), else
:class:`ValueError` lists the keys that do; a value of a type the key never holds is a
:class:`ValueError` too: a typo never silently matches nothing. A comparison only
matches values of its own type, so a parameter holding both numbers and strings filters
the same everywhere.

Reading never writes (the database is opened read-only) and works on every schema
version: trials are selected column by column, and ``attempts`` (schema 2) only where
the table has it. A database of schema 1 is read as it is, never upgraded; its trial
dicts have no ``attempts`` key. A file that is not a diel results database (empty, not
SQLite, another program's SQLite) is refused with :class:`ResultsError` (no
``__cause__``: a usage error) and left byte-for-byte as it was.

Studies of several objectives (schema 4): their trial dicts carry ``objectives``, each
objective's expression and the trial's value of it; ``objective`` is the first one's,
which ranks them by default. :meth:`Results.pareto` lists the trials of their Pareto
front (:mod:`diel.results._pareto`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from sqlalchemy import case, cast, func, inspect, select, true
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DatabaseError
from sqlalchemy.sql.elements import ColumnElement

from diel.errors import ResultsError
from diel.results._database import Database, is_sqlite_file, resolve_url, sqlite_file_problem, \
    sqlite_tables_at_rest
from diel.results._filters import Filter, check_kind, json_source, parse_filter, \
    sqlite_path, where_clause
from diel.results._models import STATUSES, StudyModel, TrialModel
from diel.results._numbers import LARGEST
from diel.results._objectives import choose, describe, study_objectives
from diel.results._pareto import pareto_front
from diel.results._storage import ObjectiveSpec

__all__ = ["Results", "open", "parse_filter", "Filter", "Keys", "COLUMNS"]

COLUMNS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
           "attempts")
_FIELDS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
           "params", "metrics", "started_at", "finished_at", "error")  # in every schema
_OPTIONAL = ("attempts", "queued_at")  # schema 2 on, schema 5 on
_VALUES = "objective_values"  # schema 4 on, with studies.objectives
_REQUIRED = {  # what a database must have to be read as a diel results database
    "studies": ("id", "name", "strategy", "objective", "direction", "config", "created_at",
                "updated_at"),
    "trials": ("study_id",) + _FIELDS,
}


def _parse_sort(sort: str | None) -> tuple[str, str] | None:
    """``KEY[:asc|:desc]`` as (key, order); None for the default order; ValueError if
    malformed."""
    if not sort:
        return None
    key, _, order = sort.partition(":")
    if order not in ("", "asc", "desc") or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
        raise ValueError(f"malformed sort {sort!r}: expected KEY, KEY:asc or KEY:desc, "
                         "e.g. accuracy:desc")
    return key, order or "asc"


def _sort_columns(key: str, dialect: str) -> list[ColumnElement[Any]]:
    """What a resolved ``key`` sorts by. JSON fields sort by their JSON value, numbers
    (by value) before strings (by text) in ascending order, the same on SQLite (its
    native order of json_extract values) and PostgreSQL (numbers first, then jsonb
    order); elsewhere as numbers."""
    if key in COLUMNS:
        return [getattr(TrialModel, key)]
    column, name = json_source(key)
    if dialect == "sqlite":
        return [func.json_extract(column, sqlite_path(name))]
    if dialect == "postgresql":
        kind = func.json_typeof(column[name])
        return [case((kind == "number", 0), (kind.is_not(None), 1)), cast(column[name], JSONB)]
    return [column[name].as_float()]


def _order(sort: tuple[str, str] | None, dialect: str) -> list[ColumnElement[Any]]:
    """ORDER BY for a parsed, resolved sort; default: best objective first per study."""
    if sort is None:
        best = case((StudyModel.direction == "minimize", TrialModel.objective),
                    else_=-TrialModel.objective)
        return [best.asc().nulls_last(), StudyModel.name, TrialModel.number]
    key, order = sort
    ordered = [(c.desc() if order == "desc" else c.asc()).nulls_last()
               for c in _sort_columns(key, dialect)]
    return [*ordered, StudyModel.name, TrialModel.number]


def iso_or_none(value: Any) -> str | None:
    """A timestamp as ISO 8601 text, None as None (JSON has no datetime)."""
    return value.isoformat() if value is not None else None


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


class Results:
    """Read access to a results database (see :func:`open`)."""

    def __init__(self, url_or_path: str | Path) -> None:
        self.db = Database(resolve_url(url_or_path), readonly=True)
        try:
            self._check_file()
            self._fields = self._read_schema()
        except BaseException:
            self.db.close()
            raise
        self._dialect = self.db.engine.dialect.name
        self._several = _VALUES in self._fields  # studies of several objectives possible

    def _check_file(self) -> None:
        """For a SQLite file: it exists, starts like a SQLite database (read without
        SQLite, which would take an empty file for an empty database) and, when at rest,
        has our tables (read without leaving ``-wal``/``-shm`` files beside it)."""
        path = is_sqlite_file(self.db.url)
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

    def _read_schema(self) -> tuple[str, ...]:
        """The trial fields this database has (``objective_values`` only where the
        studies table has ``objectives`` too); :class:`ResultsError` if it is not ours
        (no cause) or cannot be read (the driver's error chained)."""
        try:
            inspector = inspect(self.db.engine)
            tables = set(inspector.get_table_names())
            columns = {t: {c["name"] for c in inspector.get_columns(t)}
                       for t in _REQUIRED if t in tables}
        except DatabaseError as e:
            if "file is not a database" in str(e.orig):
                raise _foreign(self.db.label, "not a SQLite database file") from None
            raise ResultsError(f"cannot read {self.db.label}: {e}") from e
        except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
            raise ResultsError(f"cannot read {self.db.label}: {e}") from e
        problem = _missing_tables(tables, columns)
        if problem is not None:
            raise _foreign(self.db.label, problem)
        several = _VALUES in columns["trials"] and "objectives" in columns["studies"]
        return _FIELDS + tuple(name for name in _OPTIONAL if name in columns["trials"]) + \
            ((_VALUES,) if several else ())

    def _objectives(self, session: Any) -> dict[str, tuple[ObjectiveSpec, ...]]:
        """Every study's objectives (one pair for a study of one), by study name."""
        study = StudyModel
        listed = [study.objectives] if self._several else []
        return {row.name: study_objectives(row.objective, row.direction,
                                           row.objectives if listed else None)
                for row in session.execute(select(study.name, study.objective,
                                                  study.direction, *listed))}

    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every study with its settings and trial counts per status, by name; with
        ``name``, that study alone (its best or front is all that is computed), or a
        :class:`ValueError` listing the studies there are.

        ``objectives`` lists each objective (``expression``, ``direction``); a study of
        one has its best objective value in ``best``, a study of several the size of
        its Pareto front in ``front`` (and ``best`` None)."""
        counts: dict[tuple[int, str], int] = {}
        study = StudyModel
        with self.db.session() as s:
            if name is not None:
                self._check_study(s, name)
            chosen = [] if name is None else [study.name == name]
            for study_id, status, n in s.execute(
                    select(TrialModel.study_id, TrialModel.status, func.count())
                    .join(study, TrialModel.study_id == study.id).where(*chosen)
                    .group_by(TrialModel.study_id, TrialModel.status)):
                counts[(study_id, status)] = n
            rows = s.execute(select(study.id, study.name, study.strategy, study.objective,
                                    study.direction, study.created_at, study.updated_at)
                             .where(*chosen).order_by(study.name)).all()
            objectives = self._objectives(s)
            out = []
            for st in rows:
                per_status = {status: counts.get((st.id, status), 0) for status in STATUSES}
                specs = objectives[st.name]
                front = None
                if len(specs) > 1:
                    front, best = len(self._front(s, st.name, specs, range(len(specs)))), []
                else:
                    best = self._select(s, st.name, 1, "ok", [], None)
                out.append({"name": st.name, "strategy": st.strategy,
                            "objective": st.objective, "direction": st.direction,
                            "objectives": [{"expression": text, "direction": way}
                                           for text, way in specs],
                            "trials": sum(per_status.values()), **per_status,
                            "best": best[0]["objective"] if best else None, "front": front,
                            "created_at": iso_or_none(st.created_at),
                            "updated_at": iso_or_none(st.updated_at)})
        return out

    def trials(self, study: str | None = None, top: int | None = None,
               sort: str | None = None, status: str | None = None,
               where: Iterable[str] = (), offset: int = 0) -> list[dict[str, Any]]:
        """Trials as dicts, filtered and sorted in the database.

        ``study`` limits to one study; ``status`` to one status; ``where`` is a list of
        filters (module docstring); ``sort`` is ``KEY[:asc|:desc]`` (default: best
        objective first); ``offset`` skips the first N after sorting and ``top`` keeps
        the first N after that (a page: ``offset=100, top=50``). Malformed arguments, an
        unknown study and an unknown key raise :class:`ValueError` naming the argument
        and what exists or is expected.
        """
        _check_count("top", top, 1)
        _check_count("offset", offset, 0)
        filters = self._filters(status, where)
        parsed_sort = _parse_sort(sort)
        self._check_recorded([parsed_sort[0] if parsed_sort else ""])
        with self.db.session() as s:
            resolved = self._resolved(s, study, filters)
            if parsed_sort is not None:
                parsed_sort = (self._resolver(s)(parsed_sort[0], f"sort {sort!r}"),
                               parsed_sort[1])
            rows = self._select(s, study, top, status, self._clauses(resolved), parsed_sort,
                                offset)
            if not rows:
                self._why_empty(s, study, resolved)
            return rows

    def count(self, study: str | None = None, status: str | None = None,
              where: Iterable[str] = ()) -> int:
        """How many trials :meth:`trials` lists with these arguments (and no ``top``):
        counted in the database, for paging. Raises as :meth:`trials` does."""
        filters = self._filters(status, where)
        with self.db.session() as s:
            resolved = self._resolved(s, study, filters)
            query = _restricted(select(func.count()).select_from(TrialModel)
                                .join(StudyModel, TrialModel.study_id == StudyModel.id),
                                study, status, self._clauses(resolved))
            found = int(s.scalar(query) or 0)
            if not found:
                self._why_empty(s, study, resolved)
            return found

    def _filters(self, status: str | None, where: Iterable[str]) -> list[Filter]:
        """The checked ``status`` and parsed ``where`` of :meth:`trials`."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        filters = [parse_filter(w) for w in where]
        self._check_recorded([f.key for f in filters])
        return filters

    def _resolved(self, session: Any, study: str | None,
                  filters: list[Filter]) -> list[tuple[Filter, str]]:
        """``filters`` with the keys they name resolved (the study checked first, when
        named)."""
        if study is not None:
            self._check_study(session, study)
        resolve = self._resolver(session)
        return [(f, resolve(f.key, f"filter {f.text!r}")) for f in filters]

    def _clauses(self, resolved: list[tuple[Filter, str]]) -> list[ColumnElement[bool]]:
        """The WHERE clauses of resolved filters."""
        return [where_clause(f, key, self._dialect) for f, key in resolved]

    def _why_empty(self, session: Any, study: str | None,
                   resolved: list[tuple[Filter, str]]) -> None:
        """After a query matched nothing: a :class:`ValueError` when a filter compares a
        parameter or metric with a value of a type the trials (of ``study``, or all)
        never hold there, so that it could match nothing."""
        place = f"in study {study!r}" if study is not None else f"in {self.db.label}"
        for f, key in resolved:
            check_kind(session, f, key, self._dialect, study, place)

    def _select(self, session: Any, study: str | None, top: int | None, status: str | None,
                conditions: list[ColumnElement[bool]],
                sort: tuple[str, str] | None, offset: int = 0) -> list[dict[str, Any]]:
        """Run the trials query (arguments already checked and resolved)."""
        columns = [getattr(TrialModel, name) for name in self._fields]
        query = _restricted(select(StudyModel.name.label("study"), *columns)
                            .join(StudyModel, TrialModel.study_id == StudyModel.id)
                            .order_by(*_order(sort, self._dialect)),
                            study, status, conditions)
        if offset:
            query = query.offset(offset)
        if top is not None:
            query = query.limit(top)
        rows = session.execute(query).all()
        objectives = self._objectives(session) if self._several and rows else {}
        return [_trial_dict(row._mapping, objectives.get(row.study, ())) for row in rows]

    def pareto(self, study: str | None = None, objectives: Sequence[str] = (),
               sort: str | None = None, where: Iterable[str] = (),
               top: int | None = None) -> list[dict[str, Any]]:
        """The Pareto front of a study of several objectives: its ``ok`` trials that no
        other ``ok`` trial of the study dominates (:func:`pareto_front`), as
        :meth:`trials` gives them.

        ``study`` names the study (default: every study of several objectives, each
        its own front); ``objectives`` the expressions to build the front over (default:
        all of the study's); ``where`` keeps only the trials the front is chosen among;
        ``sort`` orders the front (default: best first in its first objective); ``top``
        keeps the first N. :class:`ValueError`, naming what there is, for a study of one
        objective, a database without a study of several, an objective the study does
        not have, or what :meth:`trials` refuses.
        """
        _check_count("top", top, 1)
        filters = [parse_filter(w) for w in where]
        parsed_sort = _parse_sort(sort)
        self._check_recorded([f.key for f in filters] + [parsed_sort[0] if parsed_sort else ""])
        with self.db.session() as s:
            resolved = self._resolved(s, study, filters)
            specs = self._objectives(s)
            names = [study] if study is not None else \
                sorted(name for name, found in specs.items() if len(found) > 1)
            if study is not None and len(specs[study]) < 2:
                raise ValueError(f"study {study!r} has one objective, {describe(specs[study])}; "
                                 "a Pareto front needs a study of several (the search "
                                 "setting objectives)")
            if not names:
                raise ValueError(f"no study in {self.db.label} has several objectives; a "
                                 "Pareto front needs one (the search setting objectives)")
            if parsed_sort is not None:
                parsed_sort = (self._resolver(s)(parsed_sort[0], f"sort {sort!r}"),
                               parsed_sort[1])
            front = []
            for name in names:
                front += self._front(s, name, specs[name], choose(name, specs[name], objectives),
                                     self._clauses(resolved), parsed_sort)
            if not front:
                self._why_empty(s, study, resolved)
        return front[:top]

    def _front(self, session: Any, study: str, specs: Sequence[ObjectiveSpec],
               chosen: Sequence[int], conditions: list[ColumnElement[bool]] | None = None,
               sort: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """The front of one study of several objectives over the objectives at positions
        ``chosen``, among its ok trials meeting ``conditions``: in ``sort`` order, or
        best first in the first chosen objective."""
        rows = self._select(session, study, None, "ok", conditions or [], sort)
        texts = [specs[i][0] for i in chosen]
        points = [[(row.get("objectives") or {}).get(text) for text in texts] for row in rows]
        front = [rows[i] for i in pareto_front(points, [specs[i][1] for i in chosen])]
        if sort is None:
            text, direction = specs[chosen[0]]
            sign = -1.0 if direction == "maximize" else 1.0
            front.sort(key=lambda row: (sign * row["objectives"][text], row["number"]))
        return front

    def _check_study(self, session: Any, study: str) -> None:
        """A :class:`ValueError` listing the studies when there is no study ``study``."""
        names = list(session.scalars(select(StudyModel.name).order_by(StudyModel.name)))
        if study not in names:
            raise ValueError(f"no study {study!r} in {self.db.label}; its studies: "
                             f"{', '.join(names) or 'none yet'}")

    def _resolver(self, session: Any) -> Any:
        """A function ``(key, what) -> resolved key`` raising a :class:`ValueError` that
        lists the keys there are; the names are read from the database only when some
        key is not a column."""
        found: list[Keys] = []

        def resolve(key: str, what: str) -> str:
            if key in COLUMNS:
                return key
            if not found:
                found.append(self._keys(session))
            resolved = found[0].resolve(key)
            if resolved is None:
                raise _unknown_key(key, what, self.db.label, found[0])
            return resolved
        return resolve

    def keys(self) -> Keys:
        """The keys ``where`` and ``sort`` accept in this database."""
        with self.db.session() as s:
            return self._keys(s)

    def _keys(self, session: Any) -> Keys:
        columns = tuple(c for c in COLUMNS if c not in _OPTIONAL or c in self._fields)
        params = self._json_keys(session, TrialModel.params) | _space_names(session)
        return Keys(columns, frozenset(params),
                    frozenset(self._json_keys(session, TrialModel.metrics)))

    def _json_keys(self, session: Any, column: Any) -> set[str]:
        """The distinct top-level keys of a JSON column over all trials, computed in the
        database where it can (SQLite json_each, PostgreSQL json_object_keys)."""
        if self._dialect == "sqlite":
            each = func.json_each(column).table_valued("key")
            query = (select(each.c.key).select_from(TrialModel).join(each, true())
                     .where(func.json_type(column) == "object").distinct())
        elif self._dialect == "postgresql":
            query = (select(func.json_object_keys(column))
                     .where(func.json_typeof(column) == "object").distinct())
        else:
            return {key for value in session.scalars(select(column))
                    if isinstance(value, dict) for key in value}
        return {str(key) for key in session.scalars(query)}

    def _check_recorded(self, keys: Iterable[str]) -> None:
        """A :class:`ValueError` for a filter or sort on a column this database's schema
        lacks (``attempts`` in a database of an older diel)."""
        for key in keys:
            if key in _OPTIONAL and key not in self._fields:
                raise ValueError(f"{key} is not recorded in {self.db.safe_url} (written by "
                                 "an older diel)")

    def close(self) -> None:
        """Release the connections."""
        self.db.close()

    def __enter__(self) -> "Results":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_count(name: str, value: Any, low: int) -> None:
    """A :class:`ValueError` unless ``value`` (``top``: None allowed) is an int from
    ``low`` to the largest the database stores."""
    if value is None and name == "top":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= LARGEST:
        raise ValueError(f"{name} must be a whole number from {low} to {LARGEST}, "
                         f"got {value!r}")


def _restricted(query: Any, study: str | None, status: str | None,
               conditions: list[ColumnElement[bool]]) -> Any:
    """``query`` (over trials joined with studies) limited to ``study``, ``status`` and
    ``conditions``."""
    if study is not None:
        query = query.where(StudyModel.name == study)
    if status is not None:
        query = query.where(TrialModel.status == status)
    for condition in conditions:
        query = query.where(condition)
    return query


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


def _trial_dict(row: Mapping[str, Any], specs: Sequence[ObjectiveSpec]) -> dict[str, Any]:
    """One selected trial row as the dict :meth:`Results.trials` returns (``attempts``
    after ``worker``, when the schema has it; ``objectives`` after ``objective`` for a
    trial of a study of several, ``specs``)."""
    out = {"study": row["study"], "number": row["number"], "status": row["status"],
           "objective": row["objective"]}
    if len(specs) > 1:
        values = row.get(_VALUES) or []
        out["objectives"] = {text: values[i] if i < len(values) else None
                             for i, (text, _) in enumerate(specs)}
    out.update({"accuracy": row["accuracy"], "loss": row["loss"], "time": row["time"],
                "epoch": row["epoch"], "worker": row["worker"]})
    if "attempts" in row:
        out["attempts"] = row["attempts"]
    out.update({"params": dict(row["params"] or {}), "metrics": dict(row["metrics"] or {})})
    if "queued_at" in row:
        out["queued_at"] = iso_or_none(row["queued_at"])
    out.update({"started_at": iso_or_none(row["started_at"]),
                "finished_at": iso_or_none(row["finished_at"]), "error": row["error"]})
    return out


def open(url_or_path: str | Path) -> Results:  # noqa: A001 - the API is diel.results.open
    """Open a results database for reading: a SQLAlchemy URL or a SQLite file path.

    Raises :class:`ResultsError` when the file does not exist or holds no results.
    """
    return Results(url_or_path)
