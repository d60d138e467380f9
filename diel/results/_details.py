"""What a reader follows of a study beyond its trials, each one query: its stored
settings, its trials' epoch reports, their segments (lineage) and distributions, its
worker copies, the runs holding leases, and a version string per study that changes
whenever the study does.

Each function takes an open read-only session (:class:`~diel.results.Results` gives
them theirs) and reads from indexes where it can: the dashboard asks for versions every
few seconds while a search writes.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Iterable, Sequence

from sqlalchemy import func, select

from diel.results._leases import as_utc
from diel.results._models import STATUSES, LeaseModel, SegmentModel, StudyModel, \
    TrialMetricModel, TrialModel
from diel.results._rows import iso_or_none, segments_of
from diel.results._storage import STALE_AFTER_S, Segment, utcnow

__all__ = ["study_config", "epochs", "reported", "segments", "exploited", "distributions",
           "workers", "runs", "versions"]

Epochs = dict[int, dict[int, dict[str, Any]]]   # trial number -> epoch -> metrics


def study_config(session: Any, study: str) -> dict[str, Any] | None:
    """The settings study ``study`` was stored with ({} when they are not a mapping);
    None when there is no such study."""
    found = session.execute(select(StudyModel.config).where(StudyModel.name == study)).first()
    if found is None:
        return None
    return dict(found.config) if isinstance(found.config, dict) else {}


def epochs(session: Any, study: str, numbers: Sequence[int] | None) -> Epochs:
    """The epoch reports of the trials ``numbers`` of ``study`` (None: every trial), by
    trial number and epoch, in that order."""
    query = (select(TrialModel.number, TrialMetricModel.epoch, TrialMetricModel.metrics)
             .join(TrialModel, TrialMetricModel.trial_id == TrialModel.id)
             .join(StudyModel, TrialModel.study_id == StudyModel.id)
             .where(StudyModel.name == study)
             .order_by(TrialModel.number, TrialMetricModel.epoch))
    if numbers is not None:
        query = query.where(TrialModel.number.in_(list(numbers)))
    out: Epochs = {}
    for number, epoch, metrics in session.execute(query):
        out.setdefault(number, {})[epoch] = dict(metrics or {})
    return out


def segments(session: Any, study: str, numbers: Sequence[int] | None) -> dict[int, list[Segment]]:
    """The segments of the trials ``numbers`` of ``study`` (None: every trial), by trial
    number, each trial's in order; a trial without segments is absent."""
    query = (select(TrialModel.number, TrialModel.epoch, SegmentModel.index,
                    SegmentModel.from_step, SegmentModel.params, SegmentModel.parent_trial,
                    SegmentModel.parent_step)
             .join(TrialModel, SegmentModel.trial_id == TrialModel.id)
             .join(StudyModel, TrialModel.study_id == StudyModel.id)
             .where(StudyModel.name == study)
             .order_by(TrialModel.number, SegmentModel.index))
    if numbers is not None:
        query = query.where(TrialModel.number.in_(list(numbers)))
    rows: dict[int, list[Any]] = {}
    last: dict[int, int | None] = {}
    for row in session.execute(query):
        rows.setdefault(row.number, []).append(row)
        last[row.number] = row.epoch
    return {number: segments_of(number, found, last[number]) for number, found in rows.items()}


def exploited(session: Any, study: str) -> bool:
    """Whether some trial of ``study`` went on from another's checkpoint (a segment with
    a parent: population-based training's exploit)."""
    return session.execute(
        select(SegmentModel.id).join(TrialModel, SegmentModel.trial_id == TrialModel.id)
        .join(StudyModel, TrialModel.study_id == StudyModel.id)
        .where(StudyModel.name == study, SegmentModel.parent_trial.is_not(None))
        .limit(1)).first() is not None


def distributions(session: Any, study: str,
                  numbers: Sequence[int] | None) -> dict[int, dict[str, Any]]:
    """The distributions of the parameters the trials ``numbers`` of ``study`` (None:
    every trial) asked for as they ran, by trial number; a trial that asked for none is
    absent."""
    query = (select(TrialModel.number, TrialModel.distributions)
             .join(StudyModel, TrialModel.study_id == StudyModel.id)
             .where(StudyModel.name == study, TrialModel.distributions.is_not(None))
             .order_by(TrialModel.number))
    if numbers is not None:
        query = query.where(TrialModel.number.in_(list(numbers)))
    return {number: dict(found) for number, found in session.execute(query) if found}


def reported(session: Any, study: str) -> set[int]:
    """The numbers of the trials of ``study`` that reported per-epoch metrics."""
    return set(session.scalars(
        select(TrialModel.number).distinct()
        .join(TrialMetricModel, TrialMetricModel.trial_id == TrialModel.id)
        .join(StudyModel, TrialModel.study_id == StudyModel.id)
        .where(StudyModel.name == study)))


def workers(session: Any, study: str) -> list[dict[str, Any]]:
    """Per worker copy that took trials of ``study`` (``copy`` None: trials no copy has
    taken yet, last): its trials, their counts per status and when its last trial
    finished."""
    rows = session.execute(
        select(TrialModel.worker, TrialModel.status, func.count(),
               func.max(TrialModel.finished_at))
        .join(StudyModel, TrialModel.study_id == StudyModel.id)
        .where(StudyModel.name == study)
        .group_by(TrialModel.worker, TrialModel.status)).all()
    return _copies(rows)


def _copies(rows: Iterable[tuple[Any, str, int, datetime | None]]) -> list[dict[str, Any]]:
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


def runs(session: Any) -> dict[str, dict[str, Any]]:
    """The leases by study name: ``host``, ``pid``, since when (``started_at``), the
    heartbeat's age in seconds and whether the run is ``live`` (beat within the time
    after which a lease is stale)."""
    now = utcnow()
    out = {}
    for study, host, pid, started, beat in session.execute(
            select(LeaseModel.study, LeaseModel.host, LeaseModel.pid, LeaseModel.started_at,
                   LeaseModel.heartbeat_at)):
        age = None if beat is None else max(0.0, (now - as_utc(beat)).total_seconds())
        out[study] = {"host": host, "pid": pid, "started_at": iso_or_none(started),
                      "heartbeat_age_s": age,
                      "live": age is not None and age < STALE_AFTER_S}
    return out


def versions(session: Any, leases: bool) -> dict[str, str]:
    """One short string per study name that changes whenever the study does.

    Three cheap reads, each from an index alone: trials per status and the highest
    trial id per study (a trial written, finished or forgotten), the highest epoch
    report id of the study's running trials (only a running trial reports), and the
    study's ``updated_at`` (settings or objectives rescored) and lease holder (a run
    started or ended; a re-dispatch after a crash comes with a new run); the last only
    where the database has ``leases``."""
    trials, reports = TrialModel, TrialMetricModel
    studies = session.execute(select(StudyModel.id, StudyModel.name,
                                     StudyModel.updated_at)).all()
    groups = session.execute(select(trials.study_id, trials.status, func.count(),
                                    func.max(trials.id))
                             .group_by(trials.study_id, trials.status)).all()
    latest = dict(session.execute(select(trials.study_id, func.max(reports.id))
                                  .join(reports, reports.trial_id == trials.id)
                                  .where(trials.status == "running")
                                  .group_by(trials.study_id)).all())
    holders = dict(session.execute(select(LeaseModel.study, LeaseModel.run_id)).all()) \
        if leases else {}
    per_study: dict[int, list[str]] = {}
    for study_id, status, *counts in sorted(groups, key=lambda row: (row[0], row[1])):
        per_study.setdefault(study_id, []).append(":".join(map(str, [status, *counts])))
    out = {}
    for study_id, name, updated in studies:
        text = "|".join([*per_study.get(study_id, []), str(latest.get(study_id)),
                         str(updated), str(holders.get(name))])
        out[name] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return out
