"""A throwaway PostgreSQL server for the tests, and the fixtures that hand it out.

The server is the machine's own ``initdb``/``pg_ctl`` (on PATH, else the newest
``/usr/lib/postgresql/*/bin``, where Debian's ``postgresql`` package puts them), run in a
temporary folder, listening only on a Unix socket in that folder (no TCP port), with
trust authentication for its one user ``diel``. PostgreSQL refuses to run as root, so
as root the server runs as ``nobody``, in a folder that user owns. One server serves
the whole test session (started in the background once the tests are collected, where
some are marked ``postgres``; stopped with ``pg_ctl stop -m immediate`` and its folder
removed at the end); each test gets a schema of its own in the server's one shared
database, which to diel is an empty database (:meth:`PostgresServer.create_schema`: a
fresh database a test cost the server four times the CPU). A session that
ends without its teardown (killed, or a timeout) leaves nothing either: the reaper
(tests/helpers/reaper.py) stops the server and removes its folder once pytest has exited.

Where there are no binaries, or no psycopg, the PostgreSQL cases skip with a note saying
what to install; with ``DIEL_TEST_POSTGRES=required`` in the environment (what
``.ci/run`` sets) they fail instead, so CI cannot pass without having met a server.
tests/conftest.py registers the fixtures for every test; a test that uses them must be
marked ``postgres`` (a test parametrized over backends marks its PostgreSQL case:
``pytest.param("postgresql", marks=pytest.mark.postgres)``), else it fails.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.markers import require
from tests.helpers.reaper import forget, reap_at_exit
from tests.helpers.unprivileged import nobody, unprivileged_argv

USER = "diel"
_TIMEOUT_S = 120
_NAMES = itertools.count()


class PostgresServer:
    """One running server in ``folder`` (its data in ``folder/data``, its socket and log
    in ``folder``); :meth:`create_schema` makes a fresh, empty place for one test,
    :meth:`create_database` a fresh database."""

    def __init__(self, bindir: Path, folder: Path, run_as: list[str]) -> None:
        self.bindir, self.folder, self.run_as = bindir, folder, run_as
        self._shared_database: str | None = None   # the schemas' database, made on first use

    def url(self, dbname: str) -> str:
        """The SQLAlchemy URL of database ``dbname`` (psycopg 3 over the Unix socket)."""
        return f"postgresql+psycopg://{USER}@/{dbname}?host={self.folder}"

    def start(self) -> None:
        """initdb, then start the server and wait until it accepts connections."""
        self._tool("initdb", "-D", str(self.folder / "data"), "-U", USER, "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-sync")
        options = (f"-c listen_addresses='' -c unix_socket_directories={self.folder} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=200")
        self._tool("pg_ctl", "-D", str(self.folder / "data"), "-l", str(self.folder / "log"),
                   "-w", "-t", "60", "-o", options, "start")

    def stop(self) -> None:
        """Stop the server at once (nothing in it is worth a clean shutdown)."""
        self._tool("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        name = f"t{os.getpid()}_{next(_NAMES)}"
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (made by :meth:`create_database`), even if a
        connection was left open."""
        self._admin(f'DROP DATABASE IF EXISTS "{self.database_name(url)}" WITH (FORCE)')

    def create_schema(self) -> str:
        """A new, empty schema in the server's shared database, as the URL of a database
        whose connections see only it (``search_path`` is that schema alone) and are named
        after it (``application_name``): what diel creates there goes into the schema, and
        what it lists is the schema's, so to diel it is an empty database of its own. It
        costs the server a quarter of :meth:`create_database`'s CPU (0.06 s against
        0.25 s, tables and drop included), where the PostgreSQL cases are many."""
        if self._shared_database is None:
            self._shared_database = self.database_name(self.create_database())
        name = f"s{os.getpid()}_{next(_NAMES)}"
        self._admin(f'CREATE SCHEMA "{name}"', self._shared_database)
        return (f"{self.url(self._shared_database)}"
                f"&options=-csearch_path%3D{name}%20-capplication_name%3D{name}")

    def drop_schema(self, url: str) -> None:
        """Drop the schema of ``url`` (made by :meth:`create_schema`) and all it holds,
        ending first the connections a test left open to it (as ``DROP DATABASE ... WITH
        (FORCE)`` does), which would hold the drop up for as long as they lasted."""
        name = self.schema_name(url)
        self._admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE application_name = '{name}'")
        self._admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE', self._shared_database)

    def schema_names(self) -> list[str]:
        """The schemas :meth:`create_schema` made that are still there."""
        if self._shared_database is None:
            return []
        return [row[0] for row in self._admin("SELECT nspname FROM pg_namespace",
                                              self._shared_database)
                if row[0].startswith("s") and row[0][1:2].isdigit()]

    @staticmethod
    def schema_name(url: str) -> str:
        """The schema of a :meth:`create_schema` URL (its ``search_path``)."""
        return url.rsplit("search_path%3D", 1)[1].split("%20", 1)[0]

    def database_names(self) -> list[str]:
        """The databases the server holds (its own among them)."""
        return [row[0] for row in self._admin("SELECT datname FROM pg_database")]

    @staticmethod
    def database_name(url: str) -> str:
        """The database of ``url`` (:meth:`url`): the path before the query, whose
        ``host`` is the server's folder (a path of its own, slashes and all)."""
        return url.split("?", 1)[0].rsplit("/", 1)[-1]

    def _admin(self, statement: str, dbname: str = "postgres") -> list[tuple]:
        """Run one statement outside a transaction on database ``dbname``; its rows
        (none for a statement that returns none). The statements are made here from
        generated names, never from input."""
        import psycopg

        with psycopg.connect(host=str(self.folder), user=USER, dbname=dbname,
                             autocommit=True, connect_timeout=30) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def _tool(self, name: str, *args: str) -> None:
        """Run a server program as the server's user; a failure shows its output and log."""
        done = subprocess.run([*self.run_as, str(self.bindir / name), *args], cwd=self.folder,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=_TIMEOUT_S, check=False)
        if done.returncode != 0:
            log = self.folder / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{name} {' '.join(args)} failed ({done.returncode}):\n"
                               f"{done.stdout}{done.stderr}{tail}")


def find_bindir() -> Path | None:
    """The folder with ``initdb`` and ``pg_ctl``: PATH first, else the newest Debian
    ``/usr/lib/postgresql/VERSION/bin``; None if neither has them."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for folder in candidates + versions[::-1]:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


def _unprivileged(folder: Path) -> list[str]:
    """The argv prefix that runs the server as ``nobody`` when we are root (and gives
    that user ``folder``); nothing otherwise."""
    if os.geteuid() == 0:
        user = nobody()
        os.chown(folder, user.pw_uid, user.pw_gid)
    return unprivileged_argv()


def unavailable() -> str | None:
    """Why no server can be started here, else None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    if find_bindir() is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
                "/usr/lib/postgresql/*/bin; install Debian's postgresql package")
    return None


def skip_unless_available() -> None:
    """Skip the running test where no server can be started (fail where required)."""
    reason = unavailable()
    if reason is not None:
        if os.environ.get("DIEL_TEST_POSTGRES") == "required":
            pytest.fail(f"DIEL_TEST_POSTGRES=required but {reason}")
        pytest.skip(f"PostgreSQL cases skipped: {reason}")


_shared: dict[str, object] = {"server": None, "users": 0, "starting": None}


def _start() -> PostgresServer:
    """A new running server in a folder of its own, which the reaper removes should the
    session end without its teardown."""
    folder = Path(tempfile.mkdtemp(prefix="diel-pg-"))  # short: socket paths are limited
    reap_at_exit(f"postgres {folder}")   # however the session ends
    server = PostgresServer(find_bindir(), folder, _unprivileged(folder))
    try:
        server.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        forget(f"postgres {folder}")
        raise
    return server


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server in the background as soon as the tests are known, where some of
    them use it: initdb and the start take 1.5-3 s, mostly waiting on the disk, that the
    first PostgreSQL test would wait for while it could run other tests meanwhile. (Each
    pytest-xdist worker collects every test, so each starts its own, as it did.)"""
    if not session.config.option.collectonly and any(
            item.get_closest_marker("postgres") is not None for item in session.items) \
            and unavailable() is None:
        _shared["starting"] = ThreadPoolExecutor(1).submit(_start)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a server started in the background that no test used."""
    starting, _shared["starting"] = _shared["starting"], None
    if starting is not None and starting.exception() is None:
        _stop(starting.result())


def _acquire() -> PostgresServer:
    """The session's server, started on first use (skip, or fail where required)."""
    if _shared["server"] is None:
        skip_unless_available()
        starting, _shared["starting"] = _shared["starting"], None
        _shared["server"] = _start() if starting is None else starting.result()
    _shared["users"] = int(_shared["users"]) + 1
    return _shared["server"]  # type: ignore[return-value]


def _release() -> None:
    """Stop the server when its last user (a session fixture) is done."""
    _shared["users"] = int(_shared["users"]) - 1
    server = _shared["server"]
    if _shared["users"] == 0 and isinstance(server, PostgresServer):
        _shared["server"] = None
        _stop(server)


def _stop(server: PostgresServer) -> None:
    """Stop ``server`` and remove its folder."""
    try:
        server.stop()
    finally:
        shutil.rmtree(server.folder, ignore_errors=True)
    forget(f"postgres {server.folder}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's throwaway PostgreSQL server (skips where there is none)."""
    require("postgres", "uses the throwaway PostgreSQL server")
    server = _acquire()
    try:
        yield server
    finally:
        _release()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test (a schema of its own:
    :meth:`PostgresServer.create_schema`); dropped afterwards."""
    require("postgres", "uses the throwaway PostgreSQL server")
    url = postgres_server.create_schema()
    try:
        yield url
    finally:
        postgres_server.drop_schema(url)
