"""Reading results: :func:`open` a database and list studies and trials as plain dicts.

Filters (``where``) are strings ``KEY OP VALUE`` with OP one of ``= != < <= > >=``.
KEY is a trial column (``number status objective accuracy loss time epoch worker
attempts``), ``params.NAME`` or ``metrics.NAME`` (extra metrics), or a bare parameter
name. They are turned into SQLAlchemy expressions, so every value (and every JSON key)
reaches the database as a bound parameter, never as SQL text.

Reading never writes (the database is opened read-only) and works on every schema
version: trials are selected column by column, and ``attempts`` (schema 2) only where
the table has it. A database of schema 1 is read as it is, never upgraded; its trial
dicts have no ``attempts`` key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from sqlalchemy import case, func, inspect, select
from sqlalchemy.sql.elements import ColumnElement

from diel.errors import ResultsError
from diel.results._database import Database, is_sqlite_file, resolve_url
from diel.results._models import STATUSES, StudyModel, TrialModel

__all__ = ["Results", "open", "parse_filter", "Filter", "COLUMNS"]

COLUMNS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
           "attempts")
_NUMERIC = {"number", "objective", "accuracy", "loss", "time", "epoch", "worker", "attempts"}
_FIELDS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch", "worker",
           "params", "metrics", "started_at", "finished_at", "error")  # in every schema
_OPTIONAL = ("attempts",)  # schema 2 on
_FILTER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*$")
_FORM = "expected KEY OP VALUE with OP one of = != < <= > >=, e.g. 'lr<0.01' or 'activation=relu'"


@dataclass(frozen=True)
class Filter:
    """One parsed ``where`` filter: ``key op value`` (value a float or a string)."""

    text: str
    key: str
    op: str
    value: float | str


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_filter(text: str) -> Filter:
    """Parse ``KEY OP VALUE``; :class:`ValueError` naming ``text`` and the form if bad."""
    match = _FILTER.match(text)
    if not match or not match.group(3) or match.group(3)[0] in "<>=!":
        raise ValueError(f"malformed filter {text!r}: {_FORM}")
    key, op, raw = match.groups()
    raw = raw.strip("'\"") if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"" else raw
    number = _number(raw)
    if op in ("<", "<=", ">", ">=") and number is None:
        raise ValueError(f"malformed filter {text!r}: {op} needs a number, got {raw!r}")
    if key in _NUMERIC and number is None:
        raise ValueError(f"malformed filter {text!r}: {key} is a number, got {raw!r}")
    if key == "status" and raw not in STATUSES:
        raise ValueError(f"malformed filter {text!r}: status is one of {', '.join(STATUSES)}")
    if key in ("params", "metrics") or key.endswith("."):
        raise ValueError(f"malformed filter {text!r}: name the field, e.g. params.lr")
    return Filter(text, key, op, raw if number is None or key == "status" else number)


def _column(key: str, numeric: bool) -> ColumnElement[Any]:
    """The SQL expression for ``key``: a column or a JSON field (key bound, not inlined)."""
    if key in COLUMNS:
        return getattr(TrialModel, key)
    source, name = (key.split(".", 1) if key.startswith(("params.", "metrics."))
                    else ("params", key))
    field = getattr(TrialModel, source)[name]
    return field.as_float() if numeric else field.as_string()


def _condition(f: Filter) -> ColumnElement[bool]:
    column = _column(f.key, isinstance(f.value, float))
    return {"=": column.__eq__, "!=": column.__ne__, "<": column.__lt__, "<=": column.__le__,
            ">": column.__gt__, ">=": column.__ge__}[f.op](f.value)


def _sort(sort: str | None, dialect: str) -> list[ColumnElement[Any]]:
    """ORDER BY for ``KEY[:asc|:desc]``; default: best objective first for each study.

    JSON fields sort by their native JSON value on SQLite (numbers and strings both
    order sensibly) and as numbers elsewhere.
    """
    if not sort:
        best = case((StudyModel.direction == "minimize", TrialModel.objective),
                    else_=-TrialModel.objective)
        return [best.asc().nulls_last(), StudyModel.name, TrialModel.number]
    key, _, order = sort.partition(":")
    if order not in ("", "asc", "desc") or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
        raise ValueError(f"malformed sort {sort!r}: expected KEY, KEY:asc or KEY:desc, "
                         "e.g. accuracy:desc")
    column = _column(key, numeric=True)
    if key not in COLUMNS and dialect == "sqlite":
        source, name = (key.split(".", 1) if key.startswith(("params.", "metrics."))
                        else ("params", key))
        column = func.json_extract(getattr(TrialModel, source), f'$."{name}"')
    ordered = column.desc() if order == "desc" else column.asc()
    return [ordered.nulls_last(), StudyModel.name, TrialModel.number]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


class Results:
    """Read access to a results database (see :func:`open`)."""

    def __init__(self, url_or_path: str | Path) -> None:
        url = resolve_url(url_or_path)
        sqlite_file = is_sqlite_file(url)
        if sqlite_file is not None and not sqlite_file.is_file():
            raise ResultsError(f"no results database at {sqlite_file}")
        self.db = Database(url, readonly=True)
        try:
            inspector = inspect(self.db.engine)
            tables = set(inspector.get_table_names())
            columns = ({c["name"] for c in inspector.get_columns("trials")}
                       if "trials" in tables else set())
        except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
            self.db.close()
            raise ResultsError(f"cannot read {self.db.safe_url}: {e}") from e
        if not {"studies", "trials"} <= tables:
            self.db.close()
            raise ResultsError(f"{self.db.safe_url} is not a diel results database "
                               "(no studies/trials tables)")
        self._fields = _FIELDS + tuple(name for name in _OPTIONAL if name in columns)

    def studies(self) -> list[dict[str, Any]]:
        """Every study with its settings and trial counts per status, by name."""
        counts: dict[tuple[int, str], int] = {}
        with self.db.session() as s:
            for study_id, status, n in s.execute(
                    select(TrialModel.study_id, TrialModel.status, func.count())
                    .group_by(TrialModel.study_id, TrialModel.status)):
                counts[(study_id, status)] = n
            rows = s.scalars(select(StudyModel).order_by(StudyModel.name)).all()
        out = []
        for st in rows:
            per_status = {status: counts.get((st.id, status), 0) for status in STATUSES}
            best = self.trials(study=st.name, top=1, status="ok")
            out.append({"name": st.name, "strategy": st.strategy, "objective": st.objective,
                        "direction": st.direction, "trials": sum(per_status.values()),
                        **per_status, "best": best[0]["objective"] if best else None,
                        "created_at": _iso(st.created_at), "updated_at": _iso(st.updated_at)})
        return out

    def trials(self, study: str | None = None, top: int | None = None,
               sort: str | None = None, status: str | None = None,
               where: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Trials as dicts, filtered and sorted in the database.

        ``study`` limits to one study; ``status`` to one status; ``where`` is a list of
        filters (module docstring); ``sort`` is ``KEY[:asc|:desc]`` (default: best
        objective first); ``top`` keeps the first N. Malformed arguments raise
        :class:`ValueError` naming the argument and the expected form.
        """
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise ValueError(f"top must be a positive integer, got {top!r}")
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        filters = [parse_filter(w) for w in where]
        self._check_recorded([f.key for f in filters] + [(sort or "").partition(":")[0]])
        columns = [getattr(TrialModel, name) for name in self._fields]
        query = (select(StudyModel.name.label("study"), *columns)
                 .join(StudyModel, TrialModel.study_id == StudyModel.id)
                 .order_by(*_sort(sort, self.db.engine.dialect.name)))
        if study is not None:
            query = query.where(StudyModel.name == study)
        if status is not None:
            query = query.where(TrialModel.status == status)
        for f in filters:
            query = query.where(_condition(f))
        if top is not None:
            query = query.limit(top)
        with self.db.session() as s:
            return [_trial_dict(row._mapping) for row in s.execute(query)]

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


def _trial_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """One selected trial row as the dict :meth:`Results.trials` returns (``attempts``
    after ``worker``, when the schema has it)."""
    out = {"study": row["study"], "number": row["number"], "status": row["status"],
           "objective": row["objective"], "accuracy": row["accuracy"], "loss": row["loss"],
           "time": row["time"], "epoch": row["epoch"], "worker": row["worker"]}
    out.update({name: row[name] for name in _OPTIONAL if name in row})
    out.update({"params": dict(row["params"] or {}), "metrics": dict(row["metrics"] or {}),
                "started_at": _iso(row["started_at"]), "finished_at": _iso(row["finished_at"]),
                "error": row["error"]})
    return out


def open(url_or_path: str | Path) -> Results:  # noqa: A001 - the API is diel.results.open
    """Open a results database for reading: a SQLAlchemy URL or a SQLite file path.

    Raises :class:`ResultsError` when the file does not exist or holds no results.
    """
    return Results(url_or_path)
