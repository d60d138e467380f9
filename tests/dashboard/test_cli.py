"""``diel dashboard``: refuses what it cannot serve before serving (exit 2, one line),
serves a finished database on 127.0.0.1 without changing a byte of it, only to the
holder of the token it prints (or to everyone with --no-token, on loopback only), on a
Unix socket only its owner can open, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from http.cookiejar import CookieJar

import pytest

from diel.cli import main
from diel.dashboard import cli as dashboard_cli
from tests.helpers.browser import serving
from tests.helpers.launch import REPO, run_diel_in_process

TOKEN = "my-own-token_0123456789"


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_missing_database_is_refused_before_serving(tmp_path):
    result = run_diel_in_process("dashboard", str(tmp_path / "nope.db"), "--port", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == f"diel dashboard: error: no results database at {tmp_path / 'nope.db'}"
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("content", [b"", b"not a database\n"])
def test_a_foreign_file_is_refused_and_left_as_it_was(tmp_path, content):
    path = tmp_path / "other.db"
    path.write_bytes(content)
    result = run_diel_in_process("dashboard", str(path), "--port", "0")
    assert result.returncode == 2
    assert "is not a diel results database" in result.stderr
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == content and sorted(tmp_path.iterdir()) == [path]


def test_a_missing_library_names_the_extra(synthetic, monkeypatch, capsys):
    monkeypatch.setattr(dashboard_cli, "EXTRA", ("starlette", "diel_no_such_library"))
    assert main(["dashboard", str(synthetic)]) == 2
    err = capsys.readouterr().err
    assert "diel_no_such_library, not installed" in err
    assert "pip install 'diel[dashboard]'" in err


def test_the_address_is_announced_once_the_server_is_made(synthetic, monkeypatch, capsys):
    """A Ctrl-C right after the printed address must land where the command ends cleanly
    (in uvicorn's run), not inside the server's making (uvicorn configures logging there:
    a Ctrl-C inside logging's locks ended the command with a traceback)."""
    import uvicorn

    steps = []
    made = uvicorn.Config.__init__
    monkeypatch.setattr(uvicorn.Config, "__init__",
                        lambda self, *a, **k: (steps.append("made"), made(self, *a, **k))[1])
    monkeypatch.setattr(dashboard_cli, "_announcement",
                        lambda *a: steps.append("announced") or "the address")
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: steps.append("run"))
    assert main(["dashboard", str(synthetic), "--port", "0"]) == 0
    assert steps == ["made", "announced", "run"]
    assert capsys.readouterr().out == "the address\n"


def test_a_port_in_use_is_a_usage_error(synthetic, capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        assert main(["dashboard", str(synthetic), "--port", str(port)]) == 2
    finally:
        taken.close()
    assert f"cannot listen on 127.0.0.1 port {port}" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["70000", "-1", "99999999999999999999999", "80.5", "http",
                                  ""])
def test_a_port_out_of_range_is_a_usage_error(synthetic, capsys, port):
    with pytest.raises(SystemExit) as stop:
        main(["dashboard", str(synthetic), "--port", port])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "diel dashboard: error: argument --port: expected a whole number from 0 to 65535, "
        f"got {port!r}")


@pytest.mark.parametrize("argv, words", [
    (["--host", "a" * 300], "cannot listen on " + "a" * 300 + " port 8050: encoding with "
                            "'idna' codec failed"),
    (["--no-token", "--host", "0.0.0.0"], "--no-token with --host 0.0.0.0 would serve the "
                                          "database to everyone who can reach this machine"),
    (["--no-token", "--host", "::"], "--no-token with --host :: would serve"),
    (["--token", "short"], "--token: a token is 16 to 256 of the characters A-Z a-z 0-9 - _ "
                           ". ~ (e.g. python -c 'import secrets; print(secrets."
                           "token_urlsafe())'), got 5 characters"),
    (["--token", "sixteen chars or more"], "got 21 characters, among them ' '"),
    (["--token", "x" * 257], "got 257 characters"),
    (["--socket", "s.sock", "--port", "9000"], "--socket replaces --host and --port"),
    (["--socket", "s.sock", "--host", "127.0.0.1"], "--socket replaces --host and --port"),
])
def test_unsafe_or_malformed_access_is_refused_before_serving(synthetic, capsys, argv, words):
    assert main(["dashboard", str(synthetic), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("diel dashboard: error: ") and words in err
    assert len(err.strip().splitlines()) == 1


def test_an_empty_host_is_a_usage_error(synthetic, capsys):
    """An empty host would bind every interface."""
    with pytest.raises(SystemExit) as stop:
        main(["dashboard", str(synthetic), "--no-token", "--host", ""])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "diel dashboard: error: argument --host: expected an address or a host name, got ''")


def test_a_malformed_token_in_the_environment_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DIEL_DASHBOARD_TOKEN", "abc")
    assert main(["dashboard", str(tmp_path / "x.db")]) == 2
    assert "error: DIEL_DASHBOARD_TOKEN: a token is 16 to 256" in capsys.readouterr().err


def fetch(url: str, opener=None, headers=None) -> tuple[int, str]:
    """The status and body of GET ``url`` (errors included)."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_serves_localhost_to_the_printed_address_only(synthetic):
    before = sha256(synthetic)
    with serving(synthetic) as served:
        assert served.url.startswith(f"{served.base}?token=") and len(served.token) >= 40
        assert served.base.startswith("http://127.0.0.1:")
        for path in ("", "api/studies", "api/info", "static/dashboard.js",
                     "static/plotly.min.js"):
            status, body = fetch(served.base + path)
            assert status == 401 and "alpha" not in body and str(synthetic) not in body
            assert fetch(served.base + path + "?token=" + served.token[:-1] + "x")[0] == 401
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        status, page = fetch(served.url, browser)   # the redirect, then the page, by cookie
        assert status == 200 and "<title>diel dashboard</title>" in page
        status, body = fetch(served.base + "api/studies", browser)
        assert status == 200
        assert [s["name"] for s in json.loads(body)["studies"]] == ["alpha", "pair"]
        assert served.json("api/plot?study=alpha&kind=history")["figure"]["data"]
    assert sha256(synthetic) == before


def test_a_token_of_ones_own_from_the_environment(synthetic, monkeypatch):
    monkeypatch.setenv("DIEL_DASHBOARD_TOKEN", TOKEN)
    with serving(synthetic) as served:
        assert served.token == TOKEN
        assert fetch(served.base + "api/info")[0] == 401
        assert served.json("api/info")["database"] == str(synthetic)


def test_no_token_serves_everyone_on_loopback(synthetic):
    with serving(synthetic, "--no-token") as served:
        assert served.token is None and served.url == served.base
        status, body = fetch(served.base + "api/studies")
        assert status == 200 and "alpha" in body


def test_a_unix_socket_only_its_owner_opens(synthetic, tmp_path):
    path = tmp_path / "dash.sock"
    process = subprocess.Popen(
        [sys.executable, "-m", "diel", "dashboard", str(synthetic), "--socket", str(path),
         "--token", TOKEN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=str(REPO), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        assert f"at unix socket {path} " in line
        assert f"ssh -N -L 8050:{path} {socket.gethostname()}, then open " \
               f"http://127.0.0.1:8050/?token={TOKEN}" in line
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert _unix_get(path, "/api/studies") == 401
        assert _unix_get(path, "/api/studies", {"Authorization": f"Bearer {TOKEN}"}) == 200
        again = run_diel_in_process("dashboard", str(synthetic), "--socket", str(path))
        assert again.returncode == 2
        assert again.stderr == f"diel dashboard: error: cannot listen on --socket {path} " \
                               "exists (a dashboard serving it, or one that was killed: " \
                               "remove it)\n"
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0 and err == "diel dashboard: stopped\n"
    assert not path.exists()


def _unix_get(path, url: str, headers=None) -> int:
    """The status of GET ``url`` over the Unix socket ``path``."""
    connection = http.client.HTTPConnection("localhost")
    connection.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.sock.settimeout(60)
    connection.sock.connect(str(path))
    try:
        connection.request("GET", url, headers=headers or {})
        return connection.getresponse().status
    finally:
        connection.close()
