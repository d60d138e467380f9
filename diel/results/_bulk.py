"""The search master's bulk writes: a statement run with many parameter sets, compiled once
per dialect and the set of keys given, and handed to the driver's ``executemany`` with
each row's values converted by the statement's own type processors.

Why: SQLAlchemy's execution of a compiled statement builds and type-processes every row
in generic code (``construct_params``, a session's bookkeeping), which was most of the
CPU of the master's commit of a pass, itself on the critical path of every trial. Here a
row costs one loop over its values. The SQL, the values bound and the transaction are
the ones SQLAlchemy would use: the statement is compiled by SQLAlchemy for the
connection's dialect, the values go through the same type's bind processor (SQLite's
date-time strings, JSON serialisation; a value that is the very object of the row
before, such as the pass's time in every row, is converted once), and it runs through
:meth:`~sqlalchemy.engine.Connection.exec_driver_sql` on the caller's connection, inside
its transaction, with SQLAlchemy's error wrapping.

Only statements whose every value comes from the rows or the statement itself qualify:
one that needs a default computed in Python (a column left out of an insert, an
``onupdate``) is refused when it is compiled, and so is a parameter that the rows do not
give (SQLAlchemy's "a value is required"), rather than bound as NULL.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import Executable

__all__ = ["run_many"]

_NONE = object()   # no value converted yet


@dataclass(frozen=True)
class _Prepared:
    """A statement compiled for one dialect and one set of row keys: its SQL, the
    names of the parameters it binds in order (``pick`` takes their values from a row,
    as a tuple), the positions whose values its types convert first (SQLite's date-time
    strings, JSON; the driver takes the others as they are), the values it binds itself
    (a literal such as ``status = 'running'``), and whether the driver takes a tuple
    (positional) or a dict of names."""

    sql: str
    names: tuple[str, ...]
    pick: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    processed: tuple[tuple[int, Callable[[Any], Any]], ...]
    fixed: Mapping[str, Any]
    positional: bool


@functools.lru_cache(maxsize=256)   # a few statements a database the process opens
def _prepare(statement: Executable, dialect: Dialect, keys: tuple[str, ...]) -> _Prepared:
    """``statement`` compiled for ``dialect`` with the row keys ``keys`` (an insert's
    columns), once; a statement needing a default computed in Python, or a parameter
    that ``keys`` lack, is refused."""
    compiled = statement.compile(dialect=dialect, column_keys=list(keys))
    if compiled.insert_prefetch or compiled.update_prefetch:   # type: ignore[attr-defined]
        raise ValueError(f"run_many cannot compute the defaults of {compiled.string!r}: "
                         "give every column a value")
    types = {name: bind.type for bind, name in compiled.bind_names.items()}  # type: ignore
    names = tuple(compiled.positiontup if compiled.positional else types)  # type: ignore
    processors = [types[name].dialect_impl(dialect).bind_processor(dialect) for name in names]
    processed = tuple((i, process) for i, process in enumerate(processors) if process is not None)
    pick = operator.itemgetter(*names) if len(names) > 1 else \
        lambda row: (row[names[0]],)   # one name: itemgetter would return the bare value
    fixed: dict[str, Any] = {}   # the values the statement binds itself
    for bind, name in compiled.bind_names.items():  # type: ignore[attr-defined]
        if name not in keys:   # one no row gives is refused, as SQLAlchemy refuses it
            if bind.required:
                raise ValueError(f"run_many: no value for the parameter {name!r} of "
                                 f"{compiled.string!r} (the rows give {', '.join(keys)})")
            fixed[name] = bind.effective_value
    return _Prepared(compiled.string, names, pick, processed, fixed, compiled.positional)


def run_many(conn: Connection, statement: Executable, rows: Sequence[Mapping[str, Any]]) -> None:
    """Execute ``statement`` once for each of ``rows`` (every row with the same keys),
    in ``conn``'s transaction; nothing when there are no rows."""
    if not rows:
        return
    prepared = _prepare(statement, conn.dialect, tuple(rows[0]))
    fixed, pick, processed = prepared.fixed, prepared.pick, prepared.processed
    given: list[Any] = [_NONE] * len(prepared.names)   # by position: the last value converted
    converted: list[Any] = [None] * len(prepared.names)   # and what it was converted to
    params: list[Any] = []
    for row in rows:
        values = list(pick({**fixed, **row} if fixed else row))
        for i, process in processed:
            value = values[i]
            if value is not given[i]:   # the same object as the row before's: converted once
                given[i], converted[i] = value, process(value)
            values[i] = converted[i]
        params.append(tuple(values) if prepared.positional else dict(zip(prepared.names, values)))
    conn.exec_driver_sql(prepared.sql, params)
