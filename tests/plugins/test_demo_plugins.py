"""A sampler and a scheduler added by one file each plus one entry point (the package
tests/plugins/demo_plugins, registered by a dist-info written at test time, as an
installed package would have it) are found by name and drive a real search under
mpiexec."""

from __future__ import annotations

import sys

import pytest

import diel.results
from tests.helpers.launch import run_mpi, search_workflow
from tests.plugins import demo_plugins

pytestmark = pytest.mark.mpi

EPOCHS = """\
import time


def objective(trial):
    for epoch in range(1, 10):
        time.sleep(0.1)
        if trial.report(epoch, accuracy=trial.params["x"] / 1000 * epoch / 9):
            break
    return {"accuracy": trial.params["x"] / 1000 * epoch / 9}
"""


def test_a_demo_sampler_and_scheduler_run_a_search_end_to_end(tmp_path):
    env = demo_plugins.install(tmp_path)
    (tmp_path / "epochs.py").write_text(EPOCHS)
    search = ("      strategy: {demo: {step: 7}}\n      space: {x: {int: [0, 1000]}}\n"
              "      max_trials: 4\n      mode: batch\n      progress_interval: 3600\n"
              "      pruner: {demo: {at: 3}}")
    path = search_workflow(tmp_path, search, "    function: worker\n    copies: 1\n"
                                             "    settings: {run: epochs.py:objective, isolate: false}")
    result = run_mpi(3, [sys.executable, "-m", "diel", "run", str(path)], timeout=120, env=env,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with diel.results.open(tmp_path / "wf.db") as results:
        rows = sorted(results.trials(), key=lambda row: row["number"])
    assert [row["params"]["x"] for row in rows] == [7, 14, 21, 28]   # the demo's sequence
    for row in rows:   # stopped at the demo's epoch (or soon after, if the order came late)
        assert row["status"] == "pruned" and 3 <= row["epoch"] < 9, (row, result.stderr[-3000:])
