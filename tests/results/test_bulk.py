"""The master's bulk writes (:func:`diel.results._bulk.run_many`) store what SQLAlchemy's
own execution of the same statement stores, on SQLite and on PostgreSQL (``db_url``), and
refuse a statement whose defaults only SQLAlchemy would compute."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import DateTime, Integer, bindparam, create_engine, func, insert, select, update
from sqlalchemy.types import TypeDecorator

from diel.results import ResultsStore
from diel.results._bulk import run_many
from diel.results._leases import as_utc
from diel.results._models import AttemptModel, TrialModel

TRIALS = TrialModel.__table__
ATTEMPTS = AttemptModel.__table__
AT = datetime(2026, 11, 26, 5, 30, 1, 123456, tzinfo=timezone.utc)


def a_trial(study: int, number: int) -> dict:
    """A new trial's row, with a value of each type the master writes (JSON, a date and
    time with its zone, a float, a NULL)."""
    return {"study_id": study, "number": number, "params": {"lr": 0.1, "act": "relu"},
            "param_key": f"k{number % 2}", "status": "running", "metrics": {"nested": [1, 2.5]},
            "queued_at": AT + timedelta(hours=number % 2), "started_at": None, "attempts": 1}


ENDED = update(ATTEMPTS).where(ATTEMPTS.c.trial_id == bindparam("b_id"),
                               ATTEMPTS.c.status == "running").values(   # a bound literal
    status=bindparam("b_status"),
    worker=func.coalesce(bindparam("b_worker", type_=Integer), ATTEMPTS.c.worker))


def test_run_many_stores_what_sqlalchemy_stores(db_url):
    """Rows inserted and updated by run_many read back, as the driver returns them
    (no type processing), equal to those SQLAlchemy's executemany wrote."""
    store = ResultsStore(db_url)
    try:
        study = store.open_study("s", "random", "value", "minimize", {}).study_id
        with store.db.engine.begin() as conn:
            conn.execute(insert(TRIALS), [a_trial(study, n) for n in (0, 1)])
            run_many(conn, insert(TRIALS), [a_trial(study, n) for n in (2, 3)])
            ids = dict(conn.execute(select(TRIALS.c.number, TRIALS.c.id)).all())
            conn.execute(insert(ATTEMPTS), [{"trial_id": id_, "attempt": 1, "status": "running"}
                                            for id_ in ids.values()])
            conn.execute(ENDED, [{"b_id": ids[n], "b_status": "ok", "b_worker": n}
                                 for n in (0, 1)])
            run_many(conn, ENDED, [{"b_id": ids[n], "b_status": "ok", "b_worker": n}
                                   for n in (2, 3)])
            trials = conn.exec_driver_sql(
                "SELECT number, params, param_key, status, metrics, queued_at, started_at, "
                "attempts FROM trials ORDER BY number").all()
            attempts = conn.exec_driver_sql(
                "SELECT t.number, a.status, a.worker FROM attempts a "
                "JOIN trials t ON t.id = a.trial_id ORDER BY t.number").all()
    finally:
        store.close()
    assert [row[1:] for row in trials[2:]] == [row[1:] for row in trials[:2]]
    assert trials[0][5] != trials[1][5]   # the two trials differ where the copies differ
    assert attempts == [(n, "ok", n) for n in range(4)]


@pytest.fixture
def attempts_conn():
    """A connection, in a transaction, to an in-memory SQLite database with the studies,
    trials and attempts tables."""
    engine = create_engine("sqlite://")
    try:
        ATTEMPTS.metadata.create_all(engine, tables=[TRIALS.metadata.tables["studies"],
                                                     TRIALS, ATTEMPTS])
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def test_run_many_refuses_a_statement_needing_defaults_computed_in_python(attempts_conn):
    """An attempt row without its status would need the column's Python default: refused
    with the SQL named, nothing written."""
    with pytest.raises(ValueError, match="INSERT INTO attempts"):
        run_many(attempts_conn, insert(ATTEMPTS), [{"trial_id": 1, "attempt": 1}])
    assert attempts_conn.execute(select(func.count()).select_from(ATTEMPTS)).scalar() == 0


def test_run_many_binds_a_statement_of_one_parameter(db_url):
    """A statement that binds a single value (no literal of its own) runs too."""
    store = ResultsStore(db_url)
    try:
        study = store.open_study("s", "random", "value", "minimize", {}).study_id
        with store.db.engine.begin() as conn:
            run_many(conn, insert(TRIALS), [a_trial(study, 0)])
            run_many(conn, update(TRIALS).values(param_key=bindparam("b_key")),
                     [{"b_key": "one"}])
            keys = conn.execute(select(TRIALS.c.param_key)).scalars().all()
    finally:
        store.close()
    assert keys == ["one"]


def test_run_many_refuses_rows_without_a_parameter_the_statement_needs(attempts_conn):
    """A row that lacks one of the statement's parameters is refused, as SQLAlchemy's
    execution refuses it ("a value is required"), not bound as NULL: nothing written."""
    with pytest.raises(ValueError, match="no value for the parameter 'b_worker'"):
        run_many(attempts_conn, ENDED, [{"b_id": 1, "b_status": "ok"}])


def test_run_many_converts_a_value_shared_by_consecutive_rows_once(attempts_conn):
    """The pass's time, the same object in every row, is converted once (not once a
    row), and every row stores it; a row with a value of its own gets its own."""
    calls: list[object] = []

    class Counted(TypeDecorator):
        impl, cache_ok = DateTime, True

        def process_bind_param(self, value, dialect):
            calls.append(value)
            return value

    queued = bindparam("b_at", type_=Counted())
    later = AT + timedelta(seconds=1)
    statement = insert(TRIALS).values(study_id=1, param_key="k", status="running",
                                      attempts=1, params={}, metrics={}, queued_at=queued)
    run_many(attempts_conn, statement,
             [{"number": n, "b_at": at} for n, at in enumerate((AT, AT, AT, later))])
    stored = attempts_conn.execute(select(TRIALS.c.queued_at).order_by(TRIALS.c.number))
    assert [as_utc(at) for at in stored.scalars()] == [AT, AT, AT, later]
    assert calls == [AT, later]
