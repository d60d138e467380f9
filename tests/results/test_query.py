"""diel.results: the store's resume view and the query API (filters are bound), on
SQLite and on PostgreSQL (``results_db``: see conftest.py)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import event, text

import diel.results
from diel.errors import ResultsError
from diel.results import ResultRecord, ResultsStore, TrialStart, default_url, parse_filter, \
    resolve_url


def test_default_and_resolved_urls(tmp_path):
    assert default_url(tmp_path / "mnist_grid.yaml") == f"sqlite:///{tmp_path / 'mnist_grid.db'}"
    assert resolve_url("r.db", tmp_path) == f"sqlite:///{tmp_path / 'r.db'}"
    assert resolve_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


def test_sqlite_is_in_wal_mode(shared_db):
    with sqlite3.connect(shared_db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_a_study_splits_finished_and_running(results_db):
    db = results_db
    store = ResultsStore(db)
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


def test_studies(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        studies = {s["name"]: s for s in results.studies()}
    assert studies["grid"]["trials"] == 6 and studies["grid"]["ok"] == 3
    assert studies["grid"]["failed"] == studies["grid"]["pruned"] == studies["grid"]["running"] == 1
    assert studies["grid"]["best"] == 0.95 and studies["loss"]["best"] == 0.3


def test_one_study_by_name_is_the_same_entry(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        every = {s["name"]: s for s in results.studies()}
        assert results.studies("loss") == [every["loss"]]
        with pytest.raises(ValueError, match="no study 'nope' in .*; its studies: grid, loss"):
            results.studies("nope")


def test_default_order_is_best_first_per_direction(shared_results_db):
    with diel.results.open(shared_results_db) as results:
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
def test_where_filters(shared_results_db, where, numbers):
    with diel.results.open(shared_results_db) as results:
        found = results.trials(study="grid", where=where, sort="number")
    assert [t["number"] for t in found] == numbers


def test_filter_values_are_bound_parameters(shared_results_db):
    seen = []
    with diel.results.open(shared_results_db) as results:
        event.listen(results.db.engine, "before_cursor_execute",
                     lambda conn, cur, statement, params, *a: seen.append((statement, params)))
        results.trials(where=["activation=x' OR 1=1 --", "lr<0.5"])
    for statement, _ in seen:   # the trials, and what the keys hold (nothing matched)
        assert "OR 1=1" not in statement and "0.5" not in statement
        assert "activation" not in statement  # JSON keys are bound too
    statement, params = next((st, p) for st, p in seen if "ORDER BY" in st)
    values = list(params.values()) if isinstance(params, dict) else list(params)
    assert "x' OR 1=1 --" in values and 0.5 in values


@pytest.mark.parametrize("text, words", [
    ("lr", "expected KEY OP VALUE"),
    ("lr<", "expected KEY OP VALUE"),
    ("lr~0.1", "expected KEY OP VALUE"),
    ("lr=<0.1", "expected KEY OP VALUE"),
    ("activation<relu", "< compares numbers, got the string 'relu'"),
    ("lr<'0.1'", "got the string '0.1'; write it unquoted to compare numbers: lr<0.1"),
    ("flag>=true", ">= compares numbers, got the boolean true"),
    ("lr>null", "> compares numbers, got null"),
    ("accuracy=high", "accuracy is a number, got the string 'high'"),
    ('accuracy="0.9"', "write it unquoted to compare numbers: accuracy=0.9"),
    ("epoch=true", "epoch is a number, got the boolean true"),
    ("status=done", "status is one of running, ok, failed, pruned, paused, got done"),
    ("status=3", "status is one of running, ok, failed, pruned, paused, got 3"),
    ('name="it', "the value opens a quote (\") but does not end with it"),
    ("name='", "the value opens a quote (') but does not end with it"),
    ("1lr=3", "expected KEY OP VALUE"),
    ("params.=3", "name the field"),
    ("loss=.nan", "NaN equals nothing; diel stores a NaN as null (KEY=null)"),
])
def test_malformed_filters(text, words):
    with pytest.raises(ValueError) as info:
        parse_filter(text)
    assert repr(text) in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("text, kind, value", [
    ('batch="16"', "string", "16"),
    ("batch='16'", "string", "16"),
    ("batch=16", "number", 16),
    ("name=\"it's\"", "string", "it's"),
    ("name='it's'", "string", "it's"),     # one pair removed, the quote inside kept
    ("name=it's", "string", "it's"),
    ("name='\"x\"'", "string", '"x"'),
    ('name=""', "string", ""),
    ('name = " a " ', "string", " a "),
    ("lr=1e-3", "number", 0.001),
    ("lr=5e+2", "number", 500.0),
    ("lr=.5", "number", 0.5),
    ("lr=-2.", "number", -2.0),
    ("lr=1_000", "number", 1000),
    ("lr<inf", "number", float("inf")),
    ("lr>-Infinity", "number", float("-inf")),
    ("lr=.inf", "number", float("inf")),
    ("lr=nan", "string", "nan"),
    ("lr=0x10", "number", 16),
    ("lr=0o17", "number", 15),
    ("lr=0b101", "string", "0b101"),
    ("lr=2024-01-31", "string", "2024-01-31"),
    ("lr=1e400", "number", float("inf")),
    ("number>9223372036854775807", "number", 9223372036854775807),
    ("number>9223372036854775808", "number", 9223372036854775808.0),   # past 64 bits: a float
    ("number<" + "9" * 5000, "number", float("inf")),
    ("number<0x" + "f" * 5000, "number", float("inf")),
    ("lr=-0x" + "f" * 30, "string", "-0x" + "f" * 30),   # no sign before YAML's 0x
    ("flag=true", "boolean", True),
    ("flag!=false", "boolean", False),
    ("flag=True", "boolean", True),
    ("flag=FALSE", "boolean", False),
    ("flag=tRue", "string", "tRue"),
    ("flag=yes", "string", "yes"),
    ("name=null", "null", None),
    ("name=~", "null", None),
    ("name='null'", "string", "null"),
])
def test_how_a_value_is_read(text, kind, value):
    f = parse_filter(text)
    assert (f.kind, f.value) == (kind, value) and type(f.value) is type(value)


def test_sort_status_and_top(shared_results_db):
    with diel.results.open(shared_results_db) as results:
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
    with pytest.raises(ResultsError, match=r"other.db is not a diel results database: no "
                                           r"studies or trials table \(its tables: x\)"):
        diel.results.open(tmp_path / "other.db")
    (tmp_path / "empty.db").touch()
    with pytest.raises(ResultsError, match="empty.db is not a diel results database: the "
                                           "file is empty"):
        diel.results.open(tmp_path / "empty.db")
    (tmp_path / "notes.txt").write_text("SQLite is great\n" * 20)
    with pytest.raises(ResultsError, match="not a SQLite database file"):
        diel.results.open(tmp_path / "notes.txt")
    with pytest.raises(ResultsError, match="is not a diel results database: not a file"):
        diel.results.open(tmp_path)


def test_a_table_of_another_shape_is_not_ours(tmp_path):
    path = tmp_path / "shaped.db"
    sqlite3.connect(path).executescript(
        "create table studies (id, name); create table trials (id, x)").close()
    with pytest.raises(ResultsError, match="its studies table lacks the columns strategy, "):
        diel.results.open(path)


@pytest.mark.parametrize("url, words", [
    ("foo://x", "not a database URL SQLAlchemy can open"),
    ("postgresql+psycopg://u@h:port/d", "not a database URL SQLAlchemy can open"),
    ("mysql+mysqldb://u@h/d", "its driver is not installed"),
])
def test_url_mistakes_are_usage_errors(url, words):
    with pytest.raises(ResultsError, match=words) as info:
        diel.results.open(url)
    assert info.value.__cause__ is None  # what the CLI reports with exit status 2


@pytest.mark.postgres
def test_an_empty_postgresql_database_is_not_ours(postgres_url):
    with pytest.raises(ResultsError, match="is not a diel results database: no studies or "
                                           r"trials table \(it has no tables\)") as info:
        diel.results.open(postgres_url)
    assert info.value.__cause__ is None


@pytest.mark.parametrize("kwargs, words", [
    ({"where": ["lrr<0.1"]}, "unknown key 'lrr' in filter 'lrr<0.1' (did you mean 'lr'?)"),
    ({"where": ["params.f1>0"]}, "unknown key 'params.f1'"),
    ({"where": ["metrics.lr>0"]}, "unknown key 'metrics.lr'"),
    ({"sort": "accuracyy:desc"}, "in sort 'accuracyy:desc' (did you mean 'accuracy'?)"),
    ({"sort": "params.layer"}, "(did you mean 'params.layers'?)"),
])
def test_unknown_keys_list_the_keys_there_are(shared_results_db, kwargs, words):
    with diel.results.open(shared_results_db) as results:
        with pytest.raises(ValueError) as info:
            results.trials(**kwargs)
    message = str(info.value)
    assert words in message and "\n" not in message
    assert "columns: number, status, objective, accuracy, loss, time, epoch, worker, " \
           "attempts; parameters: activation, layers, lr; metrics: f1" in message


def test_bare_names_are_parameters_then_metrics(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        assert [t["number"] for t in results.trials(where=["f1>0.85"], sort="number")] == [0, 1]
        # a float parameter equals the number written (moved from the master's pruner test)
        assert [t["number"] for t in results.trials(study="grid", where=["lr=0.01"],
                                                    sort="number")] == [1, 4]
        assert [t["number"] for t in results.trials(study="grid", sort="f1:desc")][:3] == [1, 0, 2]
        keys = results.keys()
    assert keys.params == {"lr", "activation", "layers"} and keys.metrics == {"f1"}


def test_an_unknown_study_lists_the_studies(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        with pytest.raises(ValueError, match="no study 'gird' in .*; its studies: grid, loss"):
            results.trials(study="gird")


def test_numeric_filters_skip_values_that_are_not_numbers(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    params = [{"batch": 32}, {"batch": "auto"}, {"batch": 128}]
    store.record(state.study_id, starts=[TrialStart(n, p, str(n)) for n, p in enumerate(params)])
    store.record(state.study_id, results=[ResultRecord(n, "ok", 0.5) for n in range(3)])
    store.close()
    with diel.results.open(db_url) as results:
        assert [t["number"] for t in results.trials(where=["batch<64"])] == [0]
        assert [t["number"] for t in results.trials(where=["batch!=32"], sort="number")] == [2]
        assert [t["number"] for t in results.trials(where=["batch=auto"])] == [1]
        # the same order on every backend: numbers by value, then strings (ascending)
        assert [t["number"] for t in results.trials(sort="batch")] == [0, 2, 1]
        assert [t["number"] for t in results.trials(sort="batch:desc")] == [1, 2, 0]


def test_a_parameter_of_a_study_without_trials_is_known(db_url):
    store = ResultsStore(db_url)
    store.open_study("fresh", "grid", "accuracy", "maximize",
                     {"space": {"momentum": {"values": [0.5, 0.9]}}})
    store.close()
    with diel.results.open(db_url) as results:
        assert results.trials(where=["momentum>0.6"]) == []
        with pytest.raises(ValueError, match="parameters: momentum; metrics: none recorded"):
            results.trials(where=["momentun>0.6"])


def test_readers_cannot_write(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        with pytest.raises(ResultsError, match="read-only|readonly"):
            with results.db.session() as s:
                s.execute(text("CREATE TABLE intruder (x INTEGER)"))
        assert len(results.trials()) == 8


KINDS = [  # number, params, metrics: what one key may hold across trials
    (0, {"batch": "16", "mode": "16", "size": 10, "name": "it's", "flag": True},
     {"note": 'say "hi"'}),
    (1, {"batch": 16, "mode": "32", "size": 0.001, "name": "a,b", "flag": False}, {"note": None}),
    (2, {"batch": 32, "mode": "16", "size": 1000, "name": "O'Brien", "flag": True}, {}),
    (3, {"batch": "auto", "mode": "32", "size": 0.5}, {}),
]


@pytest.fixture(scope="module")
def kinds_db(module_databases):
    """Study 'kinds' (KINDS), and study 'other' where mode holds numbers; written once
    per module and backend, as the tests using it only read."""
    db_url = module_databases()
    store = ResultsStore(db_url)
    state = store.open_study("kinds", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(n, p, str(n)) for n, p, _ in KINDS])
    store.record(state.study_id, results=[ResultRecord(n, "ok", n / 10, accuracy=n / 10,
                                                       metrics=m) for n, _, m in KINDS[:3]])
    other = store.open_study("other", "grid", "accuracy", "maximize", {})
    store.record(other.study_id, starts=[TrialStart(0, {"mode": 16}, "0")])
    store.close()
    return db_url


@pytest.mark.parametrize("where, numbers", [
    ("batch=16", [1]),                # the number 16 only
    ('batch="16"', [0]),              # the string "16" only
    ("batch='16'", [0]),
    ("params.batch='16'", [0]),
    ("batch!=16", [2]),               # the other numbers
    ('batch!="16"', [3]),             # the other strings
    ("batch>=16", [1, 2]),
    ("batch=auto", [3]),
    ('mode="16"', [0, 2]),
    ("mode!='16'", [1, 3]),
    ("size=1e-3", [1]),
    ("size=1_000", [2]),
    ("size=.5", [3]),
    ("size=10", [0]),
    ("size<inf", [0, 1, 2, 3]),
    ("size>-inf", [0, 1, 2, 3]),
    ("size<1e400", [0, 1, 2, 3]),
    ("size>1e400", []),
    ("size<" + "9" * 40, [0, 1, 2, 3]),
    ("size>-" + "9" * 40, [0, 1, 2, 3]),
    ("number<" + "9" * 40, [0, 1, 2, 3]),
    ("number>" + "9" * 40, []),
    ("number<1e400", [0, 1, 2, 3]),
    ("number>-1e400", [0, 1, 2, 3]),
    ("number=9223372036854775807", []),
    ("number>=-9223372036854775808", [0, 1, 2, 3]),
    ("number=2", [2]),
    ("number=2.0", [2]),
    ("name=\"it's\"", [0]),
    ("name=it's", [0]),
    ("name='it's'", [0]),
    ("name='O'Brien'", [2]),
    ('name="a,b"', [1]),
    ("note='say \"hi\"'", [0]),
    ("name=null", [3]),
    ("name!=null", [0, 1, 2]),
    ("note=null", [1, 2, 3]),        # null, and missing
    ("note!=null", [0]),
    ("accuracy=null", [3]),          # a column with no value
    ("accuracy!=null", [0, 1, 2]),
    ("flag=true", [0, 2]),
    ("flag=True", [0, 2]),
    ("name=~", [3]),
    ("size=0xA", [0]),
    ("flag!=true", [1]),
    ("flag=false", [1]),
    ("flag!=false", [0, 2]),
])
def test_filters_match_values_of_their_own_type(kinds_db, where, numbers):
    with diel.results.open(kinds_db) as results:
        found = results.trials(study="kinds", where=[where], sort="number")
        assert results.count(study="kinds", where=[where]) == len(numbers)
    assert [t["number"] for t in found] == numbers


@pytest.mark.parametrize("where, words", [
    ("mode=16", "compares mode with a number, but in study 'kinds' mode holds only strings; "
                "quote the value to compare text: mode=\"16\""),
    ("mode>16", "mode holds only strings"),
    ("mode=true", "compares mode with a boolean, but in study 'kinds' mode holds only strings; "
                  "quote the value to compare text: mode=\"true\""),
    ("size='10'", "compares size with a string, but in study 'kinds' size holds only numbers; "
                  "write it unquoted to compare numbers: size=10"),
    ("size!=ten", "size holds only numbers"),
    ("flag='true'", "flag holds only booleans; write it unquoted to compare booleans: flag=true"),
    ("flag=1", "flag holds only booleans"),
    ("note=3", "note holds only strings"),
    ("batch=true", "batch holds only numbers and strings; quote the value"),
])
def test_a_value_of_a_type_the_key_never_holds_is_an_error(kinds_db, where, words):
    with diel.results.open(kinds_db) as results:
        with pytest.raises(ValueError) as info:
            results.trials(study="kinds", where=[where])
        with pytest.raises(ValueError):
            results.count(study="kinds", where=[where])
    assert str(info.value).startswith(f"filter {where!r} compares ")
    assert words in str(info.value)


def test_what_a_key_holds_is_read_in_the_study_filtered(kinds_db):
    """mode holds numbers in study 'other' only: an error there names that study, and
    a filter over every study is checked against every trial."""
    with diel.results.open(kinds_db) as results:
        assert [t["study"] for t in results.trials(where=["mode=16"])] == ["other"]
        assert [t["number"] for t in results.trials(study="other", where=["mode=16"])] == [0]
        with pytest.raises(ValueError, match="in study 'other' mode holds only numbers"):
            results.trials(study="other", where=["mode='16'"])
        with pytest.raises(ValueError, match=r"in .*wf.db mode holds only numbers and strings|"
                                             r"in postgresql.* mode holds only numbers and st"):
            results.trials(where=["mode=true"])


def test_a_pareto_front_says_why_a_filter_matched_nothing(db_url):
    store = ResultsStore(db_url)
    state = store.open_study("mo", "nsga2", "accuracy", "maximize", {},
                             objectives=[("accuracy", "maximize"), ("time", "minimize")])
    store.record(state.study_id, starts=[TrialStart(n, {"mode": m}, m)
                                         for n, m in enumerate(["16", "32"])])
    store.record(state.study_id, results=[
        ResultRecord(n, "ok", 0.5 + n, time=1.0, accuracy=0.5 + n, objective_values=(0.5 + n, 1.0))
        for n in range(2)])
    store.close()
    with diel.results.open(db_url) as results:
        assert [t["number"] for t in results.pareto(study="mo", where=['mode="16"'])] == [0]
        with pytest.raises(ValueError, match="in study 'mo' mode holds only strings; quote"):
            results.pareto(study="mo", where=["mode=16"])
