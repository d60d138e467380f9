"""get_storage: the one way to open a results store; the storage plug-ins it chooses
from by URL scheme (entry-point group diel.storages); check_database, which asks the
same storage; and what only the in-memory store does (a lease gone stale is taken
over, each memory:// a new store)."""

from __future__ import annotations

import importlib.metadata
import logging
from datetime import timedelta

import pytest

from diel.errors import ConfigError, ResultsError, StudyBusy
from diel.results import DatabaseProblem, MemoryStorage, ResultsStore, STALE_AFTER_S, \
    check_database, get_storage, storage_class
from diel.results import _memory
from tests.helpers.plugins import FakeEntryPoint, beside_installed

GROUP = "diel.storages"


def test_a_url_picks_its_storage_and_a_store_passes_through(tmp_path):
    memory = get_storage("memory://")
    assert isinstance(memory, MemoryStorage) and memory.url == "memory://"
    assert get_storage(memory) is memory
    assert get_storage("memory://") is not memory   # each memory:// is a new store
    for given in (f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "b.db"):
        store = get_storage(given)
        try:
            assert isinstance(store, ResultsStore)
        finally:
            store.close()
    assert (tmp_path / "b.db").exists()
    assert storage_class("postgresql+psycopg://u@h/db") is ResultsStore
    assert storage_class("MEMORY://") is MemoryStorage


def test_diel_s_own_schemes_and_a_path_read_no_entry_points(monkeypatch):
    def read(group):
        raise AssertionError(f"the entry points of {group} were read")
    monkeypatch.setattr(importlib.metadata, "entry_points", read)
    for url in ("sqlite:///a.db", "postgresql+psycopg://u@h/db", "a.db", "sql://x"):
        assert storage_class(url) is ResultsStore, url
    assert storage_class("memory://") is MemoryStorage


def test_a_url_no_storage_claims_goes_to_sqlalchemy_and_fails_there():
    with pytest.raises(ResultsError, match="not a database URL SQLAlchemy can open") as info:
        get_storage("nosuch://x")
    assert info.value.__cause__ is None   # a usage error


@pytest.fixture
def storages(monkeypatch):
    """Entry points of diel.storages beside the installed ones."""
    return beside_installed(monkeypatch, GROUP)


class Remote(MemoryStorage):
    """A third party's storage for its own scheme."""

    checked: list[str] = []

    @classmethod
    def check(cls, url):
        cls.checked.append(url)
        if "down" in url:
            raise DatabaseProblem(f"{url}: the server is down")


def test_a_package_adds_a_storage_for_its_scheme_by_one_entry_point(storages):
    storages.append(FakeEntryPoint("remote", "pkg.remote:Remote", Remote))
    store = get_storage("remote+tls://host/x")
    assert type(store) is Remote and store.url == "remote+tls://host/x"
    check_database("remote://host/x")
    with pytest.raises(DatabaseProblem, match="the server is down"):
        check_database("remote://down/x")
    assert Remote.checked == ["remote://host/x", "remote://down/x"]


@pytest.mark.parametrize("target, words", [
    (ImportError("no module named pkg"), "storage remote (pkg:Broken) failed to load: "
                                         "ImportError: no module named pkg"),
    (dict, "storage remote (pkg:Broken) is not a subclass of diel.results.Storage"),
])
def test_a_broken_storage_plugin_is_a_config_error_at_the_setting(storages, target, words):
    storages.append(FakeEntryPoint("remote", "pkg:Broken", target))
    with pytest.raises(ConfigError) as info:
        get_storage("remote://x", "modules.search.settings.database")
    assert info.value.path == "modules.search.settings.database"
    assert words in info.value.message
    with pytest.raises(ConfigError, match="failed to load|not a subclass"):
        check_database("remote://x")


def test_check_database_asks_the_storage_the_url_picks(tmp_path):
    check_database("memory://")                                # nothing to check
    check_database(f"sqlite:///{tmp_path / 'new.db'}")         # can be created
    (tmp_path / "notes.txt").write_text("not a database")
    with pytest.raises(DatabaseProblem, match="not a SQLite database"):
        check_database(f"sqlite:///{tmp_path / 'notes.txt'}")
    assert not (tmp_path / "new.db").exists()                  # nothing was created


def test_a_stale_memory_lease_is_taken_over(monkeypatch, caplog):
    store = MemoryStorage()
    first = store.acquire_lease("s")
    later = _memory.utcnow() + timedelta(seconds=STALE_AFTER_S + 5)
    monkeypatch.setattr(_memory, "utcnow", lambda: later)
    with caplog.at_level(logging.WARNING, logger="diel.results"):
        second = store.acquire_lease("s")
    assert second.run_id != first.run_id
    assert f"taking over the lease of study 's' from host {first.host} pid {first.pid} " \
           f"(no heartbeat for {STALE_AFTER_S + 5:.0f} s)" in caplog.text
    with pytest.raises(StudyBusy, match="lost its lease"):
        store.heartbeat(first)
