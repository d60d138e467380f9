"""The store's contract on every backend: SQLite and a real PostgreSQL server (``db_url``,
see conftest.py). What the search master relies on: trials round-trip, re-runs reuse
their rows and count attempts, spent trials are given up, one run holds a study."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import create_engine, select, text, update

import diel.results
from diel.errors import StudyBusy
from diel.results import EpochRecord, ResultRecord, ResultsStore, TrialStart
from diel.results._models import SCHEMA_VERSION, MetaModel


def start(n: int) -> TrialStart:
    return TrialStart(n, {"x": n, "kind": "even" if n % 2 == 0 else "odd"}, f'{{"x":{n}}}')


def test_the_schema_version_is_recorded(db_url):
    ResultsStore(db_url).close()
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(MetaModel.key, MetaModel.value)).all()
    finally:
        engine.dispose()
    assert ("schema_version", str(SCHEMA_VERSION)) in rows


def test_a_schema_3_database_is_upgraded_in_place(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[start(0)])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.8, accuracy=0.8)])
    store.close()
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:   # what a database of schema 3 lacks
            conn.execute(text("ALTER TABLE studies DROP COLUMN objectives"))
            conn.execute(text("ALTER TABLE trials DROP COLUMN objective_values"))
            conn.execute(update(MetaModel).values(value="3"))
    finally:
        engine.dispose()
    with diel.results.open(db_url) as results:
        assert results.trials()[0]["objective"] == 0.8
    store = ResultsStore(db_url)
    two = store.open_study("two", "random", "accuracy", "maximize", {},
                           objectives=[("accuracy", "maximize"), ("time", "minimize")])
    store.record(two.study_id, starts=[start(0), start(1)])
    store.record(two.study_id, results=[ResultRecord(0, "ok", 0.9, objective_values=(0.9, 2.0)),
                                        ResultRecord(1, "ok", 0.8, objective_values=(0.8, 3.0))])
    again = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.close()
    assert again.finished[0].scores == (0.8,) and again.objectives == (("accuracy", "maximize"),)
    with diel.results.open(db_url) as results:
        assert [t["number"] for t in results.pareto(study="two")] == [0]
        assert {s["name"]: s["front"] for s in results.studies()} == {"s": None, "two": 1}


def test_a_study_round_trips(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {"seed": 7})
    assert (state.finished, state.running, state.next_number) == ([], [], 0)
    store.record(state.study_id, starts=[start(0), start(1), start(2)])
    store.record(state.study_id, epochs=[EpochRecord(0, 1, {"accuracy": 0.4}, worker=1),
                                         EpochRecord(0, 2, {"accuracy": 0.8}, worker=1)],
                 results=[ResultRecord(0, "ok", 0.8, 1.5, 0.8, 0.2, {"f1": 0.7}, worker=1,
                                       epoch=2),
                          ResultRecord(1, "failed", error="boom")])
    store.update_config(state.study_id, {"note": "α β"})
    store.close()

    store = ResultsStore(db_url)
    again = store.open_study("s", "grid", "accuracy", "maximize", {"seed": 7})
    store.close()
    assert [(t.number, t.status) for t in again.finished] == [(0, "ok"), (1, "failed")]
    assert [t.number for t in again.running] == [2] and again.next_number == 3
    ok = again.finished[0]
    assert ok.params == {"x": 0, "kind": "even"} and ok.objective == 0.8
    assert ok.values["f1"] == 0.7 and ok.values["loss"] == 0.2
    assert ok.epochs == {1: {"accuracy": 0.4}, 2: {"accuracy": 0.8}}
    assert again.finished[1].error == "boom"
    assert again.config["seed"] == 7 and again.config["note"] == "α β"
    with diel.results.open(db_url) as results:
        rows = {t["number"]: t for t in results.trials()}
    assert rows[0]["worker"] == 1 and rows[0]["epoch"] == 2 and rows[0]["finished_at"]
    assert rows[0]["started_at"] and rows[1]["started_at"]   # finished: never without
    assert rows[2]["status"] == "running" and rows[2]["started_at"] is None   # still queued


def test_a_diverged_trials_nan_metrics_are_stored_as_null(db_url):
    """JSON has no NaN: PostgreSQL refuses it and SQLite's JSON functions (the --where
    filters) fail on it, so a diverged trial's metrics are stored as null."""
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[start(0)])
    store.record(state.study_id, epochs=[EpochRecord(0, 1, {"accuracy": float("nan")})],
                 results=[ResultRecord(0, "failed", error="diverged",
                                       metrics={"f1": float("nan"), "steps": 3})])
    store.close()
    with diel.results.open(db_url) as results:
        rows = results.trials(where=["steps=3"])
    assert [(r["number"], r.get("f1")) for r in rows] == [(0, None)]


def test_reruns_reuse_their_rows_and_count_attempts(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[start(0), start(1)])
    store.record(state.study_id, epochs=[EpochRecord(0, 1, {"x": 1.0})])
    store.close()  # the job died with both running

    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
    assert [(t.number, t.attempts) for t in state.running] == [(0, 1), (1, 1)]
    store.record(state.study_id, starts=[start(0), start(1), start(2)])
    store.forget(state.study_id, [1, 2])  # taken back before any worker started them
    store.close()
    with diel.results.open(db_url) as results:
        rows = {t["number"]: t for t in results.trials()}
    assert set(rows) == {0, 1}  # trial 2 (a first dispatch) is gone
    assert rows[0]["attempts"] == 2 and rows[1]["attempts"] == 1
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
    store.close()
    assert state.running[0].epochs == {}  # a re-run starts from no epochs


def test_a_trial_that_keeps_killing_the_job_is_given_up(db_url):
    store = ResultsStore(db_url)
    for _ in range(2):
        state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
        store.record(state.study_id, starts=[start(0)])
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=2)
    store.close()
    assert [t.number for t in state.given_up] == [0] and state.running == []
    assert state.finished[0].error == "the job died 2 times while this trial ran"


def test_one_run_holds_a_study(db_url):
    first, second = ResultsStore(db_url), ResultsStore(db_url)
    try:
        lease = first.acquire_lease("s")
        with pytest.raises(StudyBusy) as info:
            second.acquire_lease("s")
        assert str(os.getpid()) in str(info.value) and "\n" not in str(info.value)
        other = second.acquire_lease("t")  # another study is free
        first.heartbeat(lease)
        first.release_lease(lease)
        taken = second.acquire_lease("s")
        with pytest.raises(StudyBusy):
            first.heartbeat(lease)  # no longer the first run's
        second.release_lease(taken)
        second.release_lease(other)
    finally:
        first.close()
        second.close()
