"""Rendering result rows as an aligned text table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Sequence

__all__ = ["format_trials", "format_studies", "FORMATS"]

FORMATS = ("table", "csv", "json")
_TRIAL_COLUMNS = ("number", "status", "objective", "accuracy", "loss", "time", "epoch",
                  "worker")
_STUDY_COLUMNS = ("name", "strategy", "direction", "objective", "trials", "ok", "failed",
                  "pruned", "running", "best", "updated_at")
_ERROR_WIDTH = 60


def _names(rows: Sequence[dict[str, Any]], field: str) -> list[str]:
    """The keys of ``row[field]`` over all rows, in first-seen order."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row[field]))
    return list(names)


def _retried(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether some trial was dispatched more than once (run again after a crash)."""
    return any((row.get("attempts") or 1) > 1 for row in rows)


def _flatten(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Trial rows as a header and value lists: fixed columns, params, extra metrics.
    ``attempts`` follows ``worker`` only when some trial was run more than once, so the
    usual output (every trial dispatched once, or a database without the column) keeps
    its columns. Trials of studies of several objectives add a column per objective
    after ``objective`` (``objectives.EXPR`` where ``EXPR`` names another column), and
    replace ``objective`` (their first objective's value) when every row has them."""
    with_study = len({row["study"] for row in rows}) > 1
    fixed = (["study"] if with_study else []) + list(_TRIAL_COLUMNS)
    if _retried(rows):
        fixed.insert(fixed.index("worker") + 1, "attempts")
    several = [row for row in rows if "objectives" in row]
    if several and len(several) == len(rows):
        fixed.remove("objective")
    objectives = _names(several, "objectives")
    params, metrics = _names(rows, "params"), _names(rows, "metrics")
    taken = set(fixed) | set(params) | set(metrics)
    at = fixed.index("status") + 1 + ("objective" in fixed)
    header = fixed[:at] + [o if o not in taken else f"objectives.{o}" for o in objectives] \
        + fixed[at:]
    header += [p if p not in fixed else f"params.{p}" for p in params]
    header += [m if m not in header else f"metrics.{m}" for m in metrics] + ["error"]
    table = [[row[c] for c in fixed[:at]]
             + [row.get("objectives", {}).get(o) for o in objectives]
             + [row[c] for c in fixed[at:]] + [row["params"].get(p) for p in params]
             + [row["metrics"].get(m) for m in metrics] + [row["error"]] for row in rows]
    return header, table


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    """Plain aligned columns: numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)
               for i in range(len(header))]
    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])]
                     + [line(r) for r in cells])


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue().rstrip("\n")


def format_trials(rows: Sequence[dict[str, Any]], fmt: str = "table") -> str:
    """Trial dicts from :meth:`Results.trials` as ``table``, ``csv`` or ``json`` text."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2, default=str)
    header, table = _flatten(rows)
    if fmt == "csv":
        return _csv(header, table)
    for row in table:  # a table shows the last line of an error, shortened
        if row[-1]:
            last = row[-1].strip().splitlines()[-1]
            row[-1] = last if len(last) <= _ERROR_WIDTH else last[:_ERROR_WIDTH - 3] + "..."
    return _table(header, table)


def format_studies(rows: Sequence[dict[str, Any]], fmt: str = "table") -> str:
    """Study dicts from :meth:`Results.studies` as ``table``, ``csv`` or ``json`` text.
    A study of several objectives shows them all, comma-separated, in ``objective`` and
    ``direction``, and a ``front`` column (its Pareto front's size) follows ``best``; a
    ``paused`` column follows ``pruned`` when some study has paused trials, and a
    ``checkpoints`` column (the disk its kept checkpoints use, as ``12.5 MB``; bytes in
    csv) precedes ``updated_at`` when some study keeps checkpoints."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2, default=str)
    header = list(_STUDY_COLUMNS)
    if any(row.get("paused") for row in rows):
        header.insert(header.index("pruned") + 1, "paused")
    if any(row.get("front") is not None for row in rows):
        header.insert(header.index("best") + 1, "front")
    if any(row.get("checkpoint_bytes") for row in rows):
        header.insert(header.index("updated_at"), "checkpoints")
    table = [[_study_cell(row, c, fmt == "csv") for c in header] for row in rows]
    return (_csv if fmt == "csv" else _table)(header, table)


def _bytes(count: int) -> str:
    """``12.5 MB``: a size in decimal units, as ``du -h --si`` shows it."""
    size, unit = float(count), "B"
    for bigger in ("kB", "MB", "GB", "TB"):
        if size < 1000:
            break
        size, unit = size / 1000, bigger
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"


def _study_cell(row: dict[str, Any], column: str, csv: bool = False) -> Any:
    """One cell of the studies table: ``objective`` and ``direction`` list every
    objective of a study of several."""
    specs = row.get("objectives") or []
    if column == "checkpoints":
        return row.get("checkpoint_bytes", 0) if csv else _bytes(row.get("checkpoint_bytes", 0))
    if column in ("objective", "direction") and len(specs) > 1:
        return ", ".join(o["expression" if column == "objective" else "direction"]
                         for o in specs)
    return row.get(column)
