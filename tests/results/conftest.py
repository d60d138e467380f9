"""Results databases for the query, CLI and store tests, on SQLite and on PostgreSQL.

``db_url`` is an empty database, once per backend: a SQLite file, and a fresh database
on the session's throwaway PostgreSQL server (see tests/helpers/postgres.py; those cases
skip with a note where the machine has no PostgreSQL). ``results_db`` is the same,
filled with the two studies below; ``db`` is that SQLite file as a path, for tests that
look at the file itself (``shared_db``: one a module, for those that only read it).
``shared_results_db`` is ``results_db`` made once per test module and backend, for the many tests that only read it (a fresh database each cost
them most of their time); ``module_databases``
makes such databases for a module's own contents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from diel.results import EpochRecord, ResultRecord, ResultsStore, TrialStart
from diel.search.space import param_key

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

TRIALS = [  # number, params, status, accuracy, loss, time
    (0, {"lr": 0.1, "activation": "relu", "layers": 1}, "ok", 0.90, 0.30, 10.0),
    (1, {"lr": 0.01, "activation": "relu", "layers": 2}, "ok", 0.95, 0.20, 20.0),
    (2, {"lr": 0.001, "activation": "tanh", "layers": 2}, "ok", 0.80, 0.50, 30.0),
    (3, {"lr": 0.001, "activation": "relu", "layers": 3}, "failed", None, None, None),
    (4, {"lr": 0.01, "activation": "tanh", "layers": 3}, "pruned", 0.40, 1.10, 5.0),
    (5, {"lr": 0.1, "activation": "tanh", "layers": 1}, "running", None, None, None),
]


def fill(url: str) -> str:
    """Write the two test studies into the database at ``url``; returns ``url``."""
    store = ResultsStore(url)
    state = store.open_study("grid", "grid", "accuracy", "maximize", {"seed": 1})
    store.record(state.study_id, starts=[TrialStart(n, p, param_key(p)) for n, p, *_ in TRIALS])
    store.record(state.study_id,
                 [EpochRecord(0, 1, {"accuracy": 0.5}, worker=1),
                  EpochRecord(0, 2, {"accuracy": 0.9}, worker=1)],
                 [ResultRecord(n, status, acc, time, acc, loss, {"f1": acc} if acc else {},
                               worker=n % 2, epoch=2, error="boom\nOOM" if status == "failed" else None)
                  for n, _, status, acc, loss, time in TRIALS if status != "running"])
    other = store.open_study("loss", "random", "loss", "minimize", {})
    store.record(other.study_id, starts=[TrialStart(0, {"lr": 0.5}, '{"lr":0.5}'),
                                        TrialStart(1, {"lr": 0.2}, '{"lr":0.2}')])
    store.record(other.study_id, [], [ResultRecord(0, "ok", 0.7, loss=0.7),
                                      ResultRecord(1, "ok", 0.3, loss=0.3)])
    store.close()
    return url


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path) -> str:
    """An empty results database URL: a SQLite file, or a fresh PostgreSQL database (a
    schema of its own, see tests/helpers/postgres.py)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'wf.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def results_db(db_url) -> str:
    """``db_url`` holding the two test studies."""
    return fill(db_url)


@pytest.fixture
def db(tmp_path):
    """The two test studies in the SQLite file ``tmp_path/wf.db`` (a path)."""
    path = tmp_path / "wf.db"
    fill(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="module")
def shared_db(tmp_path_factory) -> Path:
    """``db`` written once per test module, for the tests that only read it (or only
    need a results database's path)."""
    path = tmp_path_factory.mktemp("shared") / "wf.db"
    fill(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="module", params=BACKENDS)
def module_databases(request, tmp_path_factory) -> Iterator[Callable[[], str]]:
    """Makes empty results databases on one backend that last as long as the test module
    (each SQLite file is ``wf.db`` in a folder of its own); for tests that only read."""
    server = None if request.param == "sqlite" else request.getfixturevalue("postgres_server")
    made: list[str] = []

    def make() -> str:
        if server is None:
            return f"sqlite:///{tmp_path_factory.mktemp('results') / 'wf.db'}"
        made.append(server.create_schema())
        return made[-1]

    yield make
    for url in made:
        server.drop_schema(url)


@pytest.fixture(scope="module")
def shared_results_db(module_databases) -> str:
    """The two test studies, written once per module and backend: for tests that only
    read (a test that wrote would change what the next one reads)."""
    return fill(module_databases())
