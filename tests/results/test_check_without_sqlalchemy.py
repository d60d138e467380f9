"""A search's results database is checked without SQLAlchemy where Python's ``sqlite3``
is enough (a plain ``sqlite:///FILE`` URL, what a path and the default database
become, and ``memory://``), with the messages SQLAlchemy's way gives: the search
master's rank then loads SQLAlchemy only to open its store, and ``diel validate`` not
at all."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from diel.results import DatabaseProblem, check_database, keeps_results

CHECKS = textwrap.dedent("""
    import json, sys
    from diel.results import DatabaseProblem, check_database, keeps_results

    told = {}
    for url in sys.argv[1:]:
        try:
            check_database(url)
            told[url] = [None, keeps_results(url)]
        except DatabaseProblem as e:
            told[url] = [str(e), None]
    print(json.dumps({"told": told, "sqlalchemy": "sqlalchemy" in sys.modules}))
""")


@pytest.fixture
def files(tmp_path):
    """A new file's place, a text file, an empty file, another program's database and
    a diel one (its two tables), a folder."""
    (tmp_path / "notes.txt").write_text("not a database")
    (tmp_path / "empty.db").write_bytes(b"")
    with sqlite3.connect(tmp_path / "other.db") as other:
        other.execute("CREATE TABLE songs (title TEXT)")
    with sqlite3.connect(tmp_path / "diel.db") as ours:
        ours.execute("CREATE TABLE studies (id INTEGER)")
        ours.execute("CREATE TABLE trials (id INTEGER)")
    other.close()
    ours.close()
    (tmp_path / "folder").mkdir()
    names = ("new.db", "notes.txt", "empty.db", "other.db", "diel.db", "folder",
             "missing/deeper/new.db", "notes.txt/under.db")
    return [f"sqlite:///{tmp_path / name}" for name in names]


def test_plain_sqlite_and_memory_urls_are_checked_without_importing_sqlalchemy(files):
    urls = [*files, "memory://", "sqlite:///", "sqlite:///:memory:"]
    done = subprocess.run([sys.executable, "-c", CHECKS, *urls], capture_output=True,
                          text=True, timeout=60, check=True)
    report = json.loads(done.stdout)
    assert report["sqlalchemy"] is False
    told = report["told"]
    assert told["memory://"] == [None, False]   # checked, and its results end with the job
    assert told[files[0]] == [None, True]
    assert "not a SQLite database" in told[files[1]][0]
    assert "another program's SQLite database (tables: songs)" in told[files[3]][0]
    assert told[files[4]] == [None, True]
    assert "is a folder; expected a SQLite file" in told[files[5]][0]


def test_the_checks_say_what_sqlalchemy_s_reading_of_the_url_says(files):
    """The same URL written so that only SQLAlchemy reads it (a query string) is told the
    same mistakes, word for word: the two ways make one check."""
    for url in files:
        plain = _told(url)
        assert _told(url + "?timeout=5") == plain, url


def test_a_url_that_is_not_plain_still_goes_through_sqlalchemy():
    with pytest.raises(DatabaseProblem, match="unknown database dialect 'sqlit'"):
        check_database("sqlit:///x.db")
    with pytest.raises(DatabaseProblem, match="is not a database URL"):
        check_database("sqlite:/x.db")
    assert keeps_results("postgresql+psycopg://user@localhost/diel")


def _told(url: str) -> str | None:
    try:
        check_database(url)
    except DatabaseProblem as e:
        return str(e)
    return None
