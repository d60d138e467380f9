"""The writing side of the results database, used only by the search master.

Every method is one transaction. The master's write discipline (see docs/search.md):

* a trial's row is written as ``running`` *before* its task is put in the tuple space,
  so a crash can never lose a dispatched trial — at worst it is re-run on resume;
* every result taken from the tuple space is committed, with the epoch reports that came
  with it and the trials dispatched next, in one transaction per master loop pass,
  before any new task is put and before the master blocks waiting again.

Attempts (no crash loops): each row counts in ``attempts`` how many times its trial was
dispatched (1 when written; one more each time a trial left ``running`` by a crash is
dispatched again). When a study is reopened, a trial left ``running`` that has already
been dispatched ``max_attempts`` times is not run again: it is recorded ``failed`` with
the error "the job died N times while this trial ran", so a trial that kills the whole
job every time it runs cannot make the study unfinishable.

Opening the store creates the tables, or upgrades a database written by an older diel in
place (see :mod:`diel.results._schema`); a database of a newer diel is refused.

Not thread safe: one master, one store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from sqlalchemy import JSON, DateTime, Float, Integer, Text, bindparam, case, delete, func, \
    insert, select, update
from sqlalchemy.orm import selectinload

from diel.errors import ResultsError
from diel.results._database import Database, is_sqlite_file
from diel.results._models import FINISHED, StudyModel, TrialMetricModel, TrialModel, utcnow
from diel.results._schema import prepare

_TRIALS = TrialModel.__table__
_METRICS = TrialMetricModel.__table__
_STUDIES = StudyModel.__table__

__all__ = ["ResultsStore", "StudyState", "StoredTrial", "TrialStart", "EpochRecord",
           "ResultRecord", "crash_error"]


def crash_error(attempts: int) -> str:
    """The error text of a trial given up after the job died ``attempts`` times."""
    return f"the job died {attempts} time{'' if attempts == 1 else 's'} while this trial ran"


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
    attempts: int = 1  # times dispatched so far
    error: str | None = None


@dataclass(frozen=True)
class StudyState:
    """What :meth:`ResultsStore.open_study` found: finished trials (not to be re-run),
    trials left ``running`` by an earlier master (to re-queue) and the stored config.
    ``given_up`` are the trials left running that were just recorded ``failed`` for
    having reached ``max_attempts`` (they are among ``finished`` too)."""

    study_id: int
    finished: list[StoredTrial]
    running: list[StoredTrial]
    config: dict[str, Any]
    given_up: list[StoredTrial] = field(default_factory=list)

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
        self._ids: dict[tuple[int, int], int] = {}  # (study id, trial number) -> row id
        try:
            sqlite_file = is_sqlite_file(url)
            if sqlite_file is not None:
                sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            prepare(self.db.engine, self.db.safe_url)
        except ResultsError:
            self.db.close()
            raise
        except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
            self.db.close()
            raise ResultsError(f"cannot create or upgrade the results tables in "
                               f"{self.db.safe_url}: {e}") from e

    @property
    def url(self) -> str:
        return self.db.url

    def open_study(self, name: str, strategy: str, objective: str, direction: str,
                   config: Mapping[str, Any], max_attempts: int = 2) -> StudyState:
        """Create study ``name``, or reopen it: its settings are updated to these, and
        its trials are returned split into finished and left-running.

        A trial left running that was dispatched ``max_attempts`` times already (the job
        died each time) is given up: recorded ``failed`` with :func:`crash_error` as its
        error and returned among the finished (and in ``given_up``), not run again.
        ``max_attempts`` must be at least 1 (:class:`ValueError`).
        """
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or \
                max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
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
            study.updated_at = now = utcnow()
            finished, running, given_up = [], [], []
            query = (select(TrialModel).where(TrialModel.study_id == study.id)
                     .options(selectinload(TrialModel.epochs)).order_by(TrialModel.number))
            for row in s.scalars(query):
                spent = row.status not in FINISHED and row.attempts >= max_attempts
                if spent:
                    _give_up(row, now)
                stored = _stored(row, finished=row.status in FINISHED)
                (finished if row.status in FINISHED else running).append(stored)
                if spent:
                    given_up.append(stored)
            return StudyState(study.id, finished, running, stored_config, given_up)

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

        Bulk statements (one ``executemany`` each), not one ORM object per row: the
        master's commit is on the critical path of every trial. A started trial whose
        number is already present (one left running by a crash) reuses its row: its
        metrics, epochs and error are cleared.
        """
        if not epochs and not results and not starts:
            return
        now = utcnow()
        with self.db.session() as s:
            numbers = {r.number for r in (*epochs, *results)} | {t.number for t in starts}
            ids = self._trial_ids(s, study_id, numbers)
            _write_starts(s, study_id, ids, starts, now)
            self._ids.update({(study_id, number): id_ for number, id_ in ids.items()})
            if epochs:
                _write_epochs(s, ids, epochs, now)
            if results:
                _write_results(s, ids, results)
            s.execute(update(_STUDIES).where(_STUDIES.c.id == study_id).values(updated_at=now))

    def forget(self, study_id: int, numbers: Sequence[int]) -> None:
        """Take back trials that were dispatched but never started (their tasks taken
        back). A first dispatch is deleted; a trial run again after a crash keeps its row,
        ``running`` with that attempt taken back, so that the next resume still knows how
        many times the job died while it ran."""
        with self.db.session() as s:
            ids = list(self._trial_ids(s, study_id, set(numbers)).values())
            s.execute(delete(_METRICS).where(_METRICS.c.trial_id.in_(ids)))
            s.execute(delete(_TRIALS).where(_TRIALS.c.id.in_(ids), _TRIALS.c.attempts <= 1))
            s.execute(update(_TRIALS).where(_TRIALS.c.id.in_(ids)).values(
                attempts=_TRIALS.c.attempts - 1))
        for number in numbers:
            self._ids.pop((study_id, number), None)

    def _trial_ids(self, session: Any, study_id: int, numbers: set[int]) -> dict[int, int]:
        """Row ids of this study's trials with these numbers (those that exist), cached:
        only the master writes, so an id once seen stays valid."""
        ids = {n: self._ids[(study_id, n)] for n in numbers if (study_id, n) in self._ids}
        missing = [n for n in numbers if n not in ids]
        if missing:
            query = select(_TRIALS.c.number, _TRIALS.c.id).where(
                _TRIALS.c.study_id == study_id, _TRIALS.c.number.in_(missing))
            ids.update({number: id_ for number, id_ in session.execute(query)})
        return ids

    def close(self) -> None:
        """Release the database connections."""
        self.db.close()


def _write_starts(session: Any, study_id: int, ids: dict[int, int],
                  starts: Sequence[TrialStart], now: datetime) -> None:
    """New ``running`` rows (their ids added to ``ids``, ``attempts`` 1), or reset rows
    run again (one more attempt)."""
    new = [t for t in starts if t.number not in ids]
    again = [ids[t.number] for t in starts if t.number in ids]
    if new:
        inserted = session.execute(
            insert(_TRIALS).returning(_TRIALS.c.number, _TRIALS.c.id),
            [{"study_id": study_id, "number": t.number, "params": t.params,
              "param_key": t.param_key, "status": "running", "metrics": {}, "started_at": now,
              "attempts": 1}
             for t in new])
        ids.update({number: id_ for number, id_ in inserted})
    if again:
        session.execute(delete(_METRICS).where(_METRICS.c.trial_id.in_(again)))
        session.execute(update(_TRIALS).where(_TRIALS.c.id.in_(again)).values(
            status="running", started_at=now, objective=None, time=None, accuracy=None,
            loss=None, metrics={}, worker=None, epoch=None, finished_at=None, error=None,
            attempts=_TRIALS.c.attempts + 1))
        by_id = {ids[t.number]: t for t in starts if t.number in ids}
        session.execute(update(_TRIALS).where(_TRIALS.c.id == bindparam("b_id")).values(
            params=bindparam("b_params", type_=JSON), param_key=bindparam("b_key")),
            [{"b_id": id_, "b_params": t.params, "b_key": t.param_key} for id_, t in by_id.items()])


def _write_epochs(session: Any, ids: dict[int, int], epochs: Sequence[EpochRecord],
                  now: datetime) -> None:
    """Insert (or overwrite) per-epoch metrics and move each trial's reached epoch on."""
    latest = {(ids[e.number], e.epoch): e for e in epochs if e.number in ids}
    if not latest:
        return
    keys = [{"b_trial": trial, "b_epoch": epoch} for trial, epoch in latest]
    session.execute(delete(_METRICS).where(_METRICS.c.trial_id == bindparam("b_trial"),
                                           _METRICS.c.epoch == bindparam("b_epoch")), keys)
    session.execute(insert(_METRICS), [
        {"trial_id": trial, "epoch": epoch, "metrics": dict(e.metrics), "reported_at": now}
        for (trial, epoch), e in latest.items()])
    reached = bindparam("b_epoch")
    session.execute(update(_TRIALS).where(_TRIALS.c.id == bindparam("b_trial")).values(
        epoch=case((func.coalesce(_TRIALS.c.epoch, 0) > reached, _TRIALS.c.epoch), else_=reached),
        worker=func.coalesce(bindparam("b_worker", type_=Integer), _TRIALS.c.worker)),
        [{**key, "b_worker": e.worker} for key, e in zip(keys, latest.values())])


def _write_results(session: Any, ids: dict[int, int], results: Sequence[ResultRecord]) -> None:
    """Record each finished trial's status, metrics and end time on its row."""
    rows = [r for r in results if r.number in ids]
    if not rows:
        return
    session.execute(update(_TRIALS).where(_TRIALS.c.id == bindparam("b_id")).values(
        status=bindparam("b_status"), objective=bindparam("b_objective", type_=Float),
        time=bindparam("b_time", type_=Float), accuracy=bindparam("b_accuracy", type_=Float),
        loss=bindparam("b_loss", type_=Float), metrics=bindparam("b_metrics", type_=JSON),
        worker=func.coalesce(bindparam("b_worker", type_=Integer), _TRIALS.c.worker),
        epoch=func.coalesce(bindparam("b_reached", type_=Integer), _TRIALS.c.epoch),
        error=bindparam("b_error", type_=Text),
        finished_at=bindparam("b_finished", type_=DateTime(timezone=True))),
        [{"b_id": ids[r.number], "b_status": r.status, "b_objective": r.objective,
          "b_time": r.time, "b_accuracy": r.accuracy, "b_loss": r.loss,
          "b_metrics": dict(r.metrics), "b_worker": r.worker, "b_reached": r.epoch,
          "b_error": r.error, "b_finished": r.finished_at} for r in rows])


def _give_up(row: TrialModel, now: datetime) -> None:
    """Record a trial left running after its last allowed attempt as failed."""
    row.status, row.error, row.finished_at = "failed", crash_error(row.attempts), now


def _stored(row: TrialModel, finished: bool) -> StoredTrial:
    values = {"accuracy": row.accuracy, "loss": row.loss, "time": row.time,
              "epoch": row.epoch, **(row.metrics or {})}
    epochs = {m.epoch: dict(m.metrics or {}) for m in row.epochs} if finished else {}
    return StoredTrial(row.number, dict(row.params or {}), row.param_key, row.status,
                       row.objective, {k: v for k, v in values.items() if v is not None}, epochs,
                       row.attempts, row.error)
