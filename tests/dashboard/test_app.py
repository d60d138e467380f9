"""The dashboard's JSON endpoints and page, in process (Starlette's TestClient), behind
its token (logged in as a browser is, through ``?token=``): what they answer matches the
reader's view of the database, arguments are checked, plots are diel plot's figures, and
nothing is ever written."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import contextmanager

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx2")   # what Starlette's TestClient runs on
pytest.importorskip("plotly")

from starlette.testclient import TestClient  # noqa: E402

import diel.results  # noqa: E402
from diel.dashboard import plots as plots_module  # noqa: E402
from diel.dashboard.app import create_app  # noqa: E402
from diel.results import ResultRecord, ResultsStore  # noqa: E402
from tests.helpers.dashboard import ALPHA_RUNNING, ALPHA_TRIALS, digest, write_alpha  # noqa: E402
from tests.helpers.populations import DEPTHS, fill_conditional, fill_population  # noqa: E402


@pytest.fixture
def db(synthetic, tmp_path):
    """A copy of the synthetic database, in a folder of its own."""
    path = tmp_path / "copy.db"
    shutil.copy(synthetic, path)
    return path


TOKEN = "test-token-0123456789abcdef"


@contextmanager
def dashboard(results):
    """A TestClient of the dashboard over ``results``, logged in (it holds the cookie)."""
    with TestClient(create_app(results, token=TOKEN)) as client:
        login = client.get("/", params={"token": TOKEN}, follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == "/"
        yield client


@pytest.fixture
def client(db):
    with diel.results.open(db) as results, dashboard(results) as client:
        yield client


def get(client, path, **params):
    answer = client.get(path, params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["server-timing"].startswith("app;dur=")   # the page's pace
    return answer.json()


def error(client, path, **params) -> str:
    answer = client.get(path, params=params)
    assert answer.status_code == 400, answer.text
    return answer.json()["error"]


def test_studies_are_the_readers_with_their_runs(client, db):
    with diel.results.open(db) as results:
        expected = results.studies()
    studies = get(client, "/api/studies")["studies"]
    assert [{k: v for k, v in s.items() if k != "run"} for s in studies] == expected
    assert [s["run"] for s in studies] == [None, None]   # no run holds them
    assert set(get(client, "/api/versions")["versions"]) == {"alpha", "pair"}


def test_a_study_lists_its_settings_worker_copies_and_plot_kinds(client):
    alpha = get(client, "/api/study", study="alpha")
    assert alpha["settings"] == {"space": {"lr": {"loguniform": [1e-4, 1e-1]},
                                           "act": {"choice": ["relu", "tanh"]}},
                                 "workers": "trainer", "seed": 7}
    assert alpha["params"] == ["lr", "act"]
    copies = {w["copy"]: w for w in alpha["workers"]}
    assert set(copies) == {0, 1, 2}
    assert sum(w["running"] for w in alpha["workers"]) == ALPHA_RUNNING
    finished = ALPHA_TRIALS - ALPHA_RUNNING
    assert sum(w["trials"] for w in alpha["workers"]) == ALPHA_TRIALS
    assert copies[0]["trials"] == len([n for n in range(finished) if n % 3 == 0])
    assert copies[1]["failed"] == len([n for n in range(finished) if n % 3 == 1 and n % 6 == 4])
    assert "pareto" not in alpha["kinds"] and "history" in alpha["kinds"]
    assert "pareto" in get(client, "/api/study", study="pair")["kinds"]
    assert "no study 'nope'" in error(client, "/api/study", study="nope")


@pytest.mark.parametrize("query", [
    {},
    {"sort": "number:desc"},
    {"sort": "lr", "status": "ok"},
    {"where": ["act=relu", "accuracy>=0.1"], "sort": "params.act:desc"},
])
def test_pages_cover_the_readers_trials_in_its_order(client, db, query):
    with diel.results.open(db) as results:
        expected = results.trials(study="alpha", sort=query.get("sort"),
                                  status=query.get("status"), where=query.get("where", []))
    seen = []
    for offset in range(0, 60, 25):
        page = get(client, "/api/trials", study="alpha", limit=25, offset=offset, **query)
        assert page["total"] == len(expected)
        seen += page["rows"]
    assert [row["number"] for row in seen] == [row["number"] for row in expected]
    assert seen[0]["params"] == expected[0]["params"]
    assert page["params"] == ["act", "lr"] or not page["rows"]


def test_a_diverged_epoch_is_served_as_diel_stored_it(client):
    assert get(client, "/api/trial", study="alpha", number=3)["metrics"] == {"f1": 0.5}
    assert get(client, "/api/trial", study="alpha", number=5)["epochs"][0]["metrics"]["loss"] is None


def test_non_finite_numbers_of_an_earlier_diel_travel_as_strings(db):
    """diel before schema 4's NaN fix wrote a diverged loss as the JSON text ``NaN``,
    and SQLite keeps an infinite loss: the page's JSON parser takes neither as a
    number, so both arrive as strings."""
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE trial_metrics SET metrics = ? WHERE epoch = 1 AND trial_id ="
                           " (SELECT id FROM trials WHERE number = 5 AND study_id ="
                           " (SELECT id FROM studies WHERE name = 'alpha'))",
                           ('{"accuracy": 0.0, "loss": NaN}',))
        connection.execute("UPDATE trials SET loss = ? WHERE number = 5", (float("inf"),))
    connection.close()
    with diel.results.open(db) as results, dashboard(results) as client:
        trial = get(client, "/api/trial", study="alpha", number=5)
    assert trial["epochs"][0]["metrics"]["loss"] == "NaN"
    assert trial["loss"] == "Infinity"


def test_bad_table_arguments_are_named(client):
    assert "unknown key 'colour'" in error(client, "/api/trials", study="alpha", where="colour=red")
    assert "malformed sort" in error(client, "/api/trials", study="alpha", sort="lr:up")
    assert "limit must be one of" in error(client, "/api/trials", study="alpha", limit=7)
    assert "offset: expected a whole number from 0 to" in error(client, "/api/trials",
                                                               study="alpha", offset="x")
    assert "missing query parameter 'study'" in error(client, "/api/trials")
    assert "status must be one of" in error(client, "/api/trials", study="alpha", status="done")


def test_a_trial_comes_with_its_epochs_in_order(client, db):
    trial = get(client, "/api/trial", study="alpha", number=7)
    with diel.results.open(db) as results:
        (expected,) = results.trials(study="alpha", where=["number=7"])
    assert {k: v for k, v in trial.items()
            if k not in ("epochs", "segments", "distributions")} == expected
    assert [e["epoch"] for e in trial["epochs"]] == [1, 2, 3]
    assert trial["segments"] == [{"from_step": 0, "to_step": trial["epoch"],
                                  "params": expected["params"], "parent_trial": None,
                                  "parent_step": None}] and trial["distributions"] == {}
    assert trial["epochs"][2]["metrics"] == {"accuracy": pytest.approx(0.07), "loss": pytest.approx(0.93)}
    assert "no trial 99" in error(client, "/api/trial", study="alpha", number=99)
    assert "query parameter number: expected a whole number from 0 to 9223372036854775807, " \
        "got 'x'" in error(client, "/api/trial", study="alpha", number="x")


def test_plots_are_diel_plots_figures(client):
    answer = get(client, "/api/plot", study="alpha", kind="history")
    traces = {trace["name"]: trace for trace in answer["figure"]["data"]}
    ok = [n for n in range(ALPHA_TRIALS - ALPHA_RUNNING) if n % 6 in (0, 1, 3, 5)]
    assert len(traces[f"ok trials ({len(ok)})"]["x"]) == len(ok)
    assert answer["version"] == get(client, "/api/versions")["versions"]["alpha"]
    timeline = get(client, "/api/plot", study="alpha", kind="timeline")["figure"]
    assert "worker copies" in timeline["layout"]["title"]["text"]
    pareto = get(client, "/api/plot", study="alpha", kind="pareto")
    assert "figure" not in pareto and "needs a study of several" in pareto["message"]
    assert get(client, "/api/plot", study="pair", kind="pareto")["figure"]["data"]
    assert "unknown plot kind 'pie'" in error(client, "/api/plot", study="alpha", kind="pie")
    assert "no study 'nope'" in error(client, "/api/plot", study="nope", kind="history")


def test_a_population_has_a_lineage_tab_and_its_members_their_schedules(db):
    fill_conditional(fill_population(f"sqlite:///{db}"))
    with diel.results.open(db) as results, dashboard(results) as client:
        assert "lineage" in get(client, "/api/study", study="pbt")["kinds"]
        assert "lineage" not in get(client, "/api/study", study="alpha")["kinds"]
        answer = get(client, "/api/plot", study="pbt", kind="lineage")
        assert "lineage of 5 members, 3 exploits" in answer["figure"]["layout"]["title"]["text"]
        member = get(client, "/api/trial", study="pbt", number=3)
        assert [(s["from_step"], s["to_step"], s["parent_trial"], s["params"]["lr"])
                for s in member["segments"]] == [(0, 4, None, 0.025), (4, 8, 1, 0.012),
                                                 (8, 12, 0, 0.03)]
        suggested = get(client, "/api/trial", study="conditional", number=1)
        assert suggested["distributions"] == {"rf_depth": DEPTHS}
        assert suggested["params"] == {"classifier": "forest", "rf_depth": 8}


def test_trials_with_different_parameters_keep_what_they_lack_missing(db):
    fill_conditional(f"sqlite:///{db}")
    with diel.results.open(db) as results, dashboard(results) as client:
        page = get(client, "/api/trials", study="conditional", sort="number")
        assert page["params"] == ["classifier", "rf_depth", "svc_c"]
        assert [row["params"] for row in page["rows"]] == [
            {"classifier": "SVC", "svc_c": 0.5}, {"classifier": "forest", "rf_depth": 8},
            {"classifier": "forest"}, {"classifier": "SVC", "svc_c": 0}]
        page = get(client, "/api/trials", study="conditional", where="svc_c!=0")
        assert [row["number"] for row in page["rows"]] == [0] and page["total"] == 1
        parallel = get(client, "/api/plot", study="conditional", kind="parallel")["figure"]
        [svc_c] = [d for d in parallel["data"][0]["dimensions"] if d["label"] == "svc_c"]
        assert svc_c["ticktext"][0] == "missing"


def test_big_studies_draw_the_latest_curves_with_a_note(client, monkeypatch):
    monkeypatch.setattr(plots_module, "CURVE_TRIALS", 4)
    answer = get(client, "/api/plot", study="alpha", kind="curves")
    assert "the 4 most recent of the 30 trials" in answer["note"]
    assert "of 4 trials" in answer["figure"]["layout"]["title"]["text"]


def test_a_figure_is_reused_until_the_study_changes(db):
    with diel.results.open(db) as results, dashboard(results) as client:
        first = client.get("/api/plot", params={"study": "alpha", "kind": "history"}).text
        assert client.get("/api/plot", params={"study": "alpha", "kind": "history"}).text == first
        versions = get(client, "/api/versions")["versions"]
        store = ResultsStore(f"sqlite:///{db}")
        try:
            write_alpha(store, name="beta", trials=3, running=0)   # another study changes
            state = store.open_study("alpha", "random", "accuracy", "maximize", {})
            store.record(state.study_id, results=[ResultRecord(ALPHA_TRIALS - 1, "ok", 0.99,
                                                                accuracy=0.99, worker=1)])
        finally:
            store.close()
        changed = get(client, "/api/versions")["versions"]
        assert changed["alpha"] != versions["alpha"] and changed["pair"] == versions["pair"]
        again = json.loads(client.get("/api/plot", params={"study": "alpha", "kind": "history"}).text)
        assert again["version"] == changed["alpha"]
        assert max(again["figure"]["data"][0]["x"]) == ALPHA_TRIALS - 1


def test_the_page_and_its_scripts_are_served_locally(client, db):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    info = json.loads(page.text.split('<script id="info" type="application/json">')[1]
                      .split("</script>")[0])
    assert info["database"] == str(db) and info["plotly"].startswith("static/plotly.min.js")
    assert "http" not in page.text.replace("http-equiv", "")   # nothing from the network
    plotly_js = client.get("/" + info["plotly"])
    assert plotly_js.status_code == 200 and len(plotly_js.content) > 1_000_000
    assert "immutable" in plotly_js.headers["cache-control"]
    script = client.get("/static/dashboard.js")
    assert script.status_code == 200 and "api/versions" in script.text
    assert client.get("/static/secrets.txt").status_code == 404


def test_reading_everything_writes_nothing(db):
    before = digest(db.parent)[db.name]
    with diel.results.open(db) as results, dashboard(results) as client:
        for study in ("alpha", "pair"):
            get(client, "/api/studies")
            get(client, "/api/study", study=study)
            get(client, "/api/trials", study=study, sort="lr:desc", where="act=relu")
            get(client, "/api/trial", study=study, number=1)
            for kind in ("history", "parallel", "slice", "curves", "timeline", "pareto",
                         "lineage"):
                get(client, "/api/plot", study=study, kind=kind)
    # byte for byte (SQLite's reader leaves the empty -wal and -shm files of a WAL
    # database beside it, as diel results does)
    assert digest(db.parent)[db.name] == before


def test_the_readers_paging_helpers(db):
    """Results.trials(offset=) and Results.count(), which the table pages with."""
    with diel.results.open(db) as results:
        every = results.trials(study="alpha", sort="number")
        assert [t["number"] for t in results.trials(study="alpha", sort="number", offset=10,
                                                     top=5)] == [10, 11, 12, 13, 14]
        assert results.trials(study="alpha", offset=len(every)) == []
        assert results.count() == len(results.trials())
        assert results.count(study="alpha", status="ok", where=["act=relu"]) == len(
            results.trials(study="alpha", status="ok", where=["act=relu"]))
        for bad in (-1, 1.5, True):
            with pytest.raises(ValueError, match="offset must be a whole number from 0 to "):
                results.trials(offset=bad)
        with pytest.raises(ValueError, match="unknown key 'colour'"):
            results.count(where=["colour=red"])
        with pytest.raises(ValueError, match="no study 'nope'"):
            results.count(study="nope")


@pytest.mark.postgres
def test_a_postgresql_database_is_served_as_sqlite_is(postgres_url):
    store = ResultsStore(postgres_url)
    try:
        write_alpha(store)
    finally:
        store.close()
    with diel.results.open(postgres_url) as results, dashboard(results) as client:
        expected = results.trials(study="alpha", sort="params.lr:desc", where=["act=relu"])
        before = get(client, "/api/versions")["versions"]["alpha"]
        page = get(client, "/api/trials", study="alpha", sort="params.lr:desc", where="act=relu")
        assert [row["number"] for row in page["rows"]] == [row["number"] for row in expected]
        assert sum(w["trials"] for w in get(client, "/api/study", study="alpha")["workers"]) \
            == ALPHA_TRIALS
        assert len(get(client, "/api/trial", study="alpha", number=5)["epochs"]) == 3
        assert get(client, "/api/plot", study="alpha", kind="history")["figure"]["data"]
        store = ResultsStore(postgres_url)
        try:
            state = store.open_study("alpha", "random", "accuracy", "maximize", {})
            store.record(state.study_id, results=[ResultRecord(ALPHA_TRIALS - 1, "ok", 0.99,
                                                                accuracy=0.99, worker=1)])
        finally:
            store.close()
        assert get(client, "/api/versions")["versions"]["alpha"] != before
