"""A search of two objectives as a user runs it: ``mpiexec -n 4 diel run`` with strategy
``nsga2``, then ``diel results --pareto`` and ``diel studies`` on its database."""

from __future__ import annotations

import csv
import io

import pytest

import diel.results
from tests.helpers.launch import run_diel
from tests.helpers.search import quiet, workflow

pytestmark = pytest.mark.mpi

SEARCH = """\
      strategy: {nsga2: {population_size: 4}}
      seed: 1
      max_trials: 12
      mode: batch
      metrics: [cost]
      objectives: {accuracy: maximize, cost: minimize}
      space:
        x: {uniform: [0, 6]}
        y: {range: [-2, 2], step: 1}"""


def accurate_but_costly(trial) -> dict:
    """Accuracy peaks at x = 3 while the cost grows with x and |y|: a trade-off."""
    x, y = trial.params["x"], trial.params["y"]
    accuracy = 1 - abs(x - 3) / 10 - abs(y) / 100
    return {"accuracy": accuracy, "loss": 1 - accuracy, "cost": x + abs(y)}


@pytest.mark.slow
def test_nsga2_searches_two_objectives_under_mpiexec(tmp_path):
    path = workflow(tmp_path, SEARCH, function="tests.search.test_objectives_mpi:"
                                               "accurate_but_costly")
    done = run_diel("run", str(path), n=4, timeout=120)
    assert done.returncode == 0, done.stderr
    quiet(done.stdout + done.stderr)
    with diel.results.open(tmp_path / "wf.db") as results:
        rows = results.trials(study="wf", sort="number")
        front = [row["number"] for row in results.pareto(study="wf")]
    assert [row["number"] for row in rows] == list(range(12))
    assert {row["status"] for row in rows} == {"ok"}
    points = [(row["objectives"]["accuracy"], row["objectives"]["cost"]) for row in rows]
    assert all(cost == row["metrics"]["cost"] for (_, cost), row in zip(points, rows))
    assert sorted(front) == diel.results.pareto_front(points, ["maximize", "minimize"])
    report = done.stdout[done.stdout.index("Pareto front of study wf"):].splitlines()
    assert report[0].startswith(f"Pareto front of study wf (max_trials (12) reached): "
                                f"{len(front)} trial")
    assert [int(line.split()[0]) for line in report[3:3 + len(front)]] == front

    listed = run_diel("results", str(tmp_path / "wf.db"), "--pareto", "--format", "csv",
                      timeout=60)
    assert listed.returncode == 0, listed.stderr
    table = list(csv.DictReader(io.StringIO(listed.stdout)))
    assert [int(row["number"]) for row in table] == front
    assert {"objectives.accuracy", "objectives.cost"} <= set(table[0])
    studies = run_diel("studies", str(tmp_path / "wf.db"), timeout=60)
    header, _, line = studies.stdout.splitlines()
    assert "front" in header.split() and "nsga2" in line and "accuracy, cost" in line
