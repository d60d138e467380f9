"""Studies to plot.

``shipped``: the shipped grid and random searches (configs/mnist_grid.yaml,
configs/mnist_random.yaml), run for real under mpiexec with their spaces, strategies,
objectives, stop rules and pruner as shipped, their trainer replaced by a stand-in of
the same parameters that trains in milliseconds (fastmodel.py): the real trainer takes
about a minute per search on this machine. Run once for the whole session.

``synthetic``: a database written through diel's own storage API (ResultsStore) with
what a short search cannot be relied on to produce: a study of two objectives with a
known front, a study whose trials are all still running, one whose trials all failed.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from diel.results import EpochRecord, ResultRecord, ResultsStore, TrialStart
from diel.results._models import utcnow
from tests.helpers.launch import REPO, run_diel

HERE = Path(__file__).resolve().parent
SHIPPED = ("mnist_grid", "mnist_random")

# (number, accuracy, time): the front of (accuracy max, time min) is trials 0, 1, 3.
TRADEOFF = [(0, 0.90, 10.0), (1, 0.80, 5.0), (2, 0.70, 6.0), (3, 0.95, 20.0),
            (4, 0.85, 12.0), (5, 0.60, 9.0)]


def shipped_workflow(name: str, folder: Path) -> Path:
    """configs/NAME.yaml with its results in ``folder`` and its trainer a fastmodel
    worker with the same copies and epochs."""
    config = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
    search = config["modules"]["search"]["settings"]
    search["database"] = f"{name}.db"
    search["progress_interval"] = 3600
    trainer = config["modules"]["trainer"]
    trainer.update(function="worker", settings={
        "run": "fastmodel.py:objective", "params": {"epochs": trainer["settings"]["epochs"]}})
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def shipped(tmp_path_factory) -> dict[str, Path]:
    """The databases of the shipped grid and random searches, by config name."""
    folder = tmp_path_factory.mktemp("shipped")
    shutil.copy(HERE / "fastmodel.py", folder / "fastmodel.py")
    out = {}
    for name in SHIPPED:
        result = run_diel("run", str(shipped_workflow(name, folder)), n=4, timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
        out[name] = folder / f"{name}.db"
    return out


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory) -> Path:
    """A database with the studies 'tradeoff' (two objectives), 'waiting' (every trial
    running) and 'broken' (every trial failed)."""
    path = tmp_path_factory.mktemp("synthetic") / "synthetic.db"
    store = ResultsStore(f"sqlite:///{path}")
    space = {"lr": {"loguniform": [1e-4, 1e-1]}, "act": {"choice": ["relu", "tanh"]}}
    try:
        state = store.open_study("tradeoff", "random", "accuracy", "maximize", {"space": space},
                                 objectives=[("accuracy", "maximize"), ("time", "minimize")])
        params = [{"lr": 10.0 ** -(1 + n % 3), "act": ["relu", "tanh"][n % 2]}
                  for n, _, _ in TRADEOFF]
        store.record(state.study_id, starts=[TrialStart(n, params[n], f"k{n}")
                                             for n, _, _ in TRADEOFF])
        store.record(state.study_id, epochs=[EpochRecord(n, 1, {"accuracy": acc / 2}, worker=n % 2)
                                             for n, acc, _ in TRADEOFF],
                     results=[ResultRecord(n, "ok", acc, time=t, accuracy=acc, worker=n % 2,
                                           epoch=1, objective_values=(acc, t))
                              for n, acc, t in TRADEOFF])
        state = store.open_study("waiting", "grid", "accuracy", "maximize", {"space": space})
        store.record(state.study_id, starts=[TrialStart(0, params[0], "k0")])
        state = store.open_study("broken", "grid", "accuracy", "maximize", {"space": space})
        store.record(state.study_id, starts=[TrialStart(0, params[0], "k0")])
        store.record(state.study_id, results=[ResultRecord(
            0, "failed", worker=0, error="boom", finished_at=utcnow() + timedelta(seconds=1))])
    finally:
        store.close()
    return path
