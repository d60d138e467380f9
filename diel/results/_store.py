"""The SQLAlchemy implementation of :class:`~diel.results._storage.Storage`, the search
master's results database (SQLite, PostgreSQL, any SQLAlchemy URL).

Every method is one transaction. The master's write discipline (see docs/search.md):

* a trial's row is written as ``running`` *before* its task is put in the tuple space,
  so a crash can never lose a dispatched trial — at worst it is re-run on resume; its
  ``queued_at`` is then, its ``started_at`` when a worker reports that it took the task;
* every result taken from the tuple space is committed, with the epoch reports that came
  with it and the trials dispatched next, in one transaction per master loop pass,
  before any new task is put and before the master blocks waiting again.

Attempts (no crash loops): each row counts in ``attempts`` how many times its trial was
dispatched (1 when written; one more each time a trial left ``running`` by a crash is
dispatched again; an interrupted or paused dispatch is taken back). When a study is
reopened, a trial left ``running`` that has already been dispatched ``max_attempts``
times is not run again: it is recorded ``failed`` with the error "the job died N times
while this trial ran", so a trial that kills the whole job every time it runs cannot
make the study unfinishable. Each dispatch also has its row in the ``attempts`` table
(schema 6): the step it resumed from, its worker, start, end and how it ended.

Checkpoints (schema 6): a row per durable checkpoint of a trial (one a step); a trial
dispatched again after a checkpoint resumes from it, and its epoch rows after that step,
reported by the lost run, are deleted with its dispatch (superseded).

The lease (one run a study) is a row of ``study_leases``, read and written in a
transaction that takes the write lock first (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
``SELECT ... FOR UPDATE``, and a retry when two runs insert the first lease together).

Opening the store creates the tables, or upgrades a database written by an older diel in
place (see :mod:`diel.results._schema`); a database of a newer diel is refused.

A write that the storage under the database refuses (SQLite's "database or disk is full",
PostgreSQL's ``disk_full``, ``ENOSPC``/``EDQUOT``, SQLite's failed write, which is how an
exceeded quota shows) raises :class:`~diel.errors.DatabaseUnwritable`: one line naming
the database, why, and that the same command resumes once space is freed. Nothing
committed is lost: each method is one transaction, rolled back whole.

Threads: every method is one transaction on a connection of its own from the engine's
pool, so methods may be called from several threads.
"""

from __future__ import annotations

import errno
import functools
import importlib
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, NoReturn, Sequence

from sqlalchemy import JSON, DateTime, Float, Integer, Text, bindparam, case, delete, func, \
    insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from diel.errors import DatabaseUnwritable, ResultsError
from diel.results._bulk import run_many
from diel.results._database import Database, is_sqlite_file
from diel.results._leases import Holder, acquire, as_utc, decide, lost
from diel.results._objectives import study_objectives
from diel.results._rows import VALUES, attempt_dict, canonical_key, check_max_attempts, \
    checkpoint_of, is_spent, json_metrics, json_values, merged_suggestions, new_segment, \
    objective_specs, rescored_specs, segments_of, stored_specs, study_dict, study_state, \
    trial_dict
from diel.results._schema import _begin_write, prepare
from diel.results._status import FINISHED
from diel.results._storage import Checkpoint, EpochRecord, Lease, ObjectiveSpec, ResultRecord, \
    Segment, StartedRecord, Storage, StudyState, Suggested, TrialStart, crash_error, utcnow
from diel.results._tables import ATTEMPTS, CHECKPOINTS, SEGMENTS, STUDIES, STUDY_LEASES, \
    TRIAL_METRICS, TRIALS

_RUNNING = "running"   # an attempt not ended yet
_READ = ("number", "status", "objective", VALUES, "accuracy", "loss", "time", "epoch",
         "worker", "attempts", "params", "metrics", "queued_at", "started_at",
         "finished_at", "error")   # a trial's columns, as readers get them

__all__ = ["ResultsStore", "storage_fault"]

_AT = DateTime(timezone=True)


@functools.cache
def _upsert_epochs_on(dialect_name: str) -> Any:
    """The insert of epoch rows that replaces a row of the same trial and epoch, in the
    ``ON CONFLICT`` of dialect ``dialect_name`` (``sqlite``, ``postgresql``; None for
    another), built once, as the statements below. Its dialect's module is imported only
    here: a search in SQLite never loads PostgreSQL's (0.03 s of the master's start)."""
    if dialect_name not in ("sqlite", "postgresql"):
        return None
    upsert = importlib.import_module(f"sqlalchemy.dialects.{dialect_name}").insert(TRIAL_METRICS)
    return upsert.on_conflict_do_update(
        index_elements=[TRIAL_METRICS.c.trial_id, TRIAL_METRICS.c.epoch],
        set_={"metrics": upsert.excluded.metrics, "reported_at": upsert.excluded.reported_at})


# The statements of the master's every commit (record), built once: run_many compiles
# each once for the database's dialect (and SQLAlchemy reuses the compiled form of the
# others); built anew, they were about half of the CPU time of a commit.
_TOUCH_STUDY = update(STUDIES).where(STUDIES.c.id == bindparam("b_study")).values(
    updated_at=bindparam("b_now", type_=_AT))
_NEW_TRIALS = insert(TRIALS)   # then their ids read back: cheaper than RETURNING's rows,
_NEW_IDS = select(TRIALS.c.number, TRIALS.c.id).where(   # and a range than an expanding IN
    TRIALS.c.study_id == bindparam("b_study"),
    TRIALS.c.number.between(bindparam("b_low"), bindparam("b_high")))
_NEW_ATTEMPTS = insert(ATTEMPTS)
_NEW_SEGMENTS = insert(SEGMENTS)
_SUGGESTED_TRIALS = update(TRIALS).where(TRIALS.c.id == bindparam("b_id")).values(
    params=bindparam("b_params", type_=JSON), param_key=bindparam("b_key"),
    distributions=bindparam("b_dists", type_=JSON))
_SUGGESTED_SEGMENTS = update(SEGMENTS).where(
    SEGMENTS.c.trial_id == bindparam("b_id"),
    SEGMENTS.c.index == bindparam("b_index", type_=Integer)).values(
    params=bindparam("b_params", type_=JSON))
_STARTED = tuple(update(table).where(key == bindparam("b_id"), *running).values(
    started_at=bindparam("b_at", type_=_AT),
    worker=func.coalesce(bindparam("b_worker", type_=Integer), table.c.worker))
    for table, key, running in ((TRIALS, TRIALS.c.id, ()),
                                (ATTEMPTS, ATTEMPTS.c.trial_id,
                                 (ATTEMPTS.c.status == _RUNNING,))))
_REACHED = update(TRIALS).where(TRIALS.c.id == bindparam("b_trial")).values(
    epoch=case((func.coalesce(TRIALS.c.epoch, 0) > bindparam("b_epoch"), TRIALS.c.epoch),
               else_=bindparam("b_epoch")),
    worker=func.coalesce(bindparam("b_worker", type_=Integer), TRIALS.c.worker))
_END_ATTEMPTS = update(ATTEMPTS).where(ATTEMPTS.c.trial_id == bindparam("b_id"),
                                       ATTEMPTS.c.status == _RUNNING).values(
    status=bindparam("b_status"), ended_at=bindparam("b_ended", type_=_AT),
    worker=func.coalesce(bindparam("b_worker", type_=Integer), ATTEMPTS.c.worker),
    started_at=func.coalesce(bindparam("b_started", type_=_AT), ATTEMPTS.c.started_at))
_END_TRIALS = update(TRIALS).where(TRIALS.c.id == bindparam("b_id")).values(
    status=bindparam("b_status"), objective=bindparam("b_objective", type_=Float),
    objective_values=bindparam("b_values", type_=TRIALS.c.objective_values.type),
    time=bindparam("b_time", type_=Float), accuracy=bindparam("b_accuracy", type_=Float),
    loss=bindparam("b_loss", type_=Float), metrics=bindparam("b_metrics", type_=JSON),
    worker=func.coalesce(bindparam("b_worker", type_=Integer), TRIALS.c.worker),
    epoch=func.coalesce(bindparam("b_reached", type_=Integer), TRIALS.c.epoch),
    error=bindparam("b_error", type_=Text),
    started_at=func.coalesce(bindparam("b_started", type_=_AT), TRIALS.c.started_at,
                             TRIALS.c.queued_at),
    finished_at=bindparam("b_finished", type_=_AT),
    attempts=TRIALS.c.attempts - bindparam("b_uncharged", type_=Integer))

_DISK_FULL = "disk full (or quota exceeded)"
_WRITE_FAILED = "a write failed (disk I/O error: an exceeded quota, or a failing disk)"
_PG_DISK_FULL = "53100"   # PostgreSQL's SQLSTATE disk_full


@dataclass(frozen=True)
class _Draft:
    """A running trial's parameters as this store last wrote them: its row's ``params``
    and ``distributions``, and its last segment's ``index`` and ``params`` (None: it has
    none), so that a suggestion is merged in without reading them back."""

    params: dict[str, Any]
    distributions: dict[str, Any] | None
    segment: int | None
    segment_params: dict[str, Any]


class ResultsStore(Storage):
    """The :class:`Storage` contract over SQLAlchemy: creates or upgrades the schema on
    opening, then serves one master."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        self._ids: dict[tuple[int, int], int] = {}  # (study id, trial number) -> row id
        self._drafts: dict[int, _Draft] = {}   # row id -> a running trial's params written
        self._opened: set[int] = set()   # studies opened here: every row id is in _ids
        try:
            sqlite_file = is_sqlite_file(url)
            if sqlite_file is not None:
                sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            prepare(self.db.engine, self.db.safe_url)
        except Exception as e:  # driver errors are not all SQLAlchemyError subclasses
            self.db.close()
            fault = storage_fault(e)
            if fault is not None:
                raise self._unwritable(fault) from None
            if isinstance(e, ResultsError):
                raise
            raise ResultsError(f"cannot create or upgrade the results tables in "
                               f"{self.db.safe_url}: {e}") from e

    @classmethod
    def check(cls, url: str) -> None:
        """See :meth:`Storage.check`: the URL, its driver and a SQLite file's place
        (:mod:`diel.results._check`)."""
        from diel.results._check import check_sql_url

        check_sql_url(url)

    @property
    def url(self) -> str:
        return self.db.url

    # -- the lease -----------------------------------------------------------------
    def acquire_lease(self, study: str) -> Lease:
        return acquire(study, self._take)

    def _take(self, lease: Lease) -> Holder | None:
        """Take the lease if it is free or stale; else its live holder. A retry covers
        two runs inserting the first lease of a study together (PostgreSQL)."""
        for attempt in (1, 2):
            try:
                with self._locked() as conn:
                    return _take_lease(conn, lease, utcnow())
            except IntegrityError:
                if attempt == 2:
                    raise ResultsError(f"cannot take the lease of study {lease.study!r} in "
                                       f"{self.db.safe_url}: another run keeps taking it") \
                        from None
        return None  # not reached

    def heartbeat(self, lease: Lease) -> None:
        with self._locked() as conn:
            moved = conn.execute(update(STUDY_LEASES).where(
                STUDY_LEASES.c.study == lease.study, STUDY_LEASES.c.run_id == lease.run_id)
                .values(heartbeat_at=utcnow())).rowcount
            holder = None if moved else _holder(conn, lease.study)
        if not moved:
            raise lost(lease.study, holder)

    def release_lease(self, lease: Lease) -> None:
        with self._locked() as conn:
            conn.execute(delete(STUDY_LEASES).where(STUDY_LEASES.c.study == lease.study,
                                                    STUDY_LEASES.c.run_id == lease.run_id))

    @contextmanager
    def _locked(self) -> Iterator[Connection]:
        """A transaction that takes the write lock before it reads (SQLite: BEGIN
        IMMEDIATE), committed at the end; database errors become ResultsError
        (:class:`DatabaseUnwritable` for a full disk) except IntegrityError, which the
        caller may retry."""
        try:
            with self.db.engine.connect() as conn:
                _begin_write(conn)
                yield conn
                conn.commit()
        except IntegrityError:
            raise
        except SQLAlchemyError as e:
            self._raise_failed_write(e)

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One transaction on a connection of the engine's pool, committed when the block
        ends, rolled back if it raises; a write that the storage refused is raised as
        :class:`DatabaseUnwritable`, any other database error, and a value the driver
        cannot store (psycopg raises its TypeError unwrapped), as :class:`ResultsError`.
        Core statements only, no ORM session: the master never loads ``sqlalchemy.orm``
        (:mod:`diel.results._tables`), and a session's bookkeeping was a tenth of a
        commit's CPU."""
        try:
            with self.db.engine.begin() as conn:
                yield conn
        except TypeError as e:
            raise ResultsError(f"results database {self.db.safe_url}: {e}") from e
        except SQLAlchemyError as e:
            self._raise_failed_write(e)

    def _raise_failed_write(self, e: SQLAlchemyError) -> NoReturn:
        """Raise what a write that failed with ``e`` ends in: :class:`DatabaseUnwritable`
        where the storage refused it (a full disk), else :class:`ResultsError`."""
        fault = storage_fault(e)
        if fault is not None:
            raise self._unwritable(fault) from None
        raise ResultsError(f"results database {self.db.safe_url}: {e}") from e

    def _unwritable(self, fault: str) -> DatabaseUnwritable:
        """The one line of a write refused for ``fault``."""
        return DatabaseUnwritable(f"the results database {self.db.label} could not be "
                                  f"written: {fault}; nothing finished is lost: free space and "
                                  "run the same command again to resume")

    # -- the study -----------------------------------------------------------------
    def open_study(self, name: str, strategy: str, objective: str, direction: str,
                   config: Mapping[str, Any], max_attempts: int = 2,
                   check: Callable[[StudyState], None] | None = None,
                   objectives: Sequence[ObjectiveSpec] = ()) -> StudyState:
        check_max_attempts(max_attempts)
        specs = objective_specs(objective, direction, objectives)
        with self._transaction() as conn:
            study = conn.execute(select(STUDIES).where(STUDIES.c.name == name)).first()
            if study is None:
                study_id = conn.execute(insert(STUDIES).values(
                    name=name, strategy=strategy, objective=objective, direction=direction,
                    objectives=stored_specs(specs), config=dict(config))).inserted_primary_key[0]
                self._opened.add(study_id)
                return StudyState(study_id, [], [], dict(config), [], strategy, objective,
                                  direction, specs)
            rows = conn.execute(select(TRIALS).where(TRIALS.c.study_id == study.id)
                                .order_by(TRIALS.c.number)).all()
            self._ids.update({(study.id, row.number): row.id for row in rows})
            self._opened.add(study.id)
            epochs = _epoch_rows(conn, study.id)
            kept = _kept_checkpoints(conn, {row.id: row.number for row in rows
                                            if row.status not in FINISHED})
            resumed = _last_resumed_from(conn, [row.id for row in rows if row.id in kept])
            spent = [row for row in rows if is_spent(
                row, max_attempts, resumed.get(row.id),
                kept[row.id][0].step if row.id in kept else None)]
            segments = _segment_rows(conn, [row.id for row in rows])
            state = study_state(study, rows, spent, lambda row: epochs.get(row.id, {}),
                                lambda row: kept.get(row.id, []),
                                lambda row: segments_of(row.number, segments.get(row.id, []),
                                                        row.epoch))
            if check is not None:
                check(state)   # may refuse the resume: nothing has been written yet
            now = utcnow()
            if spent:   # given up: recorded failed
                conn.execute(update(TRIALS).where(TRIALS.c.id == bindparam("b_id")).values(
                    status="failed", error=bindparam("b_error"), finished_at=now),
                    [{"b_id": row.id, "b_error": crash_error(row.attempts)} for row in spent])
            conn.execute(update(ATTEMPTS).where(   # the job died while they ran
                ATTEMPTS.c.trial_id.in_(select(TRIALS.c.id).where(
                    TRIALS.c.study_id == study.id)),
                ATTEMPTS.c.status == _RUNNING).values(status="died"))
            conn.execute(update(STUDIES).where(STUDIES.c.id == study.id).values(updated_at=now))
            return state

    def rescore(self, study_id: int, objectives: Sequence[ObjectiveSpec],
                values: Mapping[int, Sequence[float | None] | None]) -> None:
        specs = rescored_specs(objectives)
        several = len(specs) > 1
        with self._transaction() as conn:
            conn.execute(update(STUDIES).where(STUDIES.c.id == study_id).values(
                objective=specs[0][0], direction=specs[0][1],
                objectives=stored_specs(specs), updated_at=utcnow()))
            if values:
                rows = []
                for number, scores in values.items():
                    stored = json_values(scores)
                    rows.append({"b_number": number, "b_objective": stored[0] if stored else None,
                                 "b_values": stored if several else None})
                conn.execute(update(TRIALS).where(
                    TRIALS.c.study_id == study_id, TRIALS.c.number == bindparam("b_number"))
                    .values(objective=bindparam("b_objective", type_=Float),
                            objective_values=bindparam(
                                "b_values", type_=TRIALS.c.objective_values.type)), rows)

    def update_config(self, study_id: int, config: Mapping[str, Any]) -> None:
        with self._transaction() as conn:
            study = conn.execute(select(STUDIES.c.config).where(STUDIES.c.id == study_id)).first()
            if study is None:
                raise ResultsError(f"no study with id {study_id} in {self.db.safe_url}")
            conn.execute(update(STUDIES).where(STUDIES.c.id == study_id).values(
                config={**(study.config or {}), **config}))

    def record(self, study_id: int, epochs: Sequence[EpochRecord] = (),
               results: Sequence[ResultRecord] = (), starts: Sequence[TrialStart] = (),
               started: Sequence[StartedRecord] = (),
               checkpoints: Sequence[Checkpoint] = (),
               suggested: Sequence[Suggested] = ()) -> None:
        """See :meth:`Storage.record`. Bulk statements (one ``executemany`` each, most
        through :func:`~diel.results._bulk.run_many`) on a connection, not ORM objects in
        a session: the master's commit is on the critical path of every trial."""
        if not epochs and not results and not starts and not started and not checkpoints \
                and not suggested:
            return
        now = utcnow()
        drafts: dict[int, _Draft | None] = {}   # row id -> its draft once committed
        with self._transaction() as conn:
            numbers = {r.number for r in (*epochs, *results, *started, *checkpoints,
                                          *suggested)} | {t.number for t in starts}
            ids = self._trial_ids(conn, study_id, numbers)
            drafts.update(_write_starts(conn, study_id, ids, starts, now))
            if suggested:
                known = {**self._drafts, **drafts}
                drafts.update(_write_suggested(conn, ids, suggested, {
                    id_: draft for id_, draft in known.items() if draft is not None}))
            if started:
                _write_started(conn, ids, started)
            if checkpoints:
                _write_checkpoints(conn, ids, checkpoints)
            if epochs:
                _write_epochs(conn, ids, epochs, now)
            if results:
                _write_results(conn, ids, results)
                drafts.update({ids[r.number]: None for r in results if r.number in ids})
            run_many(conn, _TOUCH_STUDY, [{"b_study": study_id, "b_now": now}])
        self._ids.update({(study_id, number): id_ for number, id_ in ids.items()})  # committed
        for id_, draft in drafts.items():
            if draft is None:
                self._drafts.pop(id_, None)
            else:
                self._drafts[id_] = draft

    def forget(self, study_id: int, numbers: Sequence[int], interrupted: bool = False) -> None:
        first: list[int] = []   # the rows deleted
        with self._transaction() as conn:
            ids = list(self._trial_ids(conn, study_id, set(numbers)).values())
            running = (ATTEMPTS.c.trial_id.in_(ids), ATTEMPTS.c.status == _RUNNING)
            if interrupted:   # ended by the interrupt; those no worker took never ran
                conn.execute(delete(ATTEMPTS).where(*running, ATTEMPTS.c.started_at.is_(None)))
                conn.execute(update(ATTEMPTS).where(*running).values(status="interrupted",
                                                                     ended_at=utcnow()))
            else:   # never started: the attempt goes, and a trial never dispatched before
                conn.execute(delete(ATTEMPTS).where(*running))
                first = list(conn.scalars(select(TRIALS.c.id).where(
                    TRIALS.c.id.in_(ids), TRIALS.c.attempts <= 1,
                    TRIALS.c.id.not_in(select(ATTEMPTS.c.trial_id).where(
                        ATTEMPTS.c.trial_id.in_(ids))))))
                for table in (TRIAL_METRICS, CHECKPOINTS, SEGMENTS):
                    conn.execute(delete(table).where(table.c.trial_id.in_(first)))
                conn.execute(delete(TRIALS).where(TRIALS.c.id.in_(first)))
            conn.execute(update(TRIALS).where(TRIALS.c.id.in_(ids)).values(
                attempts=TRIALS.c.attempts - 1))
        for number in numbers:
            id_ = self._ids.get((study_id, number))
            self._drafts.pop(id_, None)   # its row is gone, or reset by its next dispatch
            if id_ in first:
                del self._ids[(study_id, number)]

    def _trial_ids(self, db: Connection, study_id: int,
                   numbers: set[int]) -> dict[int, int]:
        """Row ids of this study's trials with these numbers (those that exist), read
        through ``db``'s transaction, cached:
        only the master writes, so an id once seen stays valid, and a study opened here
        has no row that is not cached (a new trial's number is not looked for)."""
        ids = {n: self._ids[(study_id, n)] for n in numbers if (study_id, n) in self._ids}
        missing = [n for n in numbers if n not in ids]
        if missing and study_id not in self._opened:
            query = select(TRIALS.c.number, TRIALS.c.id).where(
                TRIALS.c.study_id == study_id, TRIALS.c.number.in_(missing))
            ids.update({number: id_ for number, id_ in db.execute(query)})
        return ids

    def study(self, name: str) -> dict[str, Any] | None:
        with self._transaction() as conn:
            found = conn.execute(select(STUDIES).where(STUDIES.c.name == name)).first()
            return None if found is None else study_dict(found)

    def trials(self, study: str, status: str | None = None) -> list[dict[str, Any]]:
        return self._read(study, [] if status is None else [TRIALS.c.status == status],
                          [TRIALS.c.number])

    def best(self, study: str, direction: str, top: int | None) -> list[dict[str, Any]]:
        # ranked and limited in the query: the final report reads ``top`` rows, not every
        # finished trial (a NaN objective is NULL on SQLite, above every number on
        # PostgreSQL: outside the finite range, as an infinite one)
        finite = TRIALS.c.objective.between(-sys.float_info.max, sys.float_info.max)
        score = case((finite, TRIALS.c.objective))
        ranked = score.desc() if direction == "maximize" else score.asc()
        return self._read(study, [TRIALS.c.status == "ok"],
                          [ranked.nulls_last(), TRIALS.c.number], top)

    def _read(self, study: str, conditions: list[Any], order: list[Any],
              top: int | None = None) -> list[dict[str, Any]]:
        """The trials of ``study`` meeting ``conditions`` in ``order`` (the first ``top``)
        as trial dicts; ``[]`` when there is no such study."""
        with self._transaction() as conn:
            found = conn.execute(select(STUDIES.c.id, STUDIES.c.objective, STUDIES.c.direction,
                                        STUDIES.c.objectives).where(STUDIES.c.name == study)).first()
            if found is None:
                return []
            rows = conn.execute(select(*(TRIALS.c[name] for name in _READ)).where(
                TRIALS.c.study_id == found.id, *conditions).order_by(*order).limit(top)).all()
        specs = study_objectives(found.objective, found.direction, found.objectives)
        return [trial_dict({**row._mapping, "study": study}, specs) for row in rows]

    def checkpoints(self, study: str, number: int) -> list[Checkpoint]:
        with self._transaction() as conn:
            trial = _trial_id(conn, study, number)
            return [] if trial is None else _kept_checkpoints(conn, {trial: number}).get(trial, [])

    def study_checkpoints(self, study: str) -> list[Checkpoint]:
        with self._transaction() as conn:
            numbers = dict(conn.execute(select(TRIALS.c.id, TRIALS.c.number).join(
                STUDIES, STUDIES.c.id == TRIALS.c.study_id).where(STUDIES.c.name == study)
                                     ).all())
            kept = _kept_checkpoints(conn, numbers)
        return [c for trial in sorted(kept, key=numbers.__getitem__) for c in kept[trial]]

    def delete_checkpoints(self, study_id: int, deleted: Sequence[tuple[int, int]]) -> None:
        if not deleted:
            return
        with self._transaction() as conn:
            ids = self._trial_ids(conn, study_id, {number for number, _ in deleted})
            rows = [{"b_trial": ids[number], "b_step": step} for number, step in deleted
                    if number in ids]
            if rows:
                conn.execute(update(CHECKPOINTS).where(
                    CHECKPOINTS.c.trial_id == bindparam("b_trial"),
                    CHECKPOINTS.c.step == bindparam("b_step"),
                    CHECKPOINTS.c.deleted_at.is_(None)).values(deleted_at=utcnow()), rows)

    def segments(self, study: str, number: int) -> list[Segment]:
        with self._transaction() as conn:
            found = conn.execute(select(TRIALS.c.id, TRIALS.c.epoch).join(
                STUDIES, STUDIES.c.id == TRIALS.c.study_id).where(
                STUDIES.c.name == study, TRIALS.c.number == number)).first()
            if found is None:
                return []
            return segments_of(number, _segment_rows(conn, [found.id]).get(found.id, []),
                               found.epoch)

    def attempts(self, study: str, number: int) -> list[dict[str, Any]]:
        with self._transaction() as conn:
            trial = _trial_id(conn, study, number)
            if trial is None:
                return []
            rows = conn.execute(select(ATTEMPTS).where(ATTEMPTS.c.trial_id == trial)
                                .order_by(ATTEMPTS.c.attempt)).all()
        return [attempt_dict(row) for row in rows]

    def close(self) -> None:
        self.db.close()


def _trial_id(conn: Connection, study: str, number: int) -> int | None:
    """The row id of trial ``number`` of study ``study`` (None: there is none)."""
    return conn.execute(select(TRIALS.c.id).join(STUDIES, STUDIES.c.id == TRIALS.c.study_id)
                        .where(STUDIES.c.name == study, TRIALS.c.number == number)).scalar()


def _last_resumed_from(conn: Connection, ids: Sequence[int]) -> dict[int, int | None]:
    """The step the last attempt of each trial (by row id) resumed from (None: from
    scratch, or no attempt recorded)."""
    if not ids:
        return {}
    last = (select(ATTEMPTS.c.trial_id, func.max(ATTEMPTS.c.attempt).label("attempt"))
            .where(ATTEMPTS.c.trial_id.in_(list(ids))).group_by(ATTEMPTS.c.trial_id)
            .subquery())
    rows = conn.execute(select(ATTEMPTS.c.trial_id, ATTEMPTS.c.resumed_from).join(
        last, (ATTEMPTS.c.trial_id == last.c.trial_id)
        & (ATTEMPTS.c.attempt == last.c.attempt))).all()
    return {row.trial_id: row.resumed_from for row in rows}


def _segment_rows(conn: Connection, ids: Sequence[int]) -> dict[int, list[Any]]:
    """The segment rows of the trials with row ids ``ids``, in index order, by row id."""
    found: dict[int, list[Any]] = {}
    if ids:
        for row in conn.execute(select(SEGMENTS).where(
                SEGMENTS.c.trial_id.in_(list(ids))).order_by(SEGMENTS.c.trial_id,
                                                             SEGMENTS.c.index)):
            found.setdefault(row.trial_id, []).append(row)
    return found


def _kept_checkpoints(conn: Connection, numbers: dict[int, int]) -> dict[int, list[Checkpoint]]:
    """The kept checkpoints of the trials whose row ids ``numbers`` maps to their
    numbers, newest first, by row id."""
    kept: dict[int, list[Checkpoint]] = {}
    if not numbers:
        return kept
    rows = conn.execute(select(CHECKPOINTS).where(
        CHECKPOINTS.c.trial_id.in_(list(numbers)), CHECKPOINTS.c.deleted_at.is_(None))
        .order_by(CHECKPOINTS.c.trial_id, CHECKPOINTS.c.step.desc())).all()
    for row in rows:
        kept.setdefault(row.trial_id, []).append(checkpoint_of(row, numbers[row.trial_id]))
    return kept


def _write_starts(conn: Connection, study_id: int, ids: dict[int, int],
                  starts: Sequence[TrialStart], now: datetime) -> dict[int, _Draft | None]:
    """New ``running`` rows (their ids added to ``ids``, ``attempts`` 1), or reset rows
    run again (one more attempt; epochs after the step resumed from deleted); queued
    now, not started yet; and an attempt row for each. Returns the drafts of the new
    rows, and None for the rows run again (read back at their first suggestion)."""
    if not starts:
        return {}
    new = [t for t in starts if t.number not in ids]
    again = {ids[t.number]: t for t in starts if t.number in ids}
    if new:
        no_metrics: dict[str, Any] = {}   # one object: run_many serialises it once
        run_many(conn, _NEW_TRIALS, [
            {"study_id": study_id, "number": t.number, "params": t.params,
             "param_key": t.param_key, "status": "running", "metrics": no_metrics,
             "queued_at": now, "started_at": None, "attempts": 1} for t in new])
        numbers = {t.number for t in new}
        ids.update((number, id_) for number, id_ in conn.execute(_NEW_IDS, {
            "b_study": study_id, "b_low": min(numbers), "b_high": max(numbers)})
            if number in numbers)
    made = {}   # trial id -> its attempts so far
    if again:
        made = dict(conn.execute(select(ATTEMPTS.c.trial_id, func.max(ATTEMPTS.c.attempt))
                                 .where(ATTEMPTS.c.trial_id.in_(list(again)))
                                 .group_by(ATTEMPTS.c.trial_id)).all())
        resumed_from = bindparam("b_from", type_=Integer)
        conn.execute(delete(TRIAL_METRICS).where(   # superseded by the new attempt's reports
            TRIAL_METRICS.c.trial_id == bindparam("b_id"),
            or_(resumed_from.is_(None), TRIAL_METRICS.c.epoch > resumed_from)),
            [{"b_id": id_, "b_from": t.resumed_from} for id_, t in again.items()])
        conn.execute(update(TRIALS).where(TRIALS.c.id.in_(list(again))).values(
            status="running", queued_at=now, started_at=None, objective=None,
            objective_values=None,
            time=None, accuracy=None,
            loss=None, metrics={}, worker=None, finished_at=None, error=None,
            attempts=TRIALS.c.attempts + 1))
        conn.execute(update(TRIALS).where(TRIALS.c.id == bindparam("b_id")).values(
            params=bindparam("b_params", type_=JSON), param_key=bindparam("b_key"),
            epoch=bindparam("b_from", type_=Integer)),
            [{"b_id": id_, "b_params": t.params, "b_key": t.param_key, "b_from": t.resumed_from}
             for id_, t in again.items()])
    run_many(conn, _NEW_ATTEMPTS, [
        {"trial_id": ids[t.number], "attempt": made.get(ids[t.number], 0) + 1,
         "resumed_from": t.resumed_from, "status": _RUNNING} for t in starts])
    _write_segments(conn, ids, starts, set(again), now)
    drafts: dict[int, _Draft | None] = dict.fromkeys(again)
    drafts.update({ids[t.number]: _Draft(dict(t.params), None, 0, dict(t.params))
                   for t in new})   # a new row's one segment, index 0, has its params
    return drafts


def _write_segments(conn: Connection, ids: dict[int, int], starts: Sequence[TrialStart],
                    present: set[int], now: datetime) -> None:
    """The segment each start begins (see :func:`diel.results._rows.new_segment`; the
    trials with row ids in ``present`` had a row before), numbered after the trial's."""
    begun = {ids[t.number]: (t, found) for t in starts
             if (found := new_segment(t, ids[t.number] in present)) is not None}
    if not begun:
        return
    again = [id_ for id_ in begun if id_ in present]   # a new row has none yet: no query
    counts = {}
    if again:
        counts = dict(conn.execute(select(SEGMENTS.c.trial_id, func.count()).where(
            SEGMENTS.c.trial_id.in_(again)).group_by(SEGMENTS.c.trial_id)).all())
    run_many(conn, _NEW_SEGMENTS, [
        {"trial_id": id_, "index": counts.get(id_, 0), "from_step": from_step,
         "params": t.params, "parent_trial": parent, "parent_step": step, "created_at": now}
        for id_, (t, (from_step, parent, step)) in begun.items()])


def _write_suggested(conn: Connection, ids: dict[int, int], suggested: Sequence[Suggested],
                     known: Mapping[int, _Draft]) -> dict[int, _Draft]:
    """Merge each suggested parameter into its trial's params, param_key and
    distributions, and into its last segment's params (trials not recorded: ignored).
    What the store wrote last (``known``, by row id) is not read again. Returns the new
    drafts."""
    by_trial: dict[int, list[Suggested]] = {}
    for record in suggested:
        if record.number in ids:
            by_trial.setdefault(ids[record.number], []).append(record)
    if not by_trial:
        return {}
    drafts = {id_: known[id_] for id_ in by_trial if id_ in known}
    drafts.update(_read_drafts(conn, [id_ for id_ in by_trial if id_ not in drafts]))
    for id_, draft in drafts.items():
        params, dists = merged_suggestions(draft.params, draft.distributions, by_trial[id_])
        segment_params = merged_suggestions(draft.segment_params, None, by_trial[id_])[0]
        drafts[id_] = _Draft(params, dists, draft.segment, segment_params)
    run_many(
        conn, _SUGGESTED_TRIALS,
        [{"b_id": id_, "b_params": d.params, "b_key": canonical_key(d.params),
          "b_dists": d.distributions} for id_, d in drafts.items()])
    segments = [{"b_id": id_, "b_index": d.segment, "b_params": d.segment_params}
                for id_, d in drafts.items() if d.segment is not None]
    if segments:
        run_many(conn, _SUGGESTED_SEGMENTS, segments)
    return drafts


def _read_drafts(conn: Connection, ids: Sequence[int]) -> dict[int, _Draft]:
    """The drafts of the trials with row ids ``ids``, read from their rows and last
    segments."""
    if not ids:
        return {}
    rows = conn.execute(select(TRIALS.c.id, TRIALS.c.params, TRIALS.c.distributions)
                        .where(TRIALS.c.id.in_(list(ids)))).all()
    last = (select(SEGMENTS.c.trial_id, func.max(SEGMENTS.c.index).label("index"))
            .where(SEGMENTS.c.trial_id.in_(list(ids))).group_by(SEGMENTS.c.trial_id)
            .subquery())
    segments = {row.trial_id: row for row in conn.execute(
        select(SEGMENTS.c.trial_id, SEGMENTS.c.index, SEGMENTS.c.params)
        .join(last, (SEGMENTS.c.trial_id == last.c.trial_id)
              & (SEGMENTS.c.index == last.c.index)))}
    drafts = {}
    for row in rows:
        segment = segments.get(row.id)
        drafts[row.id] = _Draft(dict(row.params or {}), row.distributions,
                                None if segment is None else segment.index,
                                {} if segment is None else dict(segment.params or {}))
    return drafts


def _write_started(conn: Connection, ids: dict[int, int], started: Sequence[StartedRecord]) -> None:
    """Record when each trial, and its running attempt, began to run and on which worker."""
    rows = [{"b_id": ids[r.number], "b_at": r.at, "b_worker": r.worker}
            for r in started if r.number in ids]
    if not rows:
        return
    for statement in _STARTED:   # the trial's row, then its running attempt's
        run_many(conn, statement, rows)


def _write_checkpoints(conn: Connection, ids: dict[int, int],
                       checkpoints: Sequence[Checkpoint]) -> None:
    """Keep each durable checkpoint, replacing one of the same trial and step."""
    latest = {(ids[c.number], c.step): c for c in checkpoints if c.number in ids}
    if not latest:
        return
    conn.execute(delete(CHECKPOINTS).where(CHECKPOINTS.c.trial_id == bindparam("b_trial"),
                                           CHECKPOINTS.c.step == bindparam("b_step")),
                    [{"b_trial": trial, "b_step": step} for trial, step in latest])
    conn.execute(insert(CHECKPOINTS), [
        {"trial_id": trial, "step": step, "nbytes": c.nbytes, "checksum": c.checksum,
         "path": c.path, "created_at": c.created_at, "deleted_at": None}
        for (trial, step), c in latest.items()])


def _write_epochs(conn: Connection, ids: dict[int, int], epochs: Sequence[EpochRecord],
                  now: datetime) -> None:
    """Insert (or overwrite) per-epoch metrics and move each trial's reached epoch on."""
    latest = {(ids[e.number], e.epoch): e for e in epochs if e.number in ids}
    if not latest:
        return
    keys = [{"b_trial": trial, "b_epoch": epoch} for trial, epoch in latest]
    _upsert_epochs(conn, [
        {"trial_id": trial, "epoch": epoch, "metrics": json_metrics(e.metrics), "reported_at": now}
        for (trial, epoch), e in latest.items()], keys)
    run_many(conn, _REACHED, [{**key, "b_worker": e.worker} for key, e in zip(keys, latest.values())])


def _upsert_epochs(conn: Connection, rows: list[dict[str, Any]], keys: list[dict[str, Any]]) -> None:
    """Insert epoch rows, each replacing the row of the same trial and epoch: one
    statement where the database has ``ON CONFLICT`` (SQLite, PostgreSQL), else a delete
    of ``keys`` and an insert."""
    upsert = _upsert_epochs_on(conn.dialect.name)
    if upsert is None:
        conn.execute(delete(TRIAL_METRICS).where(TRIAL_METRICS.c.trial_id == bindparam("b_trial"),
                                                 TRIAL_METRICS.c.epoch == bindparam("b_epoch")),
                     keys)
        conn.execute(insert(TRIAL_METRICS), rows)
        return
    run_many(conn, upsert, rows)


def _write_results(conn: Connection, ids: dict[int, int], results: Sequence[ResultRecord]) -> None:
    """Record each finished trial's status, metrics and end time on its row, and its
    start: the result's, else the one recorded, else (no worker said when it began) the
    time it was queued, so that every finished trial has a start. A paused trial keeps
    no end time and is not charged its attempt. Each ends its running attempt."""
    rows = [r for r in results if r.number in ids]
    if not rows:
        return
    run_many(
        conn, _END_ATTEMPTS,
        [{"b_id": ids[r.number], "b_status": r.status, "b_ended": r.finished_at,
          "b_worker": r.worker, "b_started": r.started_at} for r in rows])
    run_many(
        conn, _END_TRIALS,
        [{"b_id": ids[r.number], "b_status": r.status, "b_objective": r.objective,
          "b_values": json_values(r.objective_values),
          "b_time": r.time, "b_accuracy": r.accuracy, "b_loss": r.loss,
          "b_metrics": json_metrics(r.metrics), "b_worker": r.worker, "b_reached": r.epoch,
          "b_error": r.error, "b_started": r.started_at,
          "b_finished": None if r.status == "paused" else r.finished_at,
          "b_uncharged": int(r.status == "paused")}
         for r in rows])


def _epoch_rows(conn: Connection, study_id: int) -> dict[int, dict[int, dict[str, Any]]]:
    """The epoch reports of the study's trials, ``{epoch: metrics}`` by trial row id."""
    found: dict[int, dict[int, dict[str, Any]]] = {}
    for row in conn.execute(select(TRIAL_METRICS.c.trial_id, TRIAL_METRICS.c.epoch,
                                   TRIAL_METRICS.c.metrics)
                            .join(TRIALS, TRIALS.c.id == TRIAL_METRICS.c.trial_id)
                            .where(TRIALS.c.study_id == study_id)
                            .order_by(TRIAL_METRICS.c.trial_id, TRIAL_METRICS.c.epoch)):
        found.setdefault(row.trial_id, {})[row.epoch] = dict(row.metrics or {})
    return found


def _take_lease(conn: Connection, lease: Lease, now: datetime) -> Holder | None:
    """In a locked transaction: take the study's lease if free or stale (a WARNING when
    taken over); else return its live holder."""
    row = conn.execute(select(STUDY_LEASES).where(STUDY_LEASES.c.study == lease.study)
                       .with_for_update()).first()
    mine = {"run_id": lease.run_id, "host": lease.host, "pid": lease.pid,
            "started_at": lease.started_at, "heartbeat_at": now}
    if row is None:
        conn.execute(insert(STUDY_LEASES).values(study=lease.study, **mine))
        return None
    holder = decide(lease.study, Holder(row.host, row.pid, as_utc(row.started_at),
                                        (now - as_utc(row.heartbeat_at)).total_seconds()))
    if holder is None:
        conn.execute(update(STUDY_LEASES).where(STUDY_LEASES.c.study == lease.study).values(**mine))
    return holder


def _holder(conn: Connection, study: str) -> Holder | None:
    """Whoever holds the study's lease now (None: nobody)."""
    row = conn.execute(select(STUDY_LEASES).where(STUDY_LEASES.c.study == study)).first()
    if row is None:
        return None
    return Holder(row.host, row.pid, as_utc(row.started_at),
                  (utcnow() - as_utc(row.heartbeat_at)).total_seconds())


def storage_fault(error: BaseException) -> str | None:
    """Why the storage under a database refused a write, read from ``error`` and what it
    was raised from (SQLAlchemy's wrapper, the driver's exception, an OSError): a full
    disk or quota, or a failed write; None for every other error."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        code = getattr(current, "sqlite_errorcode", None)
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if code == sqlite3.SQLITE_FULL or sqlstate == _PG_DISK_FULL or \
                (isinstance(current, sqlite3.Error) and "database or disk is full" in str(current)) \
                or (isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT)):
            return _DISK_FULL
        if code == sqlite3.SQLITE_IOERR_WRITE:
            return _WRITE_FAILED
        orig = getattr(current, "orig", None)
        pending += [orig if isinstance(orig, BaseException) else None, current.__cause__,
                    current.__context__]
    return None
