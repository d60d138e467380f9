"""The writing side of the results database, used only by the search master.

Every method is one transaction. The master's write discipline (see docs/search.md):

* a trial's row is written as ``running`` *before* its task is put in the tuple space,
  so a crash can never lose a dispatched trial — at worst it is re-run on resume;
* every result taken from the tuple space is committed, with the epoch reports that came
  with it and the trials dispatched next, in one transaction per master loop pass,
  before any new task is put and before the master blocks waiting again.

Not thread safe: one master, one store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import selectinload

from diel.errors import ResultsError
from diel.results._database import Database, is_sqlite_file
from diel.results._models import FINISHED, Base, StudyModel, TrialMetricModel, TrialModel, \
    utcnow

__all__ = ["ResultsStore", "StudyState", "StoredTrial", "TrialStart", "EpochRecord",
           "ResultRecord"]


@dataclass(frozen=True)
class StoredTrial:
    """A trial already in the database when a study is opened."""

    number: int
    params: dict[str, Any]
    param_key: str
    status: str
    objective: float | None = None
    values: dict[str, Any] = field(default_factory=dict)  # accuracy, loss, time, extras
    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyState:
    """What :meth:`ResultsStore.open_study` found: finished trials (not to be re-run),
    trials left ``running`` by an earlier master (to re-queue) and the stored config."""

    study_id: int
    finished: list[StoredTrial]
    running: list[StoredTrial]
    config: dict[str, Any]

    @property
    def next_number(self) -> int:
        """The first trial number not used yet."""
        return 1 + max((t.number for t in self.finished + self.running), default=-1)


@dataclass(frozen=True)
class TrialStart:
    """A trial about to be dispatched."""

    number: int
    params: dict[str, Any]
    param_key: str


@dataclass(frozen=True)
class EpochRecord:
    """One epoch report of a running trial."""

    number: int
    epoch: int
    metrics: dict[str, Any]
    worker: int | None = None


@dataclass(frozen=True)
class ResultRecord:
    """The end of a trial."""

    number: int
    status: str
    objective: float | None = None
    time: float | None = None
    accuracy: float | None = None
    loss: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    worker: int | None = None
    epoch: int | None = None
    error: str | None = None
    finished_at: datetime = field(default_factory=utcnow)


class ResultsStore:
    """Creates the schema if needed and records a study's trials (master only)."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        try:
            sqlite_file = is_sqlite_file(url)
            if sqlite_file is not None:
                sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            Base.metadata.create_all(self.db.engine)
        except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
            self.db.close()
            raise ResultsError(f"cannot create the results tables in {self.db.safe_url}: "
                               f"{e}") from e

    @property
    def url(self) -> str:
        return self.db.url

    def open_study(self, name: str, strategy: str, objective: str, direction: str,
                   config: Mapping[str, Any]) -> StudyState:
        """Create study ``name``, or reopen it: its settings are updated to these, and
        its trials are returned split into finished and left-running."""
        with self.db.session() as s:
            study = s.scalars(select(StudyModel).where(StudyModel.name == name)).one_or_none()
            if study is None:
                study = StudyModel(name=name, strategy=strategy, objective=objective,
                                   direction=direction, config=dict(config))
                s.add(study)
                s.flush()
                return StudyState(study.id, [], [], dict(config))
            stored_config = dict(study.config or {})
            study.strategy, study.objective, study.direction = strategy, objective, direction
            study.config = {**stored_config, **config}
            study.updated_at = utcnow()
            finished, running = [], []
            query = (select(TrialModel).where(TrialModel.study_id == study.id)
                     .options(selectinload(TrialModel.epochs)).order_by(TrialModel.number))
            for row in s.scalars(query):
                stored = _stored(row, finished=row.status in FINISHED)
                (finished if row.status in FINISHED else running).append(stored)
            return StudyState(study.id, finished, running, stored_config)

    def update_config(self, study_id: int, config: Mapping[str, Any]) -> None:
        """Merge ``config`` into the stored config of the study."""
        with self.db.session() as s:
            study = s.get(StudyModel, study_id)
            if study is None:
                raise ResultsError(f"no study with id {study_id} in {self.db.safe_url}")
            study.config = {**(study.config or {}), **config}

    def record(self, study_id: int, epochs: Sequence[EpochRecord] = (),
               results: Sequence[ResultRecord] = (), starts: Sequence[TrialStart] = ()) -> None:
        """Write epoch reports, finished trials and trials about to start, all in one
        transaction (the master commits once per loop pass).

        A started trial whose number is already present (one left running by a crash)
        reuses its row: its metrics, epochs and error are cleared.
        """
        if not epochs and not results and not starts:
            return
        with self.db.session() as s:
            rows = _rows(s, study_id, {r.number for r in [*epochs, *results, *starts]})
            if epochs:
                _write_epochs(s, rows, epochs)
            for r in results:
                row = rows.get(r.number)
                if row is None:
                    continue
                row.status, row.objective, row.time = r.status, r.objective, r.time
                row.accuracy, row.loss, row.metrics = r.accuracy, r.loss, dict(r.metrics)
                row.worker = r.worker if r.worker is not None else row.worker
                row.epoch = r.epoch if r.epoch is not None else row.epoch
                row.error, row.finished_at = r.error, r.finished_at
            _write_starts(s, study_id, rows, starts)
            s.execute(StudyModel.__table__.update().where(StudyModel.id == study_id)
                      .values(updated_at=utcnow()))

    def close(self) -> None:
        """Release the database connections."""
        self.db.close()


def _rows(session: Any, study_id: int, numbers: Any) -> dict[int, TrialModel]:
    """The trial rows of ``study_id`` with these numbers, by number."""
    query = select(TrialModel).where(TrialModel.study_id == study_id,
                                     TrialModel.number.in_(list(numbers)))
    return {row.number: row for row in session.scalars(query)}


def _write_epochs(session: Any, rows: dict[int, TrialModel],
                  epochs: Sequence[EpochRecord]) -> None:
    """Insert (or overwrite) per-epoch metrics and move each trial's reached epoch on."""
    seen = {(m.trial_id, m.epoch): m for m in session.scalars(
        select(TrialMetricModel).where(
            TrialMetricModel.trial_id.in_([r.id for r in rows.values()])))}
    for e in epochs:
        row = rows.get(e.number)
        if row is None:
            continue
        metric = seen.get((row.id, e.epoch))
        if metric is None:
            metric = TrialMetricModel(trial_id=row.id, epoch=e.epoch)
            session.add(metric)
            seen[(row.id, e.epoch)] = metric
        metric.metrics = dict(e.metrics)
        row.epoch = max(row.epoch or 0, e.epoch)
        row.worker = e.worker if e.worker is not None else row.worker


def _write_starts(session: Any, study_id: int, rows: dict[int, TrialModel],
                  starts: Sequence[TrialStart]) -> None:
    """New ``running`` rows, or reset rows of trials being run again."""
    now = utcnow()
    for t in starts:
        row = rows.get(t.number)
        if row is None:
            session.add(TrialModel(study_id=study_id, number=t.number, params=t.params,
                                   param_key=t.param_key, status="running", started_at=now))
            continue
        session.execute(delete(TrialMetricModel).where(TrialMetricModel.trial_id == row.id))
        row.params, row.param_key, row.status, row.started_at = \
            t.params, t.param_key, "running", now
        row.objective = row.time = row.accuracy = row.loss = None
        row.metrics, row.worker, row.epoch = {}, None, None
        row.finished_at, row.error = None, None


def _stored(row: TrialModel, finished: bool) -> StoredTrial:
    values = {"accuracy": row.accuracy, "loss": row.loss, "time": row.time,
              "epoch": row.epoch, **(row.metrics or {})}
    epochs = {m.epoch: dict(m.metrics or {}) for m in row.epochs} if finished else {}
    return StoredTrial(row.number, dict(row.params or {}), row.param_key, row.status,
                       row.objective, {k: v for k, v in values.items() if v is not None}, epochs)
