"""is_sqlite_file reads plain SQLite URLs without SQLAlchemy, and agrees with it on all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from diel.results import is_sqlite_file

URLS = ["sqlite:///x.db", "sqlite:////abs/x.db", "sqlite://", "sqlite:///", "sqlite:///:memory:",
        "sqlite+pysqlite:///a/b.db", "sqlite:///a%20b.db", "sqlite:///x.db?timeout=5",
        "sqlite:///a b.db", "sqlite:///a@b:c.db", "sqlite:///./x.db", "sqlite:///~/x.db",
        "SQLITE:///x.db", "memory://", "postgresql+psycopg://u:p@host/db"]


def by_sqlalchemy(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


@pytest.mark.parametrize("url", URLS)
def test_is_sqlite_file_agrees_with_sqlalchemy(url):
    assert is_sqlite_file(url) == by_sqlalchemy(url)


def test_a_plain_sqlite_path_is_read_without_importing_sqlalchemy():
    code = ("import sys; from diel.results import is_sqlite_file; "
            "assert str(is_sqlite_file('sqlite:////w/r.db')) == '/w/r.db'; "
            "assert is_sqlite_file('memory://') is None; "
            "print('sqlalchemy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"
