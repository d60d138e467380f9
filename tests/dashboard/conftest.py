"""The database the dashboard tests read.

``synthetic``: a database written through diel's own storage API (ResultsStore), with
a study of one objective ('alpha': every status, per-epoch reports, three worker
copies, a diverged (NaN) loss in an epoch report; tests/helpers/dashboard.py) and one of
two objectives ('pair'). The throwaway PostgreSQL server's fixtures come from
tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diel.results import ResultRecord, ResultsStore, TrialStart
from tests.helpers.dashboard import SPACE, write_alpha


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory) -> Path:
    """The database of 'alpha' and 'pair' (module docstring)."""
    path = tmp_path_factory.mktemp("dashboard") / "synthetic.db"
    store = ResultsStore(f"sqlite:///{path}")
    try:
        write_alpha(store)
        state = store.open_study("pair", "nsga2", "accuracy", "maximize", {"space": SPACE},
                                 objectives=[("accuracy", "maximize"), ("time", "minimize")])
        points = [(0.9, 10.0), (0.8, 5.0), (0.7, 6.0), (0.95, 20.0)]
        store.record(state.study_id, starts=[TrialStart(n, {"lr": 0.01, "act": "relu"}, f"p{n}")
                                             for n in range(len(points))])
        store.record(state.study_id, results=[
            ResultRecord(n, "ok", acc, time=t, accuracy=acc, worker=0, epoch=1,
                         objective_values=(acc, t)) for n, (acc, t) in enumerate(points)])
    finally:
        store.close()
    return path


