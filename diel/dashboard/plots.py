"""The dashboard's plots: ``diel plot``'s figures (:mod:`diel.plot`), as the JSON that
``Plotly.react`` takes, cached per study version and bounded in cost.

The kinds, their data and their drawing are :mod:`diel.plot`'s (:func:`figure_data`,
:func:`diel.plot.render_plotly.figure`); this module only chooses what to feed them so
that a study of any size stays cheap to follow live:

* ``curves`` draws the per-epoch metrics of the :data:`CURVE_TRIALS` most recent trials
  that reported some (a trial's own curves are one click away in the trial table);
* ``importance`` (fANOVA, seconds of CPU per few hundred trials) is computed over a
  seeded random sample of at most :data:`IMPORTANCE_TRIALS` ok trials (``diel plot``'s
  own bound, lower; its title says so);
* ``lineage`` reads the trials' segments, which the other kinds do not need;

and for ``curves`` the page is told so in the answer's ``note``. One figure is computed
at a time (a lock), the study read once per version for every kind, and a figure is
reused while the study's version (:meth:`diel.dashboard.reader.Reader.versions`) is
unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import threading

from diel.plot import MissingExtra, Study, figure_data, load_study
from diel.plot._kinds import KIND_HELP
from diel.results import Results

__all__ = ["Plots", "kinds_of", "CURVE_TRIALS", "IMPORTANCE_TRIALS"]

CURVE_TRIALS = 100
IMPORTANCE_TRIALS = 500


def kinds_of(objectives: int, lineage: bool = False) -> dict[str, str]:
    """The plot kinds a study of ``objectives`` objectives has, with what each shows
    (``pareto`` only for a study of several, ``lineage`` only for one with a
    ``lineage``: population-based training's)."""
    return {kind: text for kind, text in KIND_HELP.items()
            if (kind != "pareto" or objectives > 1) and (kind != "lineage" or lineage)}


class Plots:
    """Plot figures of the studies of one open reader, cached per study version."""

    def __init__(self, results: Results) -> None:
        self.results = results
        self._lock = threading.Lock()
        self._studies: dict[str, tuple[str, Study]] = {}
        self._figures: dict[tuple[str, str], tuple[str, str]] = {}

    def figure(self, study: str, kind: str, version: str) -> str:
        """The JSON text of plot ``kind`` of ``study`` at ``version``: ``{"kind",
        "version", "figure"}`` (a Plotly figure) and maybe a ``note`` on what was left
        out, or ``{"kind", "version", "message"}`` saying why there is nothing to draw
        (no finished trial yet, a library of the plot extra missing, ...)."""
        with self._lock:
            cached = self._figures.get((study, kind))
            if cached is not None and cached[0] == version:
                return cached[1]
            header = {"kind": kind, "version": version}
            try:
                figure, note = self._draw(study, kind, version)
            except (ValueError, MissingExtra) as e:
                text = json.dumps({**header, "message": str(e)})
            else:
                if note:
                    header["note"] = note
                text = json.dumps(header)[:-1] + ', "figure": ' + figure + "}"
            self._figures[(study, kind)] = (version, text)
            return text

    def _draw(self, name: str, kind: str, version: str) -> tuple[str, str | None]:
        """The figure's JSON text and a note, or ValueError / MissingExtra."""
        from diel.plot.render_plotly import figure as plotly_figure

        study, note = self._bounded(self._study(name, version), kind)
        data = figure_data(study, kind, importance_trials=IMPORTANCE_TRIALS)
        return plotly_figure(data).to_json(), note

    def _study(self, name: str, version: str) -> Study:
        """Study ``name`` without its epoch reports, read once per version."""
        cached = self._studies.get(name)
        if cached is None or cached[0] != version:
            cached = (version, load_study(self.results, name))
            self._studies[name] = cached
        return cached[1]

    def _bounded(self, study: Study, kind: str) -> tuple[Study, str | None]:
        """What ``kind`` is drawn from (module docstring) and a note when it is not the
        whole study."""
        if kind == "curves":
            with self.results.snapshot():
                reported = self.results.reported(study.name)
                chosen = [t for t in study.trials if t["number"] in reported][-CURVE_TRIALS:]
                epochs = self.results.epochs(study.name, [t["number"] for t in chosen]) \
                    if chosen else {}
            note = (f"the {len(chosen)} most recent of the {len(reported):,} trials that "
                    "reported per-epoch metrics; click a trial in the table for its own"
                    if len(reported) > len(chosen) else None)
            return dataclasses.replace(study, trials=tuple(chosen), epochs=epochs), note
        if kind == "lineage":   # the segments, and the axes their values need
            return load_study(self.results, study.name, segments=True), None
        return study, None
