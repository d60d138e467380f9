"""Rendering a trial's lineage (its :class:`~diel.results.Segment` list, as
:meth:`Results.lineage` gives it) as text that reads at 80 columns, CSV or JSON: the
schedule ``diel results --lineage TRIAL`` prints.

A table line is a segment: the steps it spans, the checkpoint it was copied from (its
parent trial and step; ``own`` and the step where the trial went on from its own state
with new parameters; blank for its first) and the parameters that changed
(the first segment's are all its parameters), wrapped under their column when they do
not fit. CSV has a row a segment with every parameter in a column of its own; JSON the
segments as objects.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any, Sequence

from diel.results._format import _cell, _csv
from diel.results._storage import Segment

__all__ = ["format_lineage", "changed_params"]

WIDTH = 80       # the terminal a schedule must read in
_NARROWEST = 24  # the parameters column never gets narrower than this
_HEADER = ("from", "to", "parent")


def changed_params(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``after`` that differ from ``before`` (None: the first segment,
    all of them); a parameter ``after`` lacks is given as None."""
    if before is None:
        return dict(after)
    changed = {name: value for name, value in after.items()
               if name not in before or before[name] != value}
    changed.update({name: None for name in before if name not in after})
    return changed


def _changes(segments: Sequence[Segment]) -> list[str]:
    """Each segment's changed parameters as ``name=value, ...`` text."""
    out = []
    for i, segment in enumerate(segments):
        changed = changed_params(segments[i - 1].params if i else None, segment.params)
        out.append(", ".join(f"{name}={_value(value)}" for name, value in changed.items())
                   or "(none)")
    return out


def _value(value: Any) -> str:
    """A parameter's value as the table shows it (``unset`` for one a segment lacks)."""
    if value is None:
        return "unset"
    if isinstance(value, float):
        return _cell(value)
    return value if isinstance(value, str) else json.dumps(value)


def _parent(segment: Segment) -> str:
    """Whose checkpoint a segment went on from: ``trial 3 step 8``, ``own step 8`` (new
    parameters on the trial's own state: its donor's checkpoint was gone), or blank."""
    if segment.parent_trial is None:
        return ""
    step = "" if segment.parent_step is None else f" step {segment.parent_step}"
    who = "own" if segment.parent_trial == segment.trial else f"trial {segment.parent_trial}"
    return f"{who}{step}"


def _table(segments: Sequence[Segment], study: str, number: int) -> str:
    if not segments:
        return f"trial {number} of study {study!r} has no segments: its parameters were " \
               "set once (no population-based training changed them)"
    rows = [[str(s.from_step), "" if s.to_step is None else str(s.to_step), _parent(s)]
            for s in segments]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADER)]
    lead = sum(widths) + 2 * len(widths)
    room = max(_NARROWEST, WIDTH - lead)

    def line(cells: list[str], text: str) -> list[str]:
        fixed = "  ".join([cells[0].rjust(widths[0]), cells[1].rjust(widths[1]),
                           cells[2].ljust(widths[2])]) + "  "
        wrapped = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
        return [(fixed + wrapped[0]).rstrip()] + [" " * lead + more for more in wrapped[1:]]

    count = f"{len(segments)} segment{'' if len(segments) == 1 else 's'}"
    out = [f"trial {number} of study {study!r}: {count}", *line(list(_HEADER), "parameters"),
           *line(["-" * w for w in widths], "-" * min(room, 10))]
    for cells, text in zip(rows, _changes(segments)):
        out += line(cells, text)
    return "\n".join(out)


def format_lineage(segments: Sequence[Segment], fmt: str, study: str, number: int) -> str:
    """Trial ``number`` of ``study``'s segments as ``table``, ``csv`` or ``json`` text (see
    the module docstring)."""
    if fmt == "json":
        return json.dumps([dataclasses.asdict(s) for s in segments], indent=2, default=str)
    if fmt == "csv":
        names: dict[str, None] = {}
        for segment in segments:
            names.update(dict.fromkeys(segment.params))
        header = ["trial", "index", "from_step", "to_step", "parent_trial", "parent_step",
                  *names]
        return _csv(header, [[s.trial, s.index, s.from_step, s.to_step, s.parent_trial,
                              s.parent_step, *(s.params.get(n) for n in names)]
                             for s in segments])
    return _table(segments, study, number)
