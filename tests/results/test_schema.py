"""Schema versions, the writer's in-place upgrade, read-only readers and trial attempts."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import diel.results
from diel.errors import ResultsError
from diel.results import Checkpoint, ResultRecord, ResultsStore, StartedRecord, TrialStart, \
    format_trials
from tests.helpers.launch import run_diel_in_process

ROOT = Path(__file__).resolve().parents[2]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql(path: Path, *statements: str) -> list[tuple]:
    """Run statements with plain sqlite3 (closing the connection checkpoints the WAL)."""
    conn = sqlite3.connect(path)
    try:
        rows = [row for statement in statements for row in conn.execute(statement)]
        conn.commit()
        return rows
    finally:
        conn.close()


def columns(path: Path) -> set[str]:
    return {row[1] for row in sql(path, "PRAGMA table_info(trials)")}


def make_v6(path: Path) -> Path:
    """Turn a database of this code into one of schema 6: no segments table and no
    trials.distributions."""
    sql(path, "DROP TABLE segments", "ALTER TABLE trials DROP COLUMN distributions",
        "UPDATE diel_meta SET value = '6' WHERE key = 'schema_version'")
    return path


def make_v5(path: Path) -> Path:
    """Turn a database of this code into one of schema 5: no checkpoints and attempts
    tables."""
    make_v6(path)
    sql(path, "DROP TABLE checkpoints", "DROP TABLE attempts",
        "UPDATE diel_meta SET value = '5' WHERE key = 'schema_version'")
    return path


def make_v4(path: Path) -> Path:
    """Turn a database of this code into one of schema 4: no trials.queued_at, and
    started_at the time each trial was dispatched (as the fixtures' trials were: they
    never reported a start)."""
    make_v5(path)
    sql(path, "UPDATE trials SET started_at = queued_at",
        "ALTER TABLE trials DROP COLUMN queued_at",
        "UPDATE diel_meta SET value = '4' WHERE key = 'schema_version'")
    return path


def make_v3(path: Path) -> Path:
    """Turn a database of this code into one of schema 3: no studies.objectives and no
    trials.objective_values (every study has one objective)."""
    make_v4(path)
    sql(path, "ALTER TABLE studies DROP COLUMN objectives",
        "ALTER TABLE trials DROP COLUMN objective_values",
        "UPDATE diel_meta SET value = '3' WHERE key = 'schema_version'")
    return path


def make_v1(path: Path, journal: str = "wal") -> Path:
    """Turn a database of this code into one of the first release: no trials.attempts,
    no diel_meta and no study_leases table (nor the columns of schema 4)."""
    make_v3(path)
    sql(path, "ALTER TABLE trials DROP COLUMN attempts", "DROP TABLE diel_meta",
        "DROP TABLE study_leases")
    sql(path, f"PRAGMA journal_mode={journal}")
    assert "attempts" not in columns(path)
    return path


def attempts(url_or_path, study: str = "grid") -> dict[int, int]:
    with diel.results.open(url_or_path) as results:
        return {t["number"]: t["attempts"] for t in results.trials(study=study)}


def point(n: int) -> TrialStart:
    return TrialStart(n, {"x": n}, f'{{"x":{n}}}')


def test_a_new_database_records_its_schema_version(tmp_path):
    path = tmp_path / "new.db"
    ResultsStore(f"sqlite:///{path}").close()
    assert sql(path, "SELECT key, value FROM diel_meta") == [("schema_version", "7")]
    assert {"attempts", "objective_values", "queued_at", "distributions"} <= columns(path)


def test_attempts_count_every_dispatch(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = ResultsStore(url)
    state = store.open_study("grid", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[point(0), point(1)])
    store.close()
    assert attempts(url) == {0: 1, 1: 1}
    for expected in (2, 3):  # the job died; each resume dispatches both again
        store = ResultsStore(url)
        state = store.open_study("grid", "grid", "x", "maximize", {}, max_attempts=10)
        assert [(t.number, t.attempts) for t in state.running] == [(0, expected - 1),
                                                                   (1, expected - 1)]
        store.record(state.study_id, starts=[TrialStart(t.number, t.params, t.param_key)
                                            for t in state.running])
        store.close()
        assert attempts(url) == {0: expected, 1: expected}


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_readers_leave_a_v1_database_byte_for_byte_unchanged(db, journal):
    make_v1(db, journal)
    before = digest(db)
    with diel.results.open(db) as results:
        trials = results.trials(study="grid", sort="number")
        assert [t["number"] for t in trials] == [0, 1, 2, 3, 4, 5]
        assert all("attempts" not in t for t in trials)
        assert trials[1]["accuracy"] == 0.95 and trials[1]["params"]["layers"] == 2
        assert [t["number"] for t in results.trials(where=["lr<0.01"], study="grid",
                                                    sort="number")] == [2, 3]
        assert {s["name"]: s["ok"] for s in results.studies()} == {"grid": 3, "loss": 2}
        with pytest.raises(ValueError, match="attempts is not recorded"):
            results.trials(where=["attempts>1"])
        assert "attempts" not in format_trials(trials).splitlines()[0]
    for argv in (["results", str(db)], ["results", str(db), "--format", "csv"],
                 ["results", str(db), "--format", "json", "--where", "accuracy>0.5"],
                 ["studies", str(db)]):
        done = run_diel_in_process(*argv)
        assert done.returncode == 0, done.stderr
        assert "attempts" not in done.stdout
    done = subprocess.run([sys.executable, "-m", "diel", "results", str(db)], capture_output=True,
                          text=True, check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=60)   # and the command, to its process's end
    assert done.returncode == 0, done.stderr
    assert "attempts" not in done.stdout
    assert digest(db) == before
    assert "attempts" not in columns(db)
    assert sql(db, "SELECT name FROM sqlite_master WHERE name = 'diel_meta'") == []


def test_the_store_upgrades_a_v1_database_in_place(db, caplog):
    make_v1(db)
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{db}")
        store.close()
        ResultsStore(f"sqlite:///{db}").close()  # already upgraded: nothing to log
    upgrades = [r for r in caplog.records if "upgraded" in r.getMessage()]
    assert len(upgrades) == 1 and upgrades[0].levelno == logging.INFO
    assert "schema 1 to 7 (trials.attempts, study leases, objective values, " \
        "trials.queued_at, checkpoints and attempts, trial segments and distributions " \
        "added)" in upgrades[0].getMessage()
    assert sql(db, "SELECT value FROM diel_meta WHERE key = 'schema_version'") == [("7",)]
    assert attempts(db) == {n: 1 for n in range(6)}  # each row was dispatched once
    store = ResultsStore(f"sqlite:///{db}")
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    assert [t.number for t in state.running] == [5] and len(state.finished) == 5
    store.record(state.study_id, starts=[TrialStart(5, {"lr": 0.1}, "k")])
    store.close()
    assert attempts(db)[5] == 2


def test_a_v3_database_is_read_as_it_is_and_upgraded_by_the_store(db, caplog):
    make_v3(db)
    before = digest(db)
    with diel.results.open(db) as results:
        trials = results.trials(study="grid", sort="number")
        assert [t["number"] for t in trials] == [0, 1, 2, 3, 4, 5]
        assert all("objectives" not in t for t in trials) and trials[1]["attempts"] == 1
        assert {s["name"]: s["front"] for s in results.studies()} == {"grid": None, "loss": None}
        with pytest.raises(ValueError, match="has several objectives"):
            results.pareto()
    assert digest(db) == before and "objective_values" not in columns(db)
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{db}")
    assert any("from schema 3 to 7 (objective values, trials.queued_at, checkpoints and "
               "attempts, trial segments and distributions added)" in r.getMessage() for r in caplog.records)
    assert sql(db, "SELECT value FROM diel_meta WHERE key = 'schema_version'") == [("7",)]
    assert sql(db, "SELECT COUNT(*) FROM trials WHERE objective_values IS NULL") == [(8,)]
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    assert state.objectives == (("accuracy", "maximize"),) and len(state.finished) == 5
    assert state.finished[0].scores == (0.90,)
    two = store.open_study("two", "random", "accuracy", "maximize", {},
                           objectives=[("accuracy", "maximize"), ("loss", "minimize")])
    store.record(two.study_id, starts=[point(0)])
    store.record(two.study_id, results=[ResultRecord(0, "ok", 0.9, objective_values=(0.9, 0.1))])
    store.close()
    with diel.results.open(db) as results:
        assert [t["objectives"] for t in results.pareto()] == [{"accuracy": 0.9, "loss": 0.1}]


def test_a_newer_schema_is_refused_untouched(db):
    sql(db, "UPDATE diel_meta SET value = '8' WHERE key = 'schema_version'")
    before = digest(db)
    with pytest.raises(ResultsError, match=r"written by a newer diel \(schema 8\); upgrade diel"):
        ResultsStore(f"sqlite:///{db}")
    assert digest(db) == before
    with diel.results.open(db) as results:  # readers still read what they know
        assert len(results.trials(study="grid")) == 6


def run_twice(url: str, numbers: list[int], once: list[int]) -> None:
    """Trials ``numbers`` left running: ``once`` dispatched once, the others twice."""
    store = ResultsStore(url)
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[point(n) for n in numbers])
    store.close()
    store = ResultsStore(url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
    store.record(state.study_id, starts=[point(n) for n in numbers if n not in once])
    store.close()


def test_open_study_gives_up_trials_at_max_attempts(tmp_path):
    url = f"sqlite:///{tmp_path / 'g.db'}"
    run_twice(url, [0, 1, 2], once=[1])
    store = ResultsStore(url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=2)
    store.close()
    assert [t.number for t in state.running] == [1]
    assert [(t.number, t.status) for t in state.finished] == [(0, "failed"), (2, "failed")]
    assert [t.number for t in state.given_up] == [0, 2]
    assert state.given_up[0].error == "the job died 2 times while this trial ran"
    assert state.next_number == 3
    with diel.results.open(url) as results:
        rows = {t["number"]: t for t in results.trials(study="s")}
    for n in (0, 2):
        assert rows[n]["status"] == "failed" and rows[n]["finished_at"] is not None
        assert rows[n]["error"] == "the job died 2 times while this trial ran"
        assert rows[n]["attempts"] == 2
    assert rows[1]["status"] == "running" and rows[1]["error"] is None
    store = ResultsStore(url)  # given up for good: a later resume finds them finished
    again = store.open_study("s", "grid", "x", "maximize", {})
    assert [t.number for t in again.running] == [1] and again.given_up == []
    single = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=1)
    store.close()
    assert [(t.number, t.error) for t in single.given_up] == \
        [(1, "the job died 1 time while this trial ran")]
    assert single.running == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_attempts_must_be_a_positive_integer(tmp_path, bad):
    store = ResultsStore(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        with pytest.raises(ValueError, match="max_attempts must be an integer >= 1"):
            store.open_study("s", "grid", "x", "maximize", {}, max_attempts=bad)
    finally:
        store.close()


def test_tables_show_attempts_only_when_a_trial_ran_again(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    store = ResultsStore(url)
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[point(0)])
    store.close()
    with diel.results.open(url) as results:
        once = results.trials()
    assert once[0]["attempts"] == 1
    assert "attempts" not in format_trials(once).splitlines()[0]
    assert "attempts" not in format_trials(once, "csv").splitlines()[0]
    assert json.loads(format_trials(once, "json"))[0]["attempts"] == 1
    run_twice(url, [1], once=[])
    with diel.results.open(url) as results:
        rows = results.trials(sort="number")
        assert [t["number"] for t in results.trials(where=["attempts>1"])] == [1]
        assert [t["number"] for t in results.trials(sort="attempts:desc")] == [1, 0]
    header = format_trials(rows).splitlines()[0].split()
    assert header[header.index("worker") + 1] == "attempts"


def test_a_failed_upgrade_changes_nothing(db, monkeypatch):
    import diel.results._schema as schema
    make_v1(db)

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")
    monkeypatch.setattr(schema.METADATA, "create_all", fail)
    with pytest.raises(ResultsError, match="cannot create or upgrade the results tables"):
        ResultsStore(f"sqlite:///{db}")
    assert "attempts" not in columns(db)  # the ALTER TABLE was rolled back with the rest
    assert sql(db, "SELECT name FROM sqlite_master WHERE name = 'diel_meta'") == []


def test_taking_back_a_rerun_keeps_its_row_and_count(tmp_path):
    url = f"sqlite:///{tmp_path / 'f.db'}"
    run_twice(url, [0, 1], once=[1])  # trial 0 dispatched twice, trial 1 once
    store = ResultsStore(url)
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
    store.record(state.study_id, starts=[point(0), point(1), point(2)])
    store.forget(state.study_id, [0, 1, 2])  # taken back from the queue, never started
    state = store.open_study("s", "grid", "x", "maximize", {}, max_attempts=5)
    store.close()
    assert [(t.number, t.attempts) for t in state.running] == [(0, 2), (1, 1)]
    assert attempts(url, study="s") == {0: 2, 1: 1}  # trial 2 (a first dispatch) is gone


def test_an_in_memory_database_works(tmp_path):
    store = ResultsStore("sqlite://")
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[point(0)])
    assert store.open_study("s", "grid", "x", "maximize", {}).running[0].attempts == 1
    store.close()



def test_a_v4_database_gets_queued_at_from_its_started_at(db, caplog):
    make_v4(db)
    dispatched = dict(sql(db, "SELECT number, started_at FROM trials WHERE study_id = 1"))
    before = digest(db)
    with diel.results.open(db) as results:   # a reader reads it as it is
        assert len(results.trials(study="grid")) == 6
    assert digest(db) == before and "queued_at" not in columns(db)
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{db}")
    assert any("from schema 4 to 7 (trials.queued_at, checkpoints and attempts, trial "
               "segments and distributions added)"
               in r.getMessage() for r in caplog.records)
    assert sql(db, "SELECT value FROM diel_meta WHERE key = 'schema_version'") == [("7",)]
    # every row keeps its dispatch time, now in both columns
    assert dict(sql(db, "SELECT number, queued_at FROM trials WHERE study_id = 1")) == dispatched
    assert dict(sql(db, "SELECT number, started_at FROM trials WHERE study_id = 1")) == dispatched
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(5, {"lr": 0.1}, "k")])  # run again
    store.close()
    [(queued, started)] = sql(db, "SELECT queued_at, started_at FROM trials "
                                  "WHERE number = 5 AND study_id = 1")
    assert started is None and queued > dispatched[5]   # queued anew, not started yet



def stamps(url: str, number: int) -> tuple[datetime, datetime | None, int | None]:
    """(queued_at, started_at, worker) of trial ``number``, in UTC."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            queued, started, worker = conn.execute(
                text("SELECT queued_at, started_at, worker FROM trials WHERE number = :n"),
                {"n": number}).one()
    finally:
        engine.dispose()
    return (utc(queued), utc(started) if started else None, worker)


def utc(moment: datetime | str) -> datetime:
    moment = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else \
        moment.astimezone(timezone.utc)


def test_started_at_is_when_a_worker_took_the_trial(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "x", "maximize", {})
    store.record(state.study_id, starts=[point(0), point(1), point(2)])
    queued = stamps(db_url, 0)[0]
    assert [stamps(db_url, n)[1:] for n in (0, 1, 2)] == [(None, None)] * 3  # all queued
    took, later = queued + timedelta(seconds=3), queued + timedelta(seconds=5)
    store.record(state.study_id, started=[StartedRecord(0, 1, took)],
                 results=[ResultRecord(0, "ok", 0.5, worker=1)])
    assert stamps(db_url, 0) == (queued, took, 1)
    # a trial that started and ended between two commits: the result carries its start
    store.record(state.study_id, results=[ResultRecord(1, "ok", 0.5, worker=0, started_at=later)])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.6, worker=1)])  # keeps it
    store.close()
    assert stamps(db_url, 1) == (queued, later, 0) and stamps(db_url, 0)[1] == took
    assert stamps(db_url, 2)[1:] == (None, None)       # still waiting in the queue
    with diel.results.open(db_url) as results:          # readers cope with a NULL start
        rows = {t["number"]: t for t in results.trials(study="s")}
    assert rows[2]["started_at"] is None and rows[0]["started_at"] is not None


def test_a_v5_database_gets_checkpoints_and_attempts(db, caplog):
    """Schema 6: readers read a schema-5 database as it is; the store adds the two
    tables, empty, and a trial left running there resumes as any other (its first
    attempt recorded being its second dispatch)."""
    make_v5(db)
    before = digest(db)
    with diel.results.open(db) as results:
        assert len(results.trials(study="grid")) == 6
        assert results.studies("grid")[0]["paused"] == 0
    assert digest(db) == before
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{db}")
    assert any("from schema 5 to 7 (checkpoints and attempts, trial segments and "
               "distributions added)" in r.getMessage()
               for r in caplog.records)
    assert sql(db, "SELECT value FROM diel_meta WHERE key = 'schema_version'") == [("7",)]
    assert sql(db, "SELECT COUNT(*) FROM checkpoints") == sql(db, "SELECT COUNT(*) FROM attempts") \
        == [(0,)]
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    [left] = state.running
    assert (left.number, left.attempts, left.checkpoints) == (5, 1, ())
    store.record(state.study_id, starts=[TrialStart(5, left.params, left.param_key)])
    store.record(state.study_id, checkpoints=[Checkpoint(5, 2, "/c/step-2.ckpt", 10, "crc32c:1")],
                 results=[ResultRecord(5, "paused", epoch=2)])
    assert [(a["attempt"], a["status"]) for a in store.attempts("grid", 5)] == [(1, "paused")]
    assert [c.step for c in store.checkpoints("grid", 5)] == [2]
    store.close()
    with diel.results.open(db) as results:
        [paused] = results.trials(study="grid", status="paused")
        assert (paused["number"], paused["attempts"]) == (5, 1)   # the pause is not charged
        assert results.studies("grid")[0]["paused"] == 1


def test_a_v6_database_gets_segments_and_distributions(db, caplog):
    """Schema 7: readers read a schema-6 database as it is (no lineage to show); the
    store adds the segments table, empty, and trials.distributions, NULL; a trial left
    running there resumes with no segment (it ran with one parameter set) and takes an
    exploit as its first segment."""
    make_v6(db)
    before = digest(db)
    with diel.results.open(db) as results:
        assert len(results.trials(study="grid")) == 6
        assert results.lineage(0, study="grid") == []
    assert digest(db) == before
    with caplog.at_level(logging.INFO, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{db}")
    assert any("from schema 6 to 7 (trial segments and distributions added)" in r.getMessage()
               for r in caplog.records)
    assert sql(db, "SELECT value FROM diel_meta WHERE key = 'schema_version'") == [("7",)]
    assert sql(db, "SELECT COUNT(*) FROM segments") == [(0,)]
    assert sql(db, "SELECT COUNT(*) FROM trials WHERE distributions IS NULL") == [(8,)]
    state = store.open_study("grid", "grid", "accuracy", "maximize", {})
    [left] = state.running
    assert (left.segments, left.distributions) == ((), {})
    store.record(state.study_id, starts=[TrialStart(5, left.params, left.param_key)])
    assert store.segments("grid", 5) == []
    store.record(state.study_id, starts=[TrialStart(5, {"lr": 0.5}, '{"lr":0.5}',
                                                    resumed_from=2, parent_trial=1,
                                                    parent_step=2)])
    [exploit] = store.segments("grid", 5)
    assert (exploit.index, exploit.from_step, exploit.params, exploit.parent_trial) == \
        (0, 2, {"lr": 0.5}, 1)
    store.close()
