"""One study, read for plotting: its objectives, how each parameter is drawn, its trials
and (for the learning curves) their per-epoch metrics.

Everything is read through the read-only reader (:func:`diel.results.open`), in one read
transaction (:meth:`~diel.results.Results.snapshot`): the trials with
:meth:`~diel.results.Results.trials`, the study's stored settings with
:meth:`~diel.results.Results.config`, the epoch reports with
:meth:`~diel.results.Results.epochs` and the trials' segments (their lineage) with
:meth:`~diel.results.Results.segments`, so plotting never writes.

A parameter is drawn on one of four kinds of axis (:class:`Axis`), chosen from the kind
the study's stored search space gives it: ``logrange`` and ``loguniform`` on a log
scale, ``int`` (and a ``range`` of whole numbers) with whole-number ticks, ``values``
and ``choice`` by what they hold (numbers on a numeric axis, anything else as
categories in the space's order), ``uniform`` and other ranges on a linear axis. A
parameter the stored space does not describe is judged by the values the trials hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from diel.results import Results, Segment

__all__ = ["Axis", "Study", "load_study", "choose_study", "SCALES"]

SCALES = ("linear", "log", "int", "categorical")
_LOG_KINDS = ("logrange", "loguniform")
_LISTED_KINDS = ("values", "choice")
_KINDS = ("values", "range", "logrange", "uniform", "loguniform", "int", "choice")


@dataclass(frozen=True)
class Axis:
    """How one parameter is drawn: ``scale`` is one of :data:`SCALES`; a categorical
    axis has its categories' labels in ``choices`` and places a value at its index."""

    name: str
    scale: str
    choices: tuple[Any, ...] = ()

    def position(self, value: Any) -> float | None:
        """Where ``value`` goes on this axis (None: it cannot be drawn here)."""
        if self.scale == "categorical":
            return float(self.choices.index(value)) if value in self.choices else None
        if not _is_number(value) or (self.scale == "log" and value <= 0):
            return None
        return float(value)

    def labels(self) -> list[str]:
        """The tick labels of a categorical axis, one per choice."""
        return [_label(choice) for choice in self.choices]

    def describe(self) -> dict[str, Any]:
        """The axis as plain data: name, scale and, when categorical, its labels."""
        out: dict[str, Any] = {"name": self.name, "scale": self.scale}
        if self.scale == "categorical":
            out["choices"] = self.labels()
        return out


@dataclass(frozen=True)
class Study:
    """A study as the plots need it. ``trials`` are dicts as
    :meth:`diel.results.Results.trials` gives them, by trial number; ``epochs`` maps a
    trial number to its epoch reports (epoch -> metrics), ``segments`` to its segments
    (the parameter sets it ran with), when they were asked for. A parameter's axis
    covers the values its trials and their segments hold."""

    name: str
    strategy: str
    objectives: tuple[tuple[str, str], ...]
    axes: tuple[Axis, ...]
    trials: tuple[dict[str, Any], ...]
    epochs: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    segments: dict[int, list[Segment]] = field(default_factory=dict)

    def count(self, *statuses: str) -> int:
        """How many trials have one of ``statuses``."""
        return sum(1 for trial in self.trials if trial["status"] in statuses)


def choose_study(results: Results, name: str | None) -> dict[str, Any]:
    """The study ``name`` as :meth:`Results.studies` lists it, or the only study when
    ``name`` is None; :class:`ValueError` naming the studies there are otherwise."""
    if name is not None:
        return results.studies(name)[0]
    studies = results.studies()
    if len(studies) == 1:
        return studies[0]
    if not studies:
        raise ValueError(f"{results.label} has no study yet")
    raise ValueError(f"{results.label} has {len(studies)} studies "
                     f"({', '.join(study['name'] for study in studies)}); choose one with --study")


def load_study(results: Results, name: str | None = None, epochs: bool = False,
               segments: bool = False) -> Study:
    """Read study ``name`` (default: the only one) from the open reader ``results``;
    with ``epochs`` its trials' per-epoch metrics too, with ``segments`` their
    segments. :class:`ValueError` for a study the database does not have (naming those
    it has)."""
    with results.snapshot():
        listed = choose_study(results, name)
        name = listed["name"]
        trials = sorted(results.trials(study=name), key=lambda trial: trial["number"])
        config = results.config(name)
        reports = results.epochs(name) if epochs else {}
        lineage = results.segments(name) if segments else {}
    objectives = tuple((o["expression"], o["direction"]) for o in listed["objectives"])
    space = config.get("space")
    sets = [trial["params"] for trial in trials] + \
        [segment.params for found in lineage.values() for segment in found]
    return Study(name, listed["strategy"], objectives, _axes(space, sets), tuple(trials),
                 reports, lineage)


def _axes(space: Any, sets: Sequence[dict[str, Any]]) -> tuple[Axis, ...]:
    """One axis per parameter: the stored space's in its order, then any other name the
    parameter ``sets`` (of the trials and their segments) hold (a space that changed
    between runs, or one its trials discovered as they ran), alphabetically."""
    specs = space if isinstance(space, dict) else {}
    names = list(specs) + sorted({name for params in sets for name in params} - set(specs))
    return tuple(_axis(name, specs.get(name), [params[name] for params in sets
                                               if name in params])
                 for name in names)


def _axis(name: str, spec: Any, seen: list[Any]) -> Axis:
    """The axis of parameter ``name`` from its stored ``spec`` and the values ``seen``."""
    kind = next((key for key in spec if key in _KINDS), None) if isinstance(spec, dict) else None
    numbers = all(_is_number(value) for value in seen)
    if numbers and kind in _LOG_KINDS and all(value > 0 for value in seen):
        return Axis(name, "log")
    if numbers and (kind == "int" or (kind == "range" and _whole(spec["range"], spec.get("step")))):
        return Axis(name, "int")
    listed = list(spec[kind]) if kind in _LISTED_KINDS and isinstance(spec[kind], list) else []
    if numbers and all(_is_number(value) for value in listed):
        if kind in ("uniform", "range", *_LOG_KINDS):
            return Axis(name, "linear")
        whole = all(isinstance(value, int) for value in [*listed, *seen])
        return Axis(name, "int" if whole and (listed or seen) else "linear")
    return Axis(name, "categorical", _choices(listed, seen))


def _choices(listed: list[Any], seen: list[Any]) -> tuple[Any, ...]:
    """The categories: the space's, in its order, then values only the trials hold, in
    the order they first appear."""
    out: list[Any] = []
    for value in [*listed, *seen]:
        if value not in out:
            out.append(value)
    return tuple(out)


def _whole(bounds: Any, step: Any) -> bool:
    values = [*bounds, step] if isinstance(bounds, list) else []
    return bool(values) and all(isinstance(value, int) and not isinstance(value, bool)
                                for value in values)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _label(value: Any) -> str:
    """How a category is written: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
