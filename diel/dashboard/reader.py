"""What the dashboard reads from a results database, as plain JSON-ready data.

Everything goes through the read-only reader (:func:`diel.results.open`): its
``studies()``, ``trials()`` and ``count()``, and, for what it does not list (per-epoch
reports, the study's stored settings, leases, per-copy counts), short SELECTs in its own
read-only sessions. Every call is one short read transaction: no lock is held between
requests, so a search writing the database is not held up.

:meth:`Reader.versions` is the cheap question the page asks every few seconds: one
string a study that changes whenever the study does (a trial dispatched, finished or
reporting an epoch, its settings rescored, its lease taken or given back), so the page
fetches the table and redraws the plots only when there is something new.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from typing import Any, Iterable

from sqlalchemy import func, inspect, select

from diel.results._models import STATUSES, LeaseModel, StudyModel, TrialMetricModel, TrialModel
from diel.results._query import Results, iso_or_none
from diel.results._storage import STALE_AFTER_S

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


def _age_s(value: datetime | None, now: datetime) -> float | None:
    """Seconds from ``value`` (naive means UTC, as SQLite returns it) to ``now``."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return max(0.0, (now - value).total_seconds())


class Reader:
    """The dashboard's queries over one open :class:`~diel.results.Results`."""

    def __init__(self, results: Results) -> None:
        self.results = results
        self.label = results.db.label
        self._has_leases = "study_leases" in inspect(results.db.engine).get_table_names()

    # -- what changed ---------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        """One short string per study name that changes whenever the study does.

        Three cheap reads, each from an index alone: trials per status and the highest
        trial id per study (a trial written, finished or forgotten), the highest epoch
        report id of the study's running trials (only a running trial reports), and the
        study's ``updated_at`` (settings or objectives rescored) and lease holder (a run
        started or ended; a re-dispatch after a crash comes with a new run)."""
        trials, reports = TrialModel, TrialMetricModel
        with self.results.db.session() as s:
            studies = s.execute(select(StudyModel.id, StudyModel.name,
                                       StudyModel.updated_at)).all()
            groups = s.execute(select(trials.study_id, trials.status, func.count(),
                                      func.max(trials.id))
                               .group_by(trials.study_id, trials.status)).all()
            reported = dict(s.execute(select(trials.study_id, func.max(reports.id))
                                      .join(reports, reports.trial_id == trials.id)
                                      .where(trials.status == "running")
                                      .group_by(trials.study_id)).all())
            leases = dict(s.execute(select(LeaseModel.study, LeaseModel.run_id)).all()) \
                if self._has_leases else {}
        per_study: dict[int, list[str]] = {}
        for study_id, status, *counts in sorted(groups, key=lambda row: (row[0], row[1])):
            per_study.setdefault(study_id, []).append(":".join(map(str, [status, *counts])))
        out = {}
        for study_id, name, updated in studies:
            text = "|".join([*per_study.get(study_id, []), str(reported.get(study_id)),
                             str(updated), str(leases.get(name))])
            out[name] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        return out

    # -- studies ----------------------------------------------------------------------------
    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every study (or study ``name`` alone) as :meth:`Results.studies` lists it,
        with its ``run`` (the lease: who runs it now, :meth:`runs`)."""
        runs = self.runs()
        return [{**study, "run": runs.get(study["name"])}
                for study in self.results.studies(name)]

    def runs(self) -> dict[str, dict[str, Any]]:
        """The leases by study name: host, pid, since when, the heartbeat's age and
        whether it is ``live`` (beat within the time after which a lease is stale)."""
        if not self._has_leases:
            return {}
        now = datetime.now(timezone.utc)
        with self.results.db.session() as s:
            rows = s.execute(select(LeaseModel.study, LeaseModel.host, LeaseModel.pid,
                                    LeaseModel.started_at, LeaseModel.heartbeat_at)).all()
        out = {}
        for study, host, pid, started, beat in rows:
            age = _age_s(beat, now)
            out[study] = {"host": host, "pid": pid, "started_at": iso_or_none(started),
                          "heartbeat_age_s": age,
                          "live": age is not None and age < STALE_AFTER_S}
        return out

    def study(self, name: str) -> dict[str, Any]:
        """Study ``name`` (:meth:`studies`'s entry) with its stored ``settings`` (the
        search's settings as the master stored them), the parameter names its trials'
        ``params`` may hold and its ``workers``: each worker copy seen in its trials,
        with counts per status. :class:`ValueError` naming the studies when there is
        no such study."""
        [listed] = self.studies(name)
        with self.results.db.session() as s:
            study_id, config = s.execute(select(StudyModel.id, StudyModel.config)
                                         .where(StudyModel.name == name)).one()
            copies = s.execute(select(TrialModel.worker, TrialModel.status, func.count(),
                                      func.max(TrialModel.finished_at))
                               .where(TrialModel.study_id == study_id)
                               .group_by(TrialModel.worker, TrialModel.status)).all()
        config = config if isinstance(config, dict) else {}
        space = config.get("space")
        return {**listed, "settings": config,
                "params": list(space) if isinstance(space, dict) else [],
                "workers": _copies(copies)}

    # -- trials -----------------------------------------------------------------------------
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
        total = self.results.count(study=study, status=status, where=where)
        rows = self.results.trials(study=study, sort=sort or None, status=status, where=where,
                                   offset=offset, top=limit)
        params = sorted({name for row in rows for name in row["params"]})
        return {"total": total, "offset": offset, "limit": limit, "params": params,
                "rows": rows}

    def trial(self, study: str, number: int) -> dict[str, Any]:
        """Trial ``number`` of ``study`` as :meth:`Results.trials` gives it, with its
        per-epoch reports (``epochs``: epoch and metrics, in epoch order).
        :class:`ValueError` when there is no such study or trial."""
        found = self.results.trials(study=study, where=[f"number={number}"])
        if not found:
            raise ValueError(f"study {study!r} has no trial {number}")
        with self.results.db.session() as s:
            reports = s.execute(
                select(TrialMetricModel.epoch, TrialMetricModel.metrics)
                .join(TrialModel, TrialMetricModel.trial_id == TrialModel.id)
                .join(StudyModel, TrialModel.study_id == StudyModel.id)
                .where(StudyModel.name == study, TrialModel.number == number)
                .order_by(TrialMetricModel.epoch)).all()
        return {**found[0], "epochs": [{"epoch": epoch, "metrics": dict(metrics or {})}
                                       for epoch, metrics in reports]}


def _copies(rows: Iterable[tuple[Any, str, int, datetime | None]]) -> list[dict[str, Any]]:
    """Per worker copy (None: trials no copy has taken yet): trials, counts per status
    and when its last trial finished."""
    out: dict[Any, dict[str, Any]] = {}
    for worker, status, n, last in rows:
        entry = out.setdefault(worker, {"copy": worker, "trials": 0, "last_finished_at": None,
                                        **{name: 0 for name in STATUSES}})
        entry["trials"] += n
        entry[status] = entry.get(status, 0) + n
        if last is not None and (entry["last_finished_at"] is None
                                 or iso_or_none(last) > entry["last_finished_at"]):
            entry["last_finished_at"] = iso_or_none(last)
    return sorted(out.values(), key=lambda e: (e["copy"] is None, e["copy"] or 0))
