"""Every dashboard endpoint, walked with the values a URL can carry: huge (past 64 bits),
negative, fractional, not a number, NaN, empty, a NUL character, malformed. Each answers
4xx with ``{"error": ...}`` naming the argument, or 200 where the value is valid, never a
500 and never a traceback in the log; on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import shutil

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx2")   # what Starlette's TestClient runs on
pytest.importorskip("plotly")

from starlette.testclient import TestClient  # noqa: E402

import diel.results  # noqa: E402
from diel.dashboard.app import create_app  # noqa: E402
from diel.results import ResultsStore  # noqa: E402
from tests.helpers.dashboard import write_alpha  # noqa: E402

HUGE = "99999999999999999999999"
NUMBERS = [HUGE, "9223372036854775808", "-1", "-" + HUGE, "1.5", "1e3", "x", "NaN", "nan",
           "inf", "", " ", "0x10", "١", "5\x00", "9" * 5000]
TEXTS = ["\x00", "a\x00b", "x" * 10_000, "'", '"', "%", "é", "𝄞"]
WHERE = ["number>" + HUGE, "number<-" + HUGE, "lr<1e400", "number=1e400", "lr>-1e400",
         "epoch=" + "9" * 40, "lr=" + "9" * 5000]
BAD_WHERE = ["number>", "number>>1", "lr<'x'", "act=1", "lr=.nan", "number='1'", "x\x00=1",
             "act=\x00", "=1", "colour=red", 'act="relu']
ENDPOINTS = {   # the arguments each takes, valid
    "/api/info": {}, "/api/versions": {}, "/api/studies": {},
    "/api/study": {"study": "alpha"},
    "/api/trials": {"study": "alpha", "offset": "0", "limit": "25", "sort": "lr:desc",
                    "status": "ok", "where": "act=relu"},
    "/api/trial": {"study": "alpha", "number": "1"},
    "/api/plot": {"study": "alpha", "kind": "history"},
}
NUMERIC = {"offset", "limit", "number"}


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request, synthetic, tmp_path_factory):
    """The study 'alpha' on each backend, written once for the module: the dashboard
    only reads it (a PostgreSQL database a test cost most of its time)."""
    if request.param == "sqlite":
        url = tmp_path_factory.mktemp("arguments") / "copy.db"
        shutil.copy(synthetic, url)
        yield url
        return
    server = request.getfixturevalue("postgres_server")
    url = server.create_schema()
    try:
        store = ResultsStore(url)
        try:
            write_alpha(store)
        finally:
            store.close()
        yield url
    finally:
        server.drop_schema(url)


@pytest.fixture
def client(database, caplog):
    caplog.set_level(logging.DEBUG)
    with diel.results.open(database) as results, \
            TestClient(create_app(results, token=None), raise_server_exceptions=False) as client:
        yield client
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def ask(client, path: str, params: dict[str, str]):
    answer = client.get(path, params=params)
    assert answer.status_code != 500 and answer.status_code < 503, (path, params, answer.text)
    return answer


def refused(client, path: str, params: dict[str, str], name: str) -> None:
    answer = ask(client, path, params)
    assert answer.status_code == 400, (path, params, answer.text)
    error = answer.json()["error"]
    assert set(answer.json()) == {"error"} and "\n" not in error
    assert name in error, (name, error)


@pytest.mark.parametrize("path", [p for p, args in ENDPOINTS.items() if NUMERIC & set(args)])
def test_numbers_out_of_range_or_malformed_answer_400_naming_them(client, path):
    valid = ENDPOINTS[path]
    for name in NUMERIC & set(valid):
        for value in NUMBERS:
            refused(client, path, {**valid, name: value}, name)


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_text_arguments_never_fail_the_server(client, path):
    valid = ENDPOINTS[path]
    assert ask(client, path, valid).status_code == 200
    for name in set(valid) - NUMERIC:
        for value in TEXTS:
            answer = ask(client, path, {**valid, name: value})
            if "\x00" in value:
                refused(client, path, {**valid, name: value}, name)
            else:
                assert answer.status_code in (200, 400), answer.text
        refused(client, path, {**valid, name: ""}, name) if name in ("study", "kind") else None
    # arguments an endpoint does not take are ignored, whatever they hold
    assert ask(client, path, {**valid, "offset2": HUGE, "x": "\x00"}).status_code in (200, 400)


def test_filters_with_numbers_past_the_database_are_answered(client):
    for where in WHERE:
        answer = ask(client, "/api/trials", {"study": "alpha", "where": where})
        assert answer.status_code == 200, (where, answer.text)
    for where in BAD_WHERE:
        refused(client, "/api/trials", {"study": "alpha", "where": where}, "")


def test_the_largest_offset_and_number_are_valid(client):
    largest = "9223372036854775807"
    page = ask(client, "/api/trials", {"study": "alpha", "offset": largest}).json()
    assert page["rows"] == [] and page["total"] == 30 and page["offset"] == int(largest)
    refused(client, "/api/trial", {"study": "alpha", "number": largest},
            f"study 'alpha' has no trial {largest}")
