"""The ASHA benchmark (benchmarks/asha_bench.py): the workflow it runs is examples/pytorch's
with the benchmark's grid, and a quick run prints its table, saying what it did not
measure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.launch import REPO, run_diel_in_process

sys.path.insert(0, str(REPO / "benchmarks"))

from asha_bench import diel_workflow, grid, points  # noqa: E402


def test_the_grid_is_in_diels_order_and_the_workflow_is_the_examples(tmp_path):
    space, epochs = grid(quick=False)
    assert points(space)[:2] == [{"channels": 8, "lr": 0.1}, {"channels": 8, "lr": 0.01}]
    assert len(points(space)) == 6 and epochs == 4
    path = diel_workflow(tmp_path, space, epochs)
    text = path.read_text()
    assert "pruner: {halving: {min_epochs: 1, eta: 2}}" in text and "epochs: 4," in text
    assert run_diel_in_process("validate", str(path)).returncode == 0


@pytest.mark.mpi
@pytest.mark.slow
def test_a_quick_run_prints_the_table_and_what_it_did_not_measure(tmp_path):
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "benchmarks/asha_bench.py", "--quick", "--dir",
                           str(tmp_path), "--ray-python", str(tmp_path / "no-python")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| system | launch to exit | best accuracy | epochs trained |" in done.stdout
    assert "| diel |" in done.stdout and "| Ray Tune |" not in done.stdout
    assert f"Ray Tune 2.60.0: not measured: --ray-python {tmp_path / 'no-python'}: No such " \
           "file" in done.stdout
