"""``diel dashboard``: refuses what it cannot serve before serving (exit 2, one line),
serves a finished database on 127.0.0.1 without changing a byte of it, and stops
cleanly on Ctrl-C."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.request

import pytest

from diel.cli import main
from diel.dashboard import cli as dashboard_cli
from tests.dashboard.browser import serving
from tests.support import run_diel


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_missing_database_is_refused_before_serving(tmp_path):
    result = run_diel("dashboard", str(tmp_path / "nope.db"), "--port", "0", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"diel dashboard: error: no results database at {tmp_path / 'nope.db'}"
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("content", [b"", b"not a database\n"])
def test_a_foreign_file_is_refused_and_left_as_it_was(tmp_path, content):
    path = tmp_path / "other.db"
    path.write_bytes(content)
    result = run_diel("dashboard", str(path), "--port", "0", timeout=60)
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


def test_a_port_out_of_range_is_a_usage_error(synthetic, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["dashboard", str(synthetic), "--port", "70000"])
    assert stop.value.code == 2
    assert "a port is 0 to 65535, got 70000" in capsys.readouterr().err


def test_serves_localhost_and_leaves_the_database_untouched(synthetic):
    before = sha256(synthetic)
    with serving(synthetic) as (url, _):
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "api/studies", timeout=30) as answer:
            studies = json.load(answer)["studies"]
        with urllib.request.urlopen(url + "api/plot?study=alpha&kind=history", timeout=60) as answer:
            assert json.load(answer)["figure"]["data"]
    assert [s["name"] for s in studies] == ["alpha", "pair"]
    assert sha256(synthetic) == before
