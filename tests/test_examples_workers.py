"""The worker examples (examples/pytorch, examples/sklearn, examples/program): each
objective called directly, without MPI, and each workflow run end to end under mpiexec
from a copy of its folder (so no results database lands in the repository)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import diel.results
from diel.worker import Trial
from tests.helpers.launch import REPO, run_diel

EXAMPLES = REPO / "examples"


def load_objective(example: str):
    """``objective`` of examples/<example>/train.py, imported under a name of its own."""
    path = EXAMPLES / example / "train.py"
    spec = importlib.util.spec_from_file_location(f"example_{example}_train", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.objective


class Recorder:
    """A reporter for Trial: records every report, prunes from ``prune_at`` on."""

    def __init__(self, prune_at: int | None = None) -> None:
        self.reports: list[tuple[int, dict]] = []
        self.prune_at = prune_at

    def __call__(self, step: int, metrics: dict) -> bool:
        self.reports.append((step, metrics))
        return self.prune_at is not None and step >= self.prune_at


def run_example(example: str, tmp_path: Path) -> list[dict]:
    """Run examples/<example>/search.yaml from a copy under mpiexec -n 4; its trials."""
    folder = tmp_path / example
    shutil.copytree(EXAMPLES / example, folder, ignore=shutil.ignore_patterns(
        "*.db", "*.db-*", "__pycache__"))
    result = run_diel("run", str(folder / "search.yaml"), n=4, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with diel.results.open(folder / "search.db") as results:
        return results.trials()


# --- PyTorch -------------------------------------------------------------------------

def test_pytorch_objective_learns_and_reports_every_epoch():
    pytest.importorskip("torch", reason="the PyTorch example needs pip install -e '.[examples]'")
    objective = load_objective("pytorch")
    trial = Trial(params={"lr": 0.05, "channels": 4, "epochs": 2}, number=0, study="t")
    result = objective(trial)
    assert set(result) == {"accuracy", "loss"}
    assert result["accuracy"] > 0.7, result   # 0.9 after 2 epochs; chance is 0.1
    assert trial.last_step == 2 and trial.last_metrics["accuracy"] == result["accuracy"]


def test_pytorch_objective_returns_when_pruned():
    pytest.importorskip("torch", reason="the PyTorch example needs pip install -e '.[examples]'")
    objective = load_objective("pytorch")
    recorder = Recorder(prune_at=1)
    trial = Trial(params={"lr": 0.1, "channels": 4, "epochs": 5}, number=0, study="t",
                  _reporter=recorder)
    result = objective(trial)
    assert [step for step, _ in recorder.reports] == [1]
    assert set(recorder.reports[0][1]) == {"accuracy", "loss"}
    assert result["accuracy"] == recorder.reports[0][1]["accuracy"]


@pytest.mark.mpi
@pytest.mark.slow
def test_pytorch_search_runs_end_to_end_with_halving(tmp_path):
    pytest.importorskip("torch", reason="the PyTorch example needs pip install -e '.[examples]'")
    trials = run_example("pytorch", tmp_path)
    assert len(trials) == 6
    assert {(t["params"]["channels"], t["params"]["lr"]) for t in trials} == {
        (c, lr) for c in (8, 4) for lr in (0.1, 0.01, 0.001)}
    statuses = [t["status"] for t in trials]
    assert set(statuses) <= {"ok", "pruned"}, trials
    assert "pruned" in statuses, trials
    assert max(t["accuracy"] for t in trials if t["status"] == "ok") > 0.5, trials
    assert all(t["epoch"] == 4 for t in trials if t["status"] == "ok"), trials


# --- scikit-learn --------------------------------------------------------------------

def test_sklearn_objective_fits_reports_and_can_be_pruned():
    pytest.importorskip("sklearn", reason="the scikit-learn example needs pip install -e '.[examples]'")
    objective = load_objective("sklearn")
    recorder = Recorder()
    trial = Trial(params={"alpha": 1e-3, "loss_fn": "log_loss", "epochs": 3}, number=0,
                  study="t", _reporter=recorder)
    result = objective(trial)
    assert result["accuracy"] > 0.7 and result["time"] > 0, result
    assert [step for step, _ in recorder.reports] == [1, 2, 3]
    assert "loss" in recorder.reports[-1][1]
    pruned = Recorder(prune_at=2)
    objective(Trial(params={"alpha": 1e-3, "loss_fn": "hinge", "epochs": 5}, number=1,
                    study="t", _reporter=pruned))
    assert [step for step, _ in pruned.reports] == [1, 2]


@pytest.mark.mpi
@pytest.mark.slow
def test_sklearn_random_search_runs_end_to_end(tmp_path):
    pytest.importorskip("sklearn", reason="the scikit-learn example needs pip install -e '.[examples]'")
    trials = run_example("sklearn", tmp_path)
    assert sorted(t["number"] for t in trials) == list(range(12))
    assert all(t["status"] == "ok" for t in trials), trials
    assert all(1e-6 <= t["params"]["alpha"] <= 1e-1 for t in trials)
    assert {t["params"]["loss_fn"] for t in trials} <= {"hinge", "log_loss", "modified_huber"}
    assert max(t["accuracy"] for t in trials) > 0.8, trials


# --- a program -----------------------------------------------------------------------

def one_blas_thread(**variables: str) -> dict[str, str]:
    """The environment of the program run by hand, with ``variables``: one BLAS thread
    unless the suite's environment says otherwise, as run_mpi gives every rank. An
    OpenBLAS pool spinning over the example's small matrices, against the other xdist
    worker, cost about ten times the CPU of one thread."""
    return {"OMP_NUM_THREADS": "1", **os.environ, **variables}


def test_program_prints_its_reports_when_run_by_hand():
    result = subprocess.run([sys.executable, str(EXAMPLES / "program" / "train.py"),
                             "--lr", "0.1", "--epochs", "2"],
                            capture_output=True, text=True, timeout=60, cwd=REPO,
                            env=one_blas_thread())
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("step") for line in lines] == [1, 2, None]
    assert lines[-1]["accuracy"] > 0.7 and lines[-1]["time"] > 0


def test_program_writes_report_and_result_files(tmp_path):
    env = one_blas_thread(DIEL_REPORT_FILE=str(tmp_path / "reports.jsonl"),
                          DIEL_RESULT_FILE=str(tmp_path / "result.json"))
    result = subprocess.run([sys.executable, str(EXAMPLES / "program" / "train.py"),
                             "--lr", "0.05", "--epochs", "3"],
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    reports = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert [r["step"] for r in reports] == [1, 2, 3]
    final = json.loads((tmp_path / "result.json").read_text())
    assert final["accuracy"] == reports[-1]["accuracy"] > 0.7


@pytest.mark.mpi
@pytest.mark.slow
def test_program_search_runs_end_to_end_with_median_pruning(tmp_path):
    trials = run_example("program", tmp_path)
    assert sorted(t["params"]["lr"] for t in trials) == sorted(
        [0.1, 0.05, 0.02, 0.005, 0.001, 0.0002])
    by_lr = {t["params"]["lr"]: t for t in trials}
    assert by_lr[0.1]["status"] == "ok" and by_lr[0.1]["epoch"] == 12, by_lr[0.1]
    assert by_lr[0.1]["accuracy"] > 0.8, by_lr[0.1]
    statuses = [t["status"] for t in trials]
    assert set(statuses) <= {"ok", "pruned"}, trials
    assert by_lr[0.0002]["status"] == "pruned" and by_lr[0.0002]["epoch"] < 12, by_lr[0.0002]
