"""Numbers as people write them, end to end: a grid over ``1e-3``-style learning rates
trains to completion under mpiexec, and a workflow's warnings are printed once (by
``diel validate``, and by rank 0 of ``diel run``) without changing the exit status."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import diel.results
from tests.helpers.launch import run_diel, run_diel_in_process

TRAINER_GRID = """\
modules:
  space: {function: tuplespace}
  search:
    function: search
    settings:
      space:
        learning_rate: {values: [1e-3, 1e-2]}
  trainer:
    function: trainer
    copies: 2
    settings: {train_size: 500, epochs: 1, hidden: [16], batch_size: 50}
services: [space]
"""

PROBE_GRID = """\
modules:
  space: {function: tuplespace}
  search:
    function: search
    settings:
      space:
        x: {values: [1, 2]}
        tag: {values: [1e-3, "0.01"]}
  trainer:
    function: worker
    copies: 2
    settings:
      run: tests.search.probe_workers:quick
      params: {log: trained.log}
services: [space]
"""


@pytest.mark.mpi
def test_a_grid_over_1e3_style_learning_rates_trains_to_completion(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(TRAINER_GRID)
    result = run_diel("run", str(path), n=4, timeout=180)
    assert result.returncode == 0, result.stderr
    with diel.results.open(tmp_path / "wf.db") as results:
        rows = results.trials()
    assert sorted(row["params"]["learning_rate"] for row in rows) == [0.001, 0.01]
    assert all(row["status"] == "ok" and row["epoch"] == 1 for row in rows), rows


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("diel: warning: ")]


def test_validate_prints_the_warning_and_exits_0(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(PROBE_GRID)
    result = run_diel_in_process("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert warnings_in(result.stderr) == [
        f"diel: warning: {path}: modules.search.settings.space.tag.values: mixes numbers with "
        "strings that look like numbers ('0.01'); quoted values stay strings, so trials "
        "would get both kinds: write them unquoted"]
    assert "is valid" in result.stdout


@pytest.mark.mpi
def test_run_prints_each_warning_once_and_runs(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(PROBE_GRID)
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    (warning,) = warnings_in(result.stderr)
    assert "modules.search.settings.space.tag.values: mixes numbers" in warning
    with diel.results.open(tmp_path / "wf.db") as results:
        tags = Counter(row["params"]["tag"] for row in results.trials() if row["status"] == "ok")
    assert tags == {0.001: 2, "0.01": 2}
    assert Path(tmp_path / "trained.log").exists()
