"""The study lease and the resume half of the storage contract, on every backend
(``db_url``: SQLite and a real PostgreSQL server, see conftest.py): who holds a study,
when a lease is stale, a refused resume writes nothing, a changed objective is applied
in one transaction, an interrupted dispatch is not charged, and schema 2 becomes 4."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, update

import diel.results
from diel.errors import ConfigError, StudyBusy
from diel.results import ResultRecord, ResultsStore, StartedRecord, TrialStart
from diel.results import _leases
from diel.results._models import LeaseModel, utcnow

LEASES = LeaseModel.__table__


def start(n: int) -> TrialStart:
    return TrialStart(n, {"x": n}, f'{{"x":{n}}}')


def set_lease(url: str, study: str, **values) -> None:
    """Change the lease row of ``study`` behind the store's back (another run's doing)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(update(LEASES).where(LEASES.c.study == study).values(**values))
    finally:
        engine.dispose()


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=30)
    return int(done.stdout)


@pytest.fixture
def stores(db_url):
    """Two stores on one database: two runs of one study."""
    first, second = ResultsStore(db_url), ResultsStore(db_url)
    yield first, second
    first.close()
    second.close()


def test_a_live_lease_names_its_holder(stores):
    first, second = stores
    lease = first.acquire_lease("s")
    with pytest.raises(StudyBusy) as info:
        second.acquire_lease("s")
    message = str(info.value)
    assert message.startswith(f"study 's' is being run by host {_leases.HOST} pid {os.getpid()} "
                              f"since {lease.started_at:%Y-%m-%d %H:%M:%S} UTC (heartbeat ")
    assert "s ago)" in message and "\n" not in message
    first.release_lease(lease)
    second.release_lease(second.acquire_lease("s"))


def test_a_lease_without_heartbeat_is_taken_over(stores, db_url, caplog):
    first, second = stores
    old = first.acquire_lease("s")
    set_lease(db_url, "s", host="elsewhere", pid=1,
              heartbeat_at=utcnow() - timedelta(seconds=_leases.STALE_AFTER_S + 5))
    with caplog.at_level(logging.WARNING, logger="diel.results"):
        new = second.acquire_lease("s")
    [warning] = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert warning.startswith("taking over the lease of study 's' from host elsewhere pid 1 "
                              "(no heartbeat for ")
    with pytest.raises(StudyBusy, match="this run lost its lease"):
        first.heartbeat(old)
    first.release_lease(old)   # not the first run's any more: nothing happens
    with pytest.raises(StudyBusy):
        first.acquire_lease("s")
    second.heartbeat(new)
    second.release_lease(new)


def test_a_recent_heartbeat_from_elsewhere_keeps_the_lease(stores, db_url):
    first, second = stores
    first.acquire_lease("s")
    set_lease(db_url, "s", host="elsewhere", pid=1,
              heartbeat_at=utcnow() - timedelta(seconds=_leases.STALE_AFTER_S - 5))
    with pytest.raises(StudyBusy, match=r"host elsewhere pid 1 .*heartbeat 1\d s ago"):
        second.acquire_lease("s")


def test_a_dead_holder_on_this_host_is_taken_over_at_once(stores, db_url, caplog):
    first, second = stores
    first.acquire_lease("s")
    set_lease(db_url, "s", pid=dead_pid(),
              heartbeat_at=utcnow() - timedelta(seconds=3 * _leases.HEARTBEAT_S))
    with caplog.at_level(logging.WARNING, logger="diel.results"):
        second.acquire_lease("s")
    assert any("its process is gone" in r.getMessage() for r in caplog.records)


def test_a_dead_holder_that_just_beat_is_waited_for(stores, db_url, monkeypatch):
    first, second = stores
    first.acquire_lease("s")
    set_lease(db_url, "s", pid=dead_pid(), heartbeat_at=utcnow())
    naps = []
    monkeypatch.setattr(_leases.time, "sleep", naps.append)  # no real wait in the test
    with pytest.raises(StudyBusy):   # it did not get older while we "slept"
        second.acquire_lease("s")
    assert len(naps) == 1 and 0 < naps[0] <= 2 * _leases.HEARTBEAT_S

    def age(seconds: float) -> None:  # the holder stays silent meanwhile
        set_lease(db_url, "s", heartbeat_at=utcnow() - timedelta(seconds=2 * _leases.HEARTBEAT_S))
    set_lease(db_url, "s", heartbeat_at=utcnow())
    monkeypatch.setattr(_leases.time, "sleep", age)
    second.acquire_lease("s")


def test_a_pid_of_this_host_in_another_namespace_that_beats_is_alive(stores, db_url,
                                                                      monkeypatch):
    """Same host name, pid not visible (a container), but its heartbeat moves on."""
    first, second = stores
    first.acquire_lease("s")
    set_lease(db_url, "s", pid=dead_pid(), heartbeat_at=utcnow())
    monkeypatch.setattr(_leases.time, "sleep",
                        lambda seconds: set_lease(db_url, "s", heartbeat_at=utcnow()))
    with pytest.raises(StudyBusy):
        second.acquire_lease("s")


def test_a_refused_resume_writes_nothing(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {"space": 1})
    store.record(state.study_id, starts=[start(0), start(1)],
                 started=[StartedRecord(n, 1, utcnow()) for n in (0, 1)])
    store.close()   # both left running, run once

    def refuse(stored):
        assert stored.strategy == "grid" and stored.config == {"space": 1}
        assert [t.number for t in stored.given_up] == [0, 1]  # about to be given up...
        raise ConfigError("settings.strategy", "changed")
    store = ResultsStore(db_url)
    with pytest.raises(ConfigError):
        store.open_study("s", "random", "loss", "minimize", {"space": 2}, max_attempts=1,
                         check=refuse)
    store.close()
    with diel.results.open(db_url) as results:   # ...but nothing was written
        assert [t["status"] for t in results.trials()] == ["running", "running"]
        [study] = results.studies()
    assert (study["strategy"], study["objective"], study["direction"]) == \
        ("grid", "accuracy", "maximize")


def test_reopening_keeps_the_stored_settings_until_rescored(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[start(0), start(1)])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.9, accuracy=0.9, loss=0.5),
                                          ResultRecord(1, "ok", 0.7, accuracy=0.7, loss=0.1)])
    again = store.open_study("s", "grid", "-loss", "maximize", {})
    assert (again.objective, again.direction) == ("accuracy", "maximize")
    store.rescore(state.study_id, [("-loss", "maximize")], {0: (-0.5,), 1: (-0.1,)})
    store.close()
    with diel.results.open(db_url) as results:
        [study] = results.studies()
        assert (study["objective"], study["best"]) == ("-loss", -0.1)
        assert [t["number"] for t in results.trials()] == [1, 0]


def test_rescoring_moves_a_study_between_one_objective_and_several(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[start(0), start(1), start(2)])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.9, accuracy=0.9, loss=0.5),
                                          ResultRecord(1, "ok", 0.7, accuracy=0.7, loss=0.1),
                                          ResultRecord(2, "failed", error="boom")])
    two = [("accuracy", "maximize"), ("loss", "minimize")]
    store.rescore(state.study_id, two, {0: (0.9, 0.5), 1: (0.7, 0.1), 2: None})
    again = store.open_study("s", "grid", "accuracy", "maximize", {})
    assert again.objectives == tuple(two)
    assert [t.scores for t in again.finished] == [(0.9, 0.5), (0.7, 0.1), (None,)]
    with diel.results.open(db_url) as results:
        assert [t["number"] for t in results.pareto()] == [0, 1]
    store.rescore(state.study_id, [("accuracy", "maximize"), ("loss", "maximize")], {})
    with diel.results.open(db_url) as results:   # a direction changed: the values stay
        assert [t["number"] for t in results.pareto()] == [0]
    store.rescore(state.study_id, [("loss", "minimize")], {0: (0.5,), 1: (0.1,), 2: None})
    single = store.open_study("s", "grid", "loss", "minimize", {})
    store.close()
    assert single.objectives == (("loss", "minimize"),)
    assert [(t.objective, t.objective_values) for t in single.finished] == \
        [(0.5, None), (0.1, None), (None, None)]
    with diel.results.open(db_url) as results:
        [study] = results.studies()
        assert (study["objective"], study["direction"], study["front"]) == ("loss", "minimize", None)


def test_an_interrupted_dispatch_is_not_charged(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[start(0), start(1)])
    store.forget(state.study_id, [0, 1], interrupted=True)
    store.close()
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=1)
    assert [(t.number, t.attempts) for t in state.running] == [(0, 0), (1, 0)]
    assert state.given_up == []   # an interrupt is not a crash
    store.record(state.study_id, starts=[start(0), start(1)])
    store.close()
    with diel.results.open(db_url) as results:
        assert [t["attempts"] for t in results.trials(sort="number")] == [1, 1]


def test_a_schema_2_database_gets_the_lease_table(tmp_path, caplog):
    path = tmp_path / "v2.db"
    store = ResultsStore(f"sqlite:///{path}")
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[start(0)])
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE study_leases")
    conn.execute("ALTER TABLE studies DROP COLUMN objectives")
    conn.execute("ALTER TABLE trials DROP COLUMN objective_values")
    conn.execute("ALTER TABLE trials DROP COLUMN queued_at")
    conn.execute("DROP TABLE segments")
    conn.execute("ALTER TABLE trials DROP COLUMN distributions")
    conn.execute("UPDATE diel_meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with diel.results.open(path) as results:   # a reader reads it as it is
        assert [t["attempts"] for t in results.trials()] == [1]
    assert path.read_bytes() == before
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{path}")
    assert any("from schema 2 to 7 (study leases, objective values, trials.queued_at, "
               "checkpoints and attempts, trial segments and distributions added)"
               in r.getMessage()
               for r in caplog.records)
    store.release_lease(store.acquire_lease("s"))
    store.close()
