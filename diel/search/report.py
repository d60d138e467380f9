"""The final report's table: the columns that matter first, as many as the terminal holds.

``number``, the objective (with several objectives, each of them) and the searched
parameters come first; then the trial's other values (``accuracy``, ``loss``, ``time``,
``epoch``, ``worker``, its fixed parameters, its other metrics) while they fit in
``width`` columns; ``error`` only when some trial has one. A row is never wider than
``width`` unless the first columns alone are; what is left out is in ``diel results``,
whose command the report names (:func:`more_line`).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

__all__ = ["trial_table", "more_line"]

GAP = "  "   # between two columns
OTHER_COLUMNS = ("accuracy", "loss", "time", "epoch", "worker")
ERROR_CHARS = 60   # of an error's text in a cell, as ``diel results`` shows it


def trial_table(rows: Sequence[dict[str, Any]], searched: Sequence[str],
                objectives: Sequence[str] | None, width: int) -> tuple[str, int]:
    """``rows`` (trial dicts as :meth:`~diel.results.Storage.trials` gives them) as an
    aligned table at most ``width`` columns wide, and how many columns were left out.
    ``searched``: the space's parameter names; ``objectives``: the expressions of a
    study of several objectives (None: one, the ``objective`` column)."""
    first: list[tuple[str, Any]] = [("number", lambda r: r["number"])]
    if objectives is None:
        first.append(("objective", lambda r: r["objective"]))
    else:
        first += [(text, lambda r, t=text: (r.get("objectives") or {}).get(t))
                  for text in objectives]
    params = [name for name in searched if any(name in r["params"] for r in rows)]
    fixed = [name for r in rows for name in r["params"] if name not in searched]
    metrics = [name for r in rows for name in r["metrics"]]
    rest: list[tuple[str, Any]] = \
        [(name, lambda r, n=name: r["params"].get(n)) for name in params] + \
        [(name, lambda r, n=name: r.get(n)) for name in OTHER_COLUMNS] + \
        [(name, lambda r, n=name: r["params"].get(n)) for name in dict.fromkeys(fixed)] + \
        [(name, lambda r, n=name: r["metrics"].get(n)) for name in dict.fromkeys(metrics)]
    if any(r.get("error") for r in rows):
        rest.append(("error", lambda r: r.get("error")))
    columns = [_column(name, [value(r) for r in rows]) for name, value in first]
    shown = {name for name, _ in first}
    used = sum(len(c[0]) for c in columns) + len(GAP) * (len(columns) - 1)
    left_out = 0
    for name, value in rest:
        if name in shown:
            continue
        shown.add(name)
        column = _column(name, [value(r) for r in rows])
        if left_out or used + len(GAP) + len(column[0]) > width:
            left_out += 1
            continue
        columns.append(column)
        used += len(GAP) + len(column[0])
    lines = [GAP.join(cells[i] for cells in columns).rstrip()
             for i in range(len(rows) + 2)]
    return "\n".join(lines), left_out


def _column(name: str, values: list[Any]) -> list[str]:
    """A column's lines (header, rule, one a row), padded to one width: numbers to the
    right, text to the left."""
    cells = [_cell(v) for v in values]
    size = max([len(name)] + [len(c) for c in cells])
    numeric = all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
                  for v in values)
    pad = str.rjust if numeric else str.ljust
    return [pad(name, size), "-" * size] + [pad(c, size) for c in cells]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = " ".join(str(value).split())   # an error's lines on one line
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 3] + "..."


def more_line(url: str, study: str, top: int | None, several: bool) -> str:
    """The ``diel results`` command that lists the reported trials with every column:
    the best ``top`` ok trials, or with ``several`` objectives the Pareto front."""
    target = url
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        relative = os.path.relpath(path)
        target = relative if len(relative) < len(path) else path
    which = "--pareto" if several else "--status ok"
    top_option = f" --top {top}" if top is not None else ""
    return f"more: diel results {target} --study {study} {which}{top_option}"
