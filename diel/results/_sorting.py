"""``sort`` (``KEY[:asc|:desc]``): parsed, and compiled to an ORDER BY. The same rules
serve ``diel results --sort``, ``Results.trials(sort=...)`` and the dashboard's table.

A trial column sorts as it is; a parameter or metric by its JSON value, numbers (by
value) before strings (by text) in ascending order, the same on SQLite (its native
order of ``json_extract`` values) and PostgreSQL (numbers first, then jsonb order);
elsewhere as numbers. Trials without a value come last either way; the default is best
objective first in each study (by its direction).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import case, cast, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

from diel.results._filters import json_source, sqlite_path
from diel.results._keys import COLUMNS
from diel.results._models import StudyModel, TrialModel

__all__ = ["parse_sort", "order_by"]


def parse_sort(sort: str | None) -> tuple[str, str] | None:
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
    """What a resolved ``key`` sorts by (module docstring)."""
    if key in COLUMNS:
        return [getattr(TrialModel, key)]
    column, name = json_source(key)
    if dialect == "sqlite":
        return [func.json_extract(column, sqlite_path(name))]
    if dialect == "postgresql":
        kind = func.json_typeof(column[name])
        return [case((kind == "number", 0), (kind.is_not(None), 1)), cast(column[name], JSONB)]
    return [column[name].as_float()]


def order_by(sort: tuple[str, str] | None, dialect: str) -> list[ColumnElement[Any]]:
    """ORDER BY for a parsed, resolved sort; default: best objective first per study."""
    if sort is None:
        best = case((StudyModel.direction == "minimize", TrialModel.objective),
                    else_=-TrialModel.objective)
        return [best.asc().nulls_last(), StudyModel.name, TrialModel.number]
    key, order = sort
    ordered = [(c.desc() if order == "desc" else c.asc()).nulls_last()
               for c in _sort_columns(key, dialect)]
    return [*ordered, StudyModel.name, TrialModel.number]
