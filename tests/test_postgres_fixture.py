"""The throwaway PostgreSQL server's fixtures (tests/helpers/postgres.py) clean up after
each test: a test's database (or schema) is dropped when it is done, so that the server's folder
stays small (the session's end removes it: a folder holding every test's database took
seconds to remove)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import diel.results
from diel.errors import ResultsError
from diel.results import ResultsStore

pytestmark = pytest.mark.postgres


def test_a_dropped_database_is_gone(postgres_server):
    url = postgres_server.create_database()
    name = postgres_server.database_name(url)
    assert name.startswith("t") and "/" not in name
    assert name in postgres_server.database_names()
    postgres_server.drop_database(url)
    assert name not in postgres_server.database_names()


def test_a_tests_schema_is_a_database_of_its_own_to_diel_and_is_dropped(postgres_server):
    """What diel writes through one test's URL goes into that test's schema, which no
    other test's URL sees; dropping it ends a connection the test left open, which would
    otherwise hold the drop up."""
    mine, other = postgres_server.create_schema(), postgres_server.create_schema()
    try:
        store = ResultsStore(mine)
        store.open_study("grid", "grid", "accuracy", "maximize", {})
        store.close()
        with diel.results.open(mine) as results:
            assert [s["name"] for s in results.studies()] == ["grid"]
        with pytest.raises(ResultsError, match="no studies or trials table"):
            diel.results.open(other)
        left_open = create_engine(mine, poolclass=NullPool).connect()
        left_open.execute(text("SELECT count(*) FROM trials"))   # holds a lock on the table
        assert postgres_server.schema_name(mine) in postgres_server.schema_names()
        postgres_server.drop_schema(mine)
        assert postgres_server.schema_name(mine) not in postgres_server.schema_names()
        assert postgres_server.schema_name(other) in postgres_server.schema_names()
        left_open.invalidate()   # its server end is gone
    finally:
        postgres_server.drop_schema(other)
