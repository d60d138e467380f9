"""What each plot kind shows, built from a :class:`~diel.plot.Study` as plain data.

:func:`figure_data` returns a dict of strings, numbers, lists and dicts (JSON can carry
it as it is), so one function per kind decides what is drawn, and the renderers
(:mod:`diel.plot.render_mpl` for PNG and SVG, :mod:`diel.plot.render_plotly` for HTML)
and a web page only draw it. Every dict has ``kind`` and ``study``; the rest is the
kind's (see each function). Parameter positions are numbers: a categorical parameter's
is the index of its category in the axis's ``choices``.

A kind that has nothing to show raises :class:`ValueError` saying why (a study with no
finished trial, a Pareto front of a study of one objective, ...), never an empty figure.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any, Callable, Sequence

from diel.plot._importance import METHOD, explained, fanova
from diel.plot._kinds import IMPORTANCE_TRIALS
from diel.plot._study import Axis, Study
from diel.results import FINISHED, choose_objectives, describe_objectives, finite_number, \
    pareto_front

__all__ = ["KINDS", "figure_data", "NEEDS_EPOCHS", "NEEDS_SEGMENTS", "IMPORTANCE_TRIALS"]

NEEDS_EPOCHS = ("curves",)   # the kinds that read the trials' per-epoch metrics
NEEDS_SEGMENTS = ("lineage",)   # the kinds that read the trials' segments
DEFAULT_METRICS = ("accuracy", "loss")
_SAMPLE_SEED = 0


def figure_data(study: Study, kind: str, objectives: Sequence[str] = (),
                metrics: Sequence[str] = (),
                importance_trials: int | None = IMPORTANCE_TRIALS) -> dict[str, Any]:
    """The data of plot ``kind`` (one of :data:`KINDS`) of ``study``. ``objectives``
    names the objective to plot (default: the study's first) or, for ``pareto``, the two
    to plot against each other (default: its first two); ``metrics`` the per-epoch
    metrics of ``curves`` (default: accuracy and loss where recorded, else all);
    ``importance_trials`` the most ok trials ``importance`` is computed over (a seeded
    random sample of them past that; None: every one)."""
    if kind not in KINDS:
        raise ValueError(f"unknown plot kind {kind!r}; the kinds are {', '.join(KINDS)}")
    if not study.count(*FINISHED) and kind != "lineage":   # a lineage grows as members run
        running = study.count("running")
        raise ValueError(f"study {study.name!r} has no finished trial yet ({running} running); "
                         "there is nothing to plot")
    if metrics and kind != "curves":
        raise ValueError("--metric chooses the metrics of --kind curves")
    if kind == "curves":
        return curves(study, metrics)
    if kind == "pareto":
        return pareto(study, objectives)
    if kind == "timeline":
        return timeline(study)
    if kind == "lineage":
        return lineage(study, _objective(study, objectives))
    if kind == "importance":
        return importance(study, _objective(study, objectives), importance_trials)
    return KINDS[kind](study, _objective(study, objectives))


def lineage(study: Study, objective: tuple[str, str]) -> dict[str, Any]:
    """Population-based training's lineage, from the trials' segments: ``members`` (each
    trial with segments: number, status, its ``value`` of the objective (None: none)
    and ``segments``: ``from_step``, ``to_step``, ``parent_trial``, ``parent_step``),
    ``edges`` (each exploit: the ``donor`` and its ``donor_step``, the ``member`` and
    the ``step`` it went on from; a member that went on from its own checkpoint with new
    parameters, its donor's being gone, begins a segment and has no edge), ``best`` (the number of the best ``ok`` member, None
    when none has a value) and ``params``: the axis of each parameter whose value
    changed in some member (every parameter when none did), with each member's
    ``schedule``: its ``steps`` and ``values`` (positions on the axis; None where a
    segment lacks the parameter), a step function over its segments."""
    if not any(study.segments.values()):
        raise ValueError(f"no trial of study {study.name!r} records segments (the parameter "
                         "sets it ran with): its database was written before results "
                         "schema 7; a lineage needs a study run since")
    by_number = {trial["number"]: trial for trial in study.trials}
    numbers = sorted(n for n, found in study.segments.items() if found and n in by_number)
    members, edges = [], []
    for number in numbers:
        trial = by_number[number]
        parts = study.segments[number]
        members.append({"number": number, "status": trial["status"],
                        "value": _value(trial, objective[0]),
                        "segments": [{"from_step": s.from_step, "to_step": _end(s),
                                      "parent_trial": s.parent_trial,
                                      "parent_step": s.parent_step} for s in parts]})
        edges += [{"donor": s.parent_trial, "donor_step": s.parent_step,
                   "member": number, "step": s.from_step}
                  for s in parts if s.parent_trial not in (None, number)]
    ranked = [m for m in members if m["status"] == "ok" and m["value"] is not None]
    pick = max if objective[1] == "maximize" else min
    best = pick(ranked, key=lambda m: m["value"])["number"] if ranked else None
    changing = [axis for axis in study.axes
                if any(len({_key(s.params.get(axis.name)) for s in study.segments[n]}) > 1
                       for n in numbers)]
    params = []
    for axis in changing or [a for a in study.axes
                             if any(a.name in s.params for n in numbers
                                    for s in study.segments[n])]:
        schedules = []
        for number in numbers:
            steps: list[int] = []
            values: list[float | None] = []
            for segment in study.segments[number]:
                place = axis.position(segment.params.get(axis.name))
                steps += [segment.from_step, _end(segment)]
                values += [place, place]
            schedules.append({"number": number, "steps": steps, "values": values})
        params.append({**axis.describe(), "schedules": schedules})
    return {**_header(study, "lineage", objective), "members": members, "edges": edges,
            "best": best, "params": params}


def _end(segment: Any) -> int:
    """The last step of a segment (its first, when the trial reported no epoch)."""
    return segment.to_step if segment.to_step is not None else segment.from_step


def _key(value: Any) -> str:
    """A parameter's value as a comparable key (lists and dicts included)."""
    return repr(value)


# -- the objective and the ok trials ----------------------------------------------------
def _objective(study: Study, names: Sequence[str]) -> tuple[str, str]:
    """The one objective to plot: the study's first, or the one ``names`` gives."""
    if len(names) > 1:
        raise ValueError(f"this plot shows one objective; {len(names)} were named")
    return study.objectives[choose_objectives(study.name, study.objectives, names)[0]]


def _value(trial: dict[str, Any], expression: str) -> float | None:
    """The trial's finite value of objective ``expression``, else None."""
    several = trial.get("objectives")
    value = several.get(expression) if isinstance(several, dict) else trial["objective"]
    return _finite_float(value)


def _scored(study: Study, objective: tuple[str, str], what: str,
            statuses: Sequence[str] = ("ok",)) -> list[tuple[dict[str, Any], float]]:
    """The trials of ``statuses`` with a value of ``objective``, by number; a
    :class:`ValueError` naming ``what`` needs when no ``ok`` trial has one."""
    found = [(trial, value) for trial in study.trials if trial["status"] in statuses
             for value in [_value(trial, objective[0])] if value is not None]
    if not any(trial["status"] == "ok" for trial, _ in found):
        counts = ", ".join(f"{study.count(s)} {s}" for s in FINISHED if study.count(s))
        raise ValueError(f"study {study.name!r} has no ok trial with a value of "
                         f"{objective[0]!r} ({counts}); {what} needs one")
    return found


def _header(study: Study, kind: str, objective: tuple[str, str]) -> dict[str, Any]:
    return {"kind": kind, "study": study.name,
            "objective": {"expression": objective[0], "direction": objective[1]}}


def _placed(study: Study, objective: tuple[str, str], what: str, axes: Sequence[Axis],
            every: bool = True,
            ) -> tuple[list[dict[str, Any]], list[float], list[list[float | None]]]:
    """The ok trials with a value and, with ``every``, every parameter of ``axes``
    drawable, else at least one: the trials, their values and their positions on
    ``axes`` (None: a parameter the trial does not have, or cannot be drawn there)."""
    trials, values, points = [], [], []
    for trial, value in _scored(study, objective, what):
        point = [axis.position(trial["params"].get(axis.name)) for axis in axes]
        drawn = [p is not None for p in point]
        if all(drawn) if every else any(drawn):
            trials.append(trial)
            values.append(value)
            points.append(point)
    if not trials:
        raise ValueError(f"no ok trial of study {study.name!r} has a value for "
                         f"{'every' if every else 'any'} parameter "
                         f"({', '.join(a.name for a in axes)}); {what} needs one")
    return trials, values, points


def _shared(study: Study, objective: tuple[str, str], what: str) -> list[Axis]:
    """The axes of the parameters every ok trial with a value of ``objective`` has (a
    conditional parameter, which only some trials have, is not among them);
    :class:`ValueError` when there is none."""
    scored = [trial for trial, _ in _scored(study, objective, what) if trial["status"] == "ok"]
    shared = [axis for axis in study.axes
              if all(axis.position(t["params"].get(axis.name)) is not None for t in scored)]
    if not shared:
        raise ValueError(f"no parameter of study {study.name!r} is set in every ok trial "
                         f"(its trials have different parameters: "
                         f"{', '.join(a.name for a in study.axes)}); {what} needs one")
    return shared


def _axis_data(axis: Axis, positions: list[float]) -> dict[str, Any]:
    return {**axis.describe(), "values": positions}


# -- the kinds ----------------------------------------------------------------------------
def history(study: Study, objective: tuple[str, str]) -> dict[str, Any]:
    """The objective of each finished trial by trial number (``trials``: number, status,
    value; pruned trials too, with the value at the epoch they stopped), and the best
    ``ok`` value so far after each ``ok`` trial (``best``: number, value)."""
    found = _scored(study, objective, "a history plot", ("ok", "pruned"))
    better = max if objective[1] == "maximize" else min
    best: list[dict[str, Any]] = []
    for trial, value in found:
        if trial["status"] == "ok":
            so_far = better(value, best[-1]["value"]) if best else value
            best.append({"number": trial["number"], "value": so_far})
    return {**_header(study, "history", objective),
            "trials": [{"number": t["number"], "status": t["status"], "value": v}
                       for t, v in found],
            "best": best}


def parallel(study: Study, objective: tuple[str, str]) -> dict[str, Any]:
    """Parallel coordinates of the ``ok`` trials: ``axes`` (one per parameter: name,
    scale, categories, each trial's position, None where the trial does not have the
    parameter: a conditional one), ``values`` (each trial's objective) and ``numbers``
    (the trials'). A trial is drawn over the parameters it has."""
    trials, values, points = _placed(study, objective, "a parallel-coordinates plot",
                                     study.axes, every=False)
    return {**_header(study, "parallel", objective),
            "axes": [_axis_data(axis, [p[i] for p in points])
                     for i, axis in enumerate(study.axes)
                     if any(p[i] is not None for p in points)],
            "values": values, "numbers": [t["number"] for t in trials]}


def slices(study: Study, objective: tuple[str, str]) -> dict[str, Any]:
    """The objective against each parameter (one panel a parameter): ``axes``, each with
    the positions (``values``), objective values (``objective_values``) and ``numbers``
    of the ``ok`` trials that have that parameter."""
    found = _scored(study, objective, "a slice plot")
    panels = []
    for axis in study.axes:
        placed = [(t["number"], axis.position(t["params"].get(axis.name)), v) for t, v in found]
        placed = [item for item in placed if item[1] is not None]
        panels.append({**_axis_data(axis, [p for _, p, _ in placed]),
                       "objective_values": [v for _, _, v in placed],
                       "numbers": [n for n, _, _ in placed]})
    return {**_header(study, "slice", objective), "axes": panels}


def importance(study: Study, objective: tuple[str, str],
               most: int | None = IMPORTANCE_TRIALS) -> dict[str, Any]:
    """Each parameter's share of the objective's variance over the ``ok`` trials
    (``importances``: name and importance, largest first; they sum to 1), by fANOVA
    (``method``; :mod:`diel.plot._importance`), and ``explained``, the out-of-bag R² of
    a forest predicting the objective from the parameters (None for fewer than 10
    trials): the shares mean little where it is low. Past ``most`` ok trials (None: no
    bound) it is computed over a seeded random sample of ``most`` of them: ``trials``
    says how many were used, ``ok_trials`` how many there are. It is computed over the
    parameters every ok trial has (as Optuna's importance is); ``left_out`` names the
    others (conditional parameters, which only some trials have)."""
    if most is not None and most < 2:
        raise ValueError(f"parameter importance needs at least 2 trials; {most} were allowed")
    axes = _shared(study, objective, "an importance plot")
    trials, values, points = _placed(study, objective, "an importance plot", axes)
    if len(trials) < 2:
        raise ValueError(f"study {study.name!r} has {len(trials)} ok trial; parameter "
                         "importance needs at least 2")
    if most is not None and len(trials) > most:
        chosen = sorted(random.Random(_SAMPLE_SEED).sample(range(len(trials)), most))
        values, points = [values[i] for i in chosen], [points[i] for i in chosen]
    found = fanova(axes, points, values)
    return {**_header(study, "importance", objective), "method": METHOD,
            "explained": explained(points, values),
            "trials": len(values), "ok_trials": len(trials),
            "left_out": [axis.name for axis in study.axes if axis not in axes],
            "importances": [{"name": name, "importance": value}
                            for name, value in found.items()]}


def curves(study: Study, metrics: Sequence[str] = ()) -> dict[str, Any]:
    """The per-epoch metrics of every trial that reported some: ``metrics`` (the names
    drawn) and ``trials`` (number, status, ``epochs`` and, per metric, its value at each
    epoch or None); pruned trials keep their status so they can be marked."""
    recorded = sorted({name for reports in study.epochs.values()
                       for metrics_of in reports.values() for name in metrics_of})
    if not recorded:
        raise ValueError(f"no trial of study {study.name!r} reported per-epoch metrics "
                         "(a worker reports them with trial.report(epoch, ...))")
    for name in metrics:
        if name not in recorded:
            raise ValueError(f"no trial of study {study.name!r} reported the metric "
                             f"{name!r}; the per-epoch metrics are {', '.join(recorded)}")
    chosen = list(dict.fromkeys(metrics)) or \
        [name for name in DEFAULT_METRICS if name in recorded] or recorded
    trials = []
    for trial in study.trials:
        reports = study.epochs.get(trial["number"])
        if reports:
            epochs = sorted(reports)
            trials.append({"number": trial["number"], "status": trial["status"],
                           "epochs": epochs,
                           "values": {name: [_finite_float(reports[e].get(name)) for e in epochs]
                                      for name in chosen}})
    return {"kind": "curves", "study": study.name, "metrics": chosen, "trials": trials}


def pareto(study: Study, names: Sequence[str] = ()) -> dict[str, Any]:
    """Two objectives of a study of several against each other: ``objectives`` (the two,
    with their directions) and ``trials`` (the ``ok`` trials with both values: number,
    ``values`` and ``front``, whether no other such trial dominates it)."""
    specs = study.objectives
    if len(specs) < 2:
        raise ValueError(f"study {study.name!r} has one objective, {describe_objectives(specs)}; a "
                         "Pareto front needs a study of several (the search setting "
                         "objectives)")
    chosen = choose_objectives(study.name, specs, names)[:2] if names else [0, 1]
    if len(chosen) != 2 or len(names) > 2:
        raise ValueError(f"a Pareto plot draws two objectives; name two with --objective "
                         f"(study {study.name!r} has {describe_objectives(specs)})")
    pair = [specs[i] for i in chosen]
    points = [(trial, [_value(trial, text) for text, _ in pair]) for trial in study.trials
              if trial["status"] == "ok"]
    points = [(trial, values) for trial, values in points if None not in values]
    if not points:
        raise ValueError(f"no ok trial of study {study.name!r} has values of "
                         f"{describe_objectives(pair)}; a Pareto plot needs one")
    front = set(pareto_front([values for _, values in points], [way for _, way in pair]))
    return {"kind": "pareto", "study": study.name,
            "objectives": [{"expression": text, "direction": way} for text, way in pair],
            "trials": [{"number": trial["number"], "values": values, "front": i in front}
                       for i, (trial, values) in enumerate(points)]}


def timeline(study: Study) -> dict[str, Any]:
    """How busy each worker copy was: ``workers`` (the copies) and ``trials`` (number,
    worker, status, ``start`` and ``end`` in seconds since ``origin``, the first
    dispatch). A copy runs one trial at a time, in the order they end, so a trial starts
    when it was dispatched or when its copy's previous trial ended, whichever is later
    (a task queued ahead of a busy copy waits); a trial still running ends at the latest
    time the study recorded."""
    placed = [t for t in study.trials if t["worker"] is not None and t["started_at"]]
    if not placed:
        raise ValueError(f"no trial of study {study.name!r} records the worker that ran it")
    times = [_time(t[key]) for t in study.trials for key in ("started_at", "finished_at")
             if t[key]]
    origin, last = min(times), max(times)
    free: dict[int, datetime] = {}
    bars = []
    ends = {t["number"]: _time(t["finished_at"]) if t["finished_at"] else last for t in placed}
    for trial in sorted(placed, key=lambda t: (ends[t["number"]], t["number"])):
        worker, end = trial["worker"], ends[trial["number"]]
        start = min(max(_time(trial["started_at"]), free.get(worker, origin)), end)
        free[worker] = end
        bars.append({"number": trial["number"], "worker": worker, "status": trial["status"],
                     "start": (start - origin).total_seconds(),
                     "end": (end - origin).total_seconds()})
    return {"kind": "timeline", "study": study.name, "origin": origin.isoformat(),
            "workers": sorted(free), "trials": bars}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _finite_float(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    return float(value) if finite_number(value) else None


KINDS: dict[str, Callable[..., dict[str, Any]]] = {
    "history": history, "parallel": parallel, "importance": importance, "slice": slices,
    "curves": curves, "pareto": pareto, "timeline": timeline, "lineage": lineage}
