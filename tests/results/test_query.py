"""diel.results: the store's resume view and the query API (filters are bound)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import event

import diel.results
from diel.errors import ResultsError
from diel.results import ResultsStore, TrialStart, default_url, parse_filter, resolve_url


def test_default_and_resolved_urls(tmp_path):
    assert default_url(tmp_path / "mnist_grid.yaml") == f"sqlite:///{tmp_path / 'mnist_grid.db'}"
    assert resolve_url("r.db", tmp_path) == f"sqlite:///{tmp_path / 'r.db'}"
    assert resolve_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


def test_sqlite_is_in_wal_mode(db):
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_a_study_splits_finished_and_running(db):
    store = ResultsStore(f"sqlite:///{db}")
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    assert [t.number for t in state.finished] == [0, 1, 2, 3, 4]
    assert [t.number for t in state.running] == [5] and state.next_number == 6
    assert state.config == {"seed": 1}
    assert state.finished[0].epochs == {1: {"accuracy": 0.5}, 2: {"accuracy": 0.9}}
    # re-dispatching a trial left running reuses its row
    store.record(state.study_id, starts=[TrialStart(5, {"lr": 0.1, "activation": "tanh",
                                                       "layers": 1}, "k")])
    store.close()
    with diel.results.open(db) as results:
        assert len(results.trials(study="grid")) == 6


def test_studies(db):
    with diel.results.open(str(db)) as results:
        studies = {s["name"]: s for s in results.studies()}
    assert studies["grid"]["trials"] == 6 and studies["grid"]["ok"] == 3
    assert studies["grid"]["failed"] == studies["grid"]["pruned"] == studies["grid"]["running"] == 1
    assert studies["grid"]["best"] == 0.95 and studies["loss"]["best"] == 0.3


def test_default_order_is_best_first_per_direction(db):
    with diel.results.open(db) as results:
        assert [t["number"] for t in results.trials(study="grid")] == [1, 0, 2, 4, 3, 5]
        assert [t["number"] for t in results.trials(study="loss")] == [1, 0]
        top = results.trials(study="grid", top=2)
    assert [t["accuracy"] for t in top] == [0.95, 0.9]
    assert top[0]["params"] == {"lr": 0.01, "activation": "relu", "layers": 2}
    assert top[0]["metrics"] == {"f1": 0.95} and top[0]["worker"] == 1


@pytest.mark.parametrize("where, numbers", [
    (["lr<0.01"], [2, 3]),
    (["lr<=0.01"], [1, 2, 3, 4]),
    (["activation=relu"], [0, 1, 3]),
    (["activation!=relu"], [2, 4, 5]),
    (["accuracy>=0.9"], [0, 1]),
    (["layers>1", "activation=tanh"], [2, 4]),
    (["params.layers=2"], [1, 2]),
    (["metrics.f1>0.85"], [0, 1]),
    (["status=pruned"], [4]),
    (["number>3"], [4, 5]),
    (["activation = 'tanh'"], [2, 4, 5]),
    (["activation=relu' OR '1'='1"], []),
    (["activation=relu\" OR 1=1 --"], []),
])
def test_where_filters(db, where, numbers):
    with diel.results.open(db) as results:
        found = results.trials(study="grid", where=where, sort="number")
    assert [t["number"] for t in found] == numbers


def test_filter_values_are_bound_parameters(db):
    seen = []
    with diel.results.open(db) as results:
        event.listen(results.db.engine, "before_cursor_execute",
                     lambda conn, cur, statement, params, *a: seen.append((statement, params)))
        results.trials(where=["activation=x' OR 1=1 --", "lr<0.5"])
    statement, params = seen[-1]
    assert "OR 1=1" not in statement and "0.5" not in statement
    assert "x' OR 1=1 --" in params and 0.5 in params


@pytest.mark.parametrize("text, words", [
    ("lr", "expected KEY OP VALUE"),
    ("lr<", "expected KEY OP VALUE"),
    ("lr~0.1", "expected KEY OP VALUE"),
    ("lr=<0.1", "expected KEY OP VALUE"),
    ("activation<relu", "< needs a number"),
    ("accuracy=high", "accuracy is a number"),
    ("status=done", "status is one of"),
    ("1lr=3", "expected KEY OP VALUE"),
])
def test_malformed_filters(text, words):
    with pytest.raises(ValueError) as info:
        parse_filter(text)
    assert repr(text) in str(info.value) and words in str(info.value)


def test_sort_status_and_top(db):
    with diel.results.open(db) as results:
        assert [t["number"] for t in results.trials(study="grid", sort="time:desc")] == \
            [2, 1, 0, 4, 3, 5]
        assert [t["number"] for t in results.trials(study="grid", sort="lr")][:2] in \
            ([2, 3], [3, 2])
        assert [t["number"] for t in results.trials(study="grid", sort="activation:desc",
                                                    status="ok")] == [2, 0, 1]
        assert [t["status"] for t in results.trials(status="failed")] == ["failed"]
        for bad in ({"sort": "lr:up"}, {"top": 0}, {"status": "done"}):
            with pytest.raises(ValueError):
                results.trials(**bad)


def test_open_errors(tmp_path):
    with pytest.raises(ResultsError, match="no results database"):
        diel.results.open(tmp_path / "missing.db")
    sqlite3.connect(tmp_path / "other.db").execute("create table x (y)").connection.close()
    with pytest.raises(ResultsError, match="not a diel results database"):
        diel.results.open(tmp_path / "other.db")
