"""The throwaway PostgreSQL server's fixtures (tests/helpers/postgres.py) clean up after
each test: a test's database is dropped when it is done, so that the server's folder
stays small (the session's end removes it: a folder holding every test's database took
seconds to remove)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres


def test_a_dropped_database_is_gone(postgres_server):
    url = postgres_server.create_database()
    name = postgres_server.database_name(url)
    assert name.startswith("t") and "/" not in name
    assert name in postgres_server.database_names()
    postgres_server.drop_database(url)
    assert name not in postgres_server.database_names()
