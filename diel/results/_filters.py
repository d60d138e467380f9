"""``where`` filters (``KEY OP VALUE``): parsed, checked against what the key holds, and
compiled to SQLAlchemy expressions in which every value and JSON key is a bound
parameter, never SQL text. The same rules serve ``diel results --where``,
``Results.trials(where=...)`` and the dashboard's filter box.

OP is one of ``= != < <= > >=``. VALUE is read so that it says what it means:

- ``"text"`` or ``'text'``: a string, the one pair of quotes around it removed and any
  quote inside kept (``name="it's"`` is ``it's``, ``batch="16"`` the string ``16``). A
  value that opens a quote must end with the same quote.
- unquoted, a value means what it means in a workflow file (YAML 1.2's core schema,
  :mod:`diel.executive.yaml12`), so a filter reads a parameter as the workflow wrote it:
  ``true``/``false`` (also ``True``, ``FALSE``) are the JSON booleans; ``null`` (also
  ``Null``, ``NULL``, ``~``) is no value (``KEY=null`` keeps the trials where KEY is
  missing or null, ``KEY!=null`` those where it has one); a number is a number: ``16``,
  ``-3``, ``0.5``, ``.5``, ``1e-3``, ``5e+2``, ``1_000``, ``0x1F``, ``0o17``, ``.inf``,
  and ``inf``, ``-inf``, ``Infinity`` as Python writes them. A whole number is compared exactly within
  64 bits and as a float beyond (``number<1e400`` and a 40-digit integer are ordinary
  comparisons). ``.nan`` is refused: NaN equals nothing, and diel stores a NaN metric as
  null (``loss=null``). Anything else is a string: ``activation=relu``, ``nan``.

A comparison matches only values of its own type: ``batch=16`` matches the number 16,
``batch="16"`` the string ``16``, and ``batch!=16`` the numbers other than 16. ``< <= >
>=`` compare numbers only; booleans and ``null`` take ``=`` and ``!=``. A value of a
type the key never holds is an error naming the key and what it holds, and how to write
the value as that type where it can be (``batch=16`` on a parameter holding the strings
``16`` and ``32``: quote it): for a trial column when the filter is parsed (the
columns hold numbers, ``status`` one of its words), for a parameter or metric from the
values the trials recorded (those of the study, when one is named), looked up only when
a query matched nothing (such a filter matches nothing). A filter thus never matches
nothing silently because of how its value was spelt.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import BigInteger, Float, and_, case, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from diel.results._models import STATUSES, StudyModel, TrialModel
from diel.results._numbers import LARGEST
from diel.executive.yaml12 import resolve_number

__all__ = ["Filter", "parse_filter", "where_clause", "check_kind", "json_source", "sqlite_path",
           "NUMERIC_COLUMNS"]

NUMERIC_COLUMNS = frozenset({"number", "objective", "accuracy", "loss", "time", "epoch",
                             "worker", "attempts"})   # every other column, status, is text
_FILTER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*$")
_FORM = "expected KEY OP VALUE with OP one of = != < <= > >=, e.g. 'lr<0.01' or 'activation=relu'"
_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_ORDERED = ("<", "<=", ">", ">=")
_DECIMAL = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
_INFINITY = {f"{sign}{word}": -math.inf if sign == "-" else math.inf
             for sign in ("", "+", "-") for word in ("inf", "infinity")}   # any case
_WORDS = {**{word: ("boolean", True) for word in ("true", "True", "TRUE")},
          **{word: ("boolean", False) for word in ("false", "False", "FALSE")},
          **{word: ("null", None) for word in ("null", "Null", "NULL", "~")}}
_A = {"number": "a number", "string": "a string", "boolean": "a boolean", "null": "null"}


@dataclass(frozen=True)
class Filter:
    """One parsed ``where`` filter: ``key op value``. ``kind`` is the value's type
    (``number``: an int or a float; ``string``; ``boolean``; ``null``: value None) and
    ``written`` the value as written, quotes included."""

    text: str
    key: str
    op: str
    value: int | float | str | bool | None
    kind: str
    written: str


def _read_value(written: str, text: str) -> tuple[str, Any]:
    """The kind and value of the VALUE ``written`` of filter ``text`` (module docstring)."""
    if written[0] in "'\"":
        if len(written) < 2 or written[-1] != written[0]:
            raise ValueError(f"malformed filter {text!r}: the value opens a quote "
                             f"({written[0]}) but does not end with it")
        return "string", written[1:-1]
    if written in _WORDS:
        return _WORDS[written]
    number = _parse_number(written)
    if number is None:
        return "string", written
    if math.isnan(number):
        raise ValueError(f"malformed filter {text!r}: NaN equals nothing; diel stores a NaN "
                         "as null (KEY=null)")
    return "number", number


def _parse_number(written: str) -> int | float | None:
    """The number an unquoted value stands for (module docstring), else None: an int
    within 64 bits, else a float (infinite past the largest double, never an error)."""
    if written.lower() in _INFINITY:
        return _INFINITY[written.lower()]
    if len(written) > 40 and _DECIMAL.fullmatch(written):   # int() refuses 4,301 digits
        return float(written)
    value = resolve_number(written)
    if isinstance(value, int) and not -LARGEST - 1 <= value <= LARGEST:
        try:
            return float(value)
        except OverflowError:   # a hexadecimal number of a thousand digits
            return math.inf if value > 0 else -math.inf
    return value


def _described(f: Filter) -> str:
    """``f``'s value with its kind, as a message quotes it."""
    return f"the string {f.value!r}" if f.kind == "string" else \
        "null" if f.kind == "null" else f"the {f.kind} {f.written}"


def _plural(kinds: Iterable[str]) -> str:
    return " and ".join(f"{kind}s" for kind in sorted(kinds))


def _respelled(f: Filter, kinds: Iterable[str]) -> str:
    """How to write ``f``'s value as one of the ``kinds`` a key holds ('' when it cannot
    be): quoted to compare text, unquoted to compare a number or boolean."""
    kinds = set(kinds)
    if "string" in kinds and f.kind != "string":
        return f"; quote the value to compare text: {f.key}{f.op}\"{f.written}\""
    if f.kind == "string" and f.value and str(f.value)[0] not in "'\"":
        kind, _ = _read_value(str(f.value), f.text)
        if kind in kinds:
            return f"; write it unquoted to compare {kind}s: {f.key}{f.op}{f.value}"
    return ""


def parse_filter(text: str) -> Filter:
    """Parse ``KEY OP VALUE`` (module docstring); :class:`ValueError` naming ``text`` and
    what is expected if it is malformed or its value cannot be what the trial column KEY
    holds."""
    match = _FILTER.match(text)
    if not match or not match.group(3) or match.group(3)[0] in "<>=!":
        raise ValueError(f"malformed filter {text!r}: {_FORM}")
    key, op, written = match.groups()
    if key in ("params", "metrics") or key.endswith("."):
        raise ValueError(f"malformed filter {text!r}: name the field, e.g. params.lr")
    kind, value = _read_value(written, text)
    f = Filter(text, key, op, value, kind, written)
    if op in _ORDERED and kind != "number":
        raise ValueError(f"malformed filter {text!r}: {op} compares numbers, got "
                         f"{_described(f)}{_respelled(f, ['number'])}")
    if key in NUMERIC_COLUMNS and kind not in ("number", "null"):
        raise ValueError(f"filter {text!r}: {key} is a number, got {_described(f)}"
                         f"{_respelled(f, ['number'])}")
    if key == "status" and (kind != "string" or value not in STATUSES):
        raise ValueError(f"filter {text!r}: status is one of {', '.join(STATUSES)}, got "
                         f"{written}")
    return f


def json_source(key: str) -> tuple[Any, str]:
    """The JSON column and field name of a resolved key ``params.NAME``/``metrics.NAME``."""
    source, _, name = key.partition(".")
    return getattr(TrialModel, source), name


def sqlite_path(name: str) -> str:
    """The SQLite JSON path of the top-level field ``name`` (bound, never inlined)."""
    return f'$."{name}"'


def _json_kind(column: Any, name: str, dialect: str) -> ColumnElement[Any] | None:
    """What field ``name`` of the JSON ``column`` holds: ``'number'``, ``'string'``,
    ``'true'``, ``'false'``, ``'null'``, ``'object'`` or ``'array'``, NULL where the
    field is missing; None for a dialect with no portable test."""
    if dialect == "sqlite":
        found = func.json_type(column, sqlite_path(name))
        return case((found.in_(("integer", "real")), "number"), (found == "text", "string"),
                    else_=found)
    if dialect == "postgresql":
        found = func.json_typeof(column[name])
        return case((found == "boolean", column[name].as_string()), else_=found)
    return None


def _kinds_held(session: Any, key: str, dialect: str, study: str | None) -> set[str]:
    """The kinds of value (``number``, ``string``, ``boolean``, ``object``, ``array``)
    that the trials (of ``study``, when named) hold in the resolved JSON ``key``;
    empty where none holds a value yet or the dialect cannot tell."""
    kind = _json_kind(*json_source(key), dialect)
    if kind is None:
        return set()
    query = select(kind).select_from(TrialModel).distinct()
    if study is not None:
        query = (query.join(StudyModel, TrialModel.study_id == StudyModel.id)
                 .where(StudyModel.name == study))
    return {"boolean" if found in ("true", "false") else found
            for found in session.scalars(query) if found not in (None, "null")}


def check_kind(session: Any, f: Filter, key: str, dialect: str, study: str | None,
               place: str) -> None:
    """A :class:`ValueError` when the trials (of ``study``, when named; ``place`` says
    where, for the message) hold values of the resolved JSON ``key`` but none of
    ``f``'s kind. As a filter matches only values of its own kind, such a filter
    matches nothing: callers ask only when a query matched nothing, to say why."""
    if "." not in key or f.kind == "null":   # a column: parse_filter checked it
        return
    held = _kinds_held(session, key, dialect, study)
    if held and f.kind not in held:
        raise ValueError(f"filter {f.text!r} compares {f.key} with {_A[f.kind]}, but "
                         f"{place} {f.key} holds only {_plural(held)}{_respelled(f, held)}")


def where_clause(f: Filter, key: str, dialect: str) -> ColumnElement[bool]:
    """The WHERE clause of filter ``f`` on the resolved ``key`` (a column, or
    ``params.NAME``/``metrics.NAME``): true only for values of ``f``'s kind."""
    compare = _OPS[f.op]
    if "." not in key:   # a trial column: parse_filter checked the value's kind
        column = getattr(TrialModel, key)
        if f.kind == "null":
            return column.is_(None) if f.op == "=" else column.is_not(None)
        if f.kind == "string":   # status
            return compare(column, f.value)
        # typed as the value, not as the column: PostgreSQL would cast 2**40 to a
        # column's 32-bit integer, and fail
        return compare(column, literal(f.value, BigInteger if isinstance(f.value, int)
                                       else Float))
    column, name = json_source(key)
    kind = _json_kind(column, name, dialect)
    if kind is None:   # no portable type test: compared as written
        if f.kind not in ("number", "string"):
            raise ValueError(f"filter {f.text!r}: {f.written} needs SQLite or PostgreSQL")
        field = column[name].as_float() if f.kind == "number" else column[name].as_string()
        return compare(field, f.value)
    if f.kind == "null":
        return or_(kind.is_(None), kind == "null") if f.op == "=" else \
            and_(kind.is_not(None), kind != "null")
    if f.kind == "boolean":
        return kind == ("true" if f.value == (f.op == "=") else "false")
    field = column[name].as_float() if f.kind == "number" else column[name].as_string()
    return compare(case((kind == f.kind, field)), f.value)
