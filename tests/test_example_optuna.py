"""examples/optuna: an Optuna objective run by diel unchanged. The objective gives the
same accuracy for the same parameters (by hand, as the README shows), the workflow
validates, and the search runs as the README runs it."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

import diel.results
from diel.worker import Trial
from tests.helpers.launch import REPO, run_diel, run_diel_in_process

# looked for, not imported: collecting this file (on every worker of every run) would
# otherwise import scikit-learn and Optuna; the tests that run the objective import them
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                       reason="the Optuna example needs pip install -e '.[examples]'"),
    pytest.mark.skipif(importlib.util.find_spec("optuna") is None,
                       reason="the Optuna example needs pip install -e '.[search]'")]
FOLDER = REPO / "examples" / "optuna"


def objective():
    spec = importlib.util.spec_from_file_location("example_optuna", FOLDER / "objective.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.objective


def test_the_objective_by_hand_gives_the_same_accuracy_each_time():
    params = {"classifier": "RandomForest", "rf_max_depth": 6}
    first = objective()(Trial(params=dict(params), number=0, study="by hand"))
    assert 0.8 < first < 1.0
    assert objective()(Trial(params=dict(params), number=1, study="by hand")) == first


def test_the_workflow_validates_on_six_ranks():
    done = run_diel_in_process("validate", str(FOLDER / "search.yaml"))
    assert done.returncode == 0, done.stderr
    assert "mpiexec -n 6 diel run" in done.stdout


@pytest.mark.mpi
@pytest.mark.slow
def test_the_search_runs_as_the_readme_runs_it(tmp_path):
    folder = tmp_path / "optuna"
    shutil.copytree(FOLDER, folder, ignore=shutil.ignore_patterns("*.db", "*.db-*", "__pycache__"))
    done = run_diel("run", str(folder / "search.yaml"), n=6, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with diel.results.open(folder / "search.db") as results:
        trials = results.trials()
    assert len(trials) == 40 and {t["status"] for t in trials} <= {"ok", "pruned"}
    for trial in trials:
        own = "sgd_alpha" if trial["params"]["classifier"] == "SGD" else "rf_max_depth"
        assert set(trial["params"]) == {"classifier", own}
