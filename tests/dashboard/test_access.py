"""Only the holder of the dashboard's token reads it (diel/dashboard/access.py), in
process: every route, the page and every static file answer 401 with nothing of the
database without it; the printed address's ``?token=`` logs a browser in (a cookie, then
a redirect to the address without the token); a script shows it in a header."""

from __future__ import annotations

import json
import shutil
from importlib import resources

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx2")   # what Starlette's TestClient runs on
pytest.importorskip("plotly")

from starlette.testclient import TestClient  # noqa: E402

import diel.results  # noqa: E402
from diel.dashboard import access  # noqa: E402
from diel.dashboard.app import create_app  # noqa: E402

TOKEN = "Zq3-secret_token.0123456789~"
STATIC = sorted(p.name for p in resources.files("diel.dashboard").joinpath("static").iterdir()
                if p.name != "index.html") + ["plotly.min.js", "secrets.txt"]


@pytest.fixture
def db(synthetic, tmp_path):
    path = tmp_path / "private-study.db"
    shutil.copy(synthetic, path)
    return path


@pytest.fixture
def app(db):
    with diel.results.open(db) as results:
        yield create_app(results, token=TOKEN)


def every_url(app) -> list[str]:
    """Each route of the application (its static files one by one), with the arguments
    that make it answer 200 once logged in (a file that does not exist: 404)."""
    query = {"/api/study": "?study=alpha", "/api/trials": "?study=alpha",
             "/api/trial": "?study=alpha&number=1", "/api/plot": "?study=alpha&kind=history"}
    urls = []
    for route in app.routes:
        if route.path == "/static/{name}":
            urls += [f"/static/{name}" for name in STATIC]
        else:
            urls.append(route.path + query.get(route.path, ""))
    return urls + ["/nowhere"]


def assert_reveals_nothing(answer, db) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.headers["cache-control"] == "no-store"
    assert "set-cookie" not in answer.headers
    body = answer.text
    for secret in ("alpha", "pair", str(db), db.name, "lr", "relu", "<html", "<title"):
        assert secret not in body
    assert "needs its token" in body and len(body) < 200


def test_every_url_without_the_token_answers_401_and_nothing_else(app, db):
    urls = every_url(app)
    assert {"/", "/api/info", "/api/versions", "/api/studies", "/api/study?study=alpha",
            "/static/dashboard.js", "/static/dashboard.css", "/static/plotly.min.js"} <= set(urls)
    with TestClient(app) as client:
        for url in urls:
            answer = client.get(url)
            assert_reveals_nothing(answer, db)
            if url.startswith("/api/"):
                assert set(answer.json()) == {"error"}   # what the page shows
            else:
                assert answer.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("how", ["query", "cookie", "bearer", "cookie of another port"])
def test_a_wrong_token_answers_401_however_it_comes(app, db, how):
    wrong = TOKEN[:-1] + "!"
    with TestClient(app, base_url="http://127.0.0.1:8050") as client:
        if how == "cookie":
            client.cookies.set("diel_dashboard_8050", wrong)
        elif how == "cookie of another port":
            client.cookies.set("diel_dashboard_9000", TOKEN)
        for url in every_url(app):
            if how == "query":
                answer = client.get(url + ("&" if "?" in url else "?") + f"token={wrong}")
            elif how == "bearer":
                answer = client.get(url, headers={"Authorization": f"Bearer {wrong}"})
            else:
                answer = client.get(url)
            assert_reveals_nothing(answer, db)


def test_the_token_in_the_address_sets_a_strict_cookie_and_leaves_the_address(app):
    with TestClient(app, base_url="http://127.0.0.1:8050", follow_redirects=False) as client:
        login = client.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"diel_dashboard_8050={TOKEN};")
        assert {"HttpOnly", "Path=/", "SameSite=strict"} <= {p.strip() for p in cookie.split(";")}
        assert "max-age" not in cookie.lower() and "expires" not in cookie.lower()
        page = client.get("/")
        assert page.status_code == 200 and "<title>diel dashboard</title>" in page.text
        for url in every_url(app):   # the page's own requests, with the cookie
            answer = client.get(url)
            assert answer.status_code == (404 if url in ("/static/secrets.txt", "/nowhere")
                                          else 200), url
        # another address: the other arguments are kept, the token is not
        again = client.get("/api/trials?study=alpha&token=" + TOKEN + "&sort=lr")
        assert again.headers["location"] == "/api/trials?study=alpha&sort=lr"
        # never a redirect to another host
        away = client.get(f"http://127.0.0.1:8050//elsewhere.example/?token={TOKEN}")
        assert away.headers["location"] == "/elsewhere.example/"


def test_a_script_shows_the_token_in_a_header(app):
    with TestClient(app) as client:
        answer = client.get("/api/studies", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200
        assert [s["name"] for s in answer.json()["studies"]] == ["alpha", "pair"]
        assert "set-cookie" not in answer.headers


def test_tokens_are_compared_in_constant_time(app, monkeypatch):
    compared = []

    def compare_digest(a, b):
        compared.append((a, b))
        return a == b
    monkeypatch.setattr(access.hmac, "compare_digest", compare_digest)
    with TestClient(app) as client:
        client.get("/api/info", headers={"Authorization": "Bearer nope"})
        client.get("/?token=nope")
        client.cookies.set("diel_dashboard", "nope")
        client.get("/api/info")
    assert (b"nope", TOKEN.encode()) in compared and len(compared) == 3


def test_without_a_token_everyone_reads_it(db):
    with diel.results.open(db) as results, TestClient(create_app(results, token=None)) as client:
        assert client.get("/").status_code == 200
        assert json.loads(client.get("/api/studies").text)["studies"][0]["name"] == "alpha"
