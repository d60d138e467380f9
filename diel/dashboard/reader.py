"""What the dashboard reads from a results database, as plain JSON-ready data.

Everything goes through the read-only reader (:func:`diel.results.open`) and its public
methods: ``studies()``, ``trials()`` and ``count()``, and for what a live page follows
beyond the trials, ``config()``, ``epochs()``, ``segments()``, ``distributions()``,
``exploited()``, ``workers()``, ``runs()`` and ``versions()``. Each answer is read in
one short read transaction (:meth:`~diel.results.Results.snapshot`): no lock is held
between requests, so a search writing the database is not held up.

:meth:`Reader.versions` is the cheap question the page asks every few seconds: one
string a study that changes whenever the study does (a trial dispatched, finished or
reporting an epoch, its settings rescored, its lease taken or given back), so the page
fetches the table and redraws the plots only when there is something new.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from diel.results import Results

__all__ = ["Reader", "PAGE_SIZES", "json_safe"]

PAGE_SIZES = (25, 50, 100, 200)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float written as a string (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``): JSON has no such numbers and the page's parser
    would refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


class Reader:
    """The dashboard's questions over one open :class:`~diel.results.Results`."""

    def __init__(self, results: Results) -> None:
        self.results = results
        self.label = results.label

    def versions(self) -> dict[str, str]:
        """One short string per study name that changes whenever the study does
        (:meth:`Results.versions`)."""
        return self.results.versions()

    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every study (or study ``name`` alone) as :meth:`Results.studies` lists it,
        with its ``run`` (the lease: who runs it now, :meth:`Results.runs`)."""
        with self.results.snapshot():
            runs = self.results.runs()
            return [{**study, "run": runs.get(study["name"])}
                    for study in self.results.studies(name)]

    def study(self, name: str) -> dict[str, Any]:
        """Study ``name`` (:meth:`studies`'s entry) with its stored ``settings`` (the
        search's settings as the master stored them), the parameter names its trials'
        ``params`` may hold, its ``workers``: each worker copy seen in its trials,
        with counts per status, and whether it has a ``lineage`` to draw (a
        population-based training study, or one where some trial exploited another).
        :class:`ValueError` naming the studies when there is no such study."""
        with self.results.snapshot():
            [listed] = self.studies(name)
            config = self.results.config(name)
            copies = self.results.workers(name)
            lineage = listed["strategy"] == "pbt" or self.results.exploited(name)
        space = config.get("space")
        return {**listed, "settings": config,
                "params": list(space) if isinstance(space, dict) else [],
                "workers": copies, "lineage": lineage}

    def trial_page(self, study: str, sort: str | None = None, status: str | None = None,
                   where: Iterable[str] = (), offset: int = 0,
                   limit: int = 50) -> dict[str, Any]:
        """One page of the study's trials, sorted and filtered in the database
        (:meth:`Results.trials`), with how many match in all (``total``) and the
        parameter names the page's trials hold (``params``). Bad arguments raise
        :class:`ValueError` naming them."""
        if limit not in PAGE_SIZES:
            raise ValueError(f"limit must be one of {', '.join(map(str, PAGE_SIZES))}, "
                             f"got {limit!r}")
        where = list(where)
        with self.results.snapshot():
            total = self.results.count(study=study, status=status, where=where)
            rows = self.results.trials(study=study, sort=sort or None, status=status,
                                       where=where, offset=offset, top=limit)
        params = sorted({name for row in rows for name in row["params"]})
        return {"total": total, "offset": offset, "limit": limit, "params": params,
                "rows": rows}

    def trial(self, study: str, number: int) -> dict[str, Any]:
        """Trial ``number`` of ``study`` as :meth:`Results.trials` gives it, with its
        per-epoch reports (``epochs``: epoch and metrics, in epoch order), its
        ``segments`` (the parameter sets it ran with: from and to step, params, parent
        trial and step; :meth:`Results.lineage`) and ``distributions`` (those of the
        parameters it asked for as it ran, by name). :class:`ValueError` when there is
        no such study or trial."""
        with self.results.snapshot():
            found = self.results.trials(study=study, where=[f"number={number}"])
            if not found:
                raise ValueError(f"study {study!r} has no trial {number}")
            reports = self.results.epochs(study, [number]).get(number, {})
            segments = self.results.segments(study, [number]).get(number, [])
            distributions = self.results.distributions(study, [number]).get(number, {})
        return {**found[0], "epochs": [{"epoch": epoch, "metrics": metrics}
                                       for epoch, metrics in reports.items()],
                "segments": [{key: value for key, value in vars(s).items()
                              if key not in ("trial", "index")} for s in segments],
                "distributions": distributions}
