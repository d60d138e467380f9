"""Every strategy as a user runs it: ``mpiexec -n 4 diel run`` over a small space, and a
TPE study killed with SIGKILL and run again."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.launch import run_diel
from tests.helpers.search import kill_job, quiet, start_job, trained, trials, wait_for_ok, workflow

pytestmark = pytest.mark.mpi

SPACE = """\
      space:
        x: {uniform: [0, 6]}
        y: {range: [-2, 2], step: 1}"""


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [
    "{tpe: {n_startup_trials: 3}}",
    "{gp: {n_startup_trials: 3}}",
    "{cmaes: {popsize: 4}}",
    "qmc",
    "{nsga2: {population_size: 4}}",
])
def test_every_strategy_runs_a_search_end_to_end(tmp_path, strategy):
    path = workflow(tmp_path, f"      strategy: {strategy}\n      seed: 1\n      max_trials: 8\n"
                              + SPACE)
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    quiet(result.stdout + result.stderr)
    assert "max_trials (8) reached" in result.stdout   # the report's heading
    rows = trials(tmp_path)
    assert sorted(row["number"] for row in rows) == list(range(8))
    assert {row["status"] for row in rows} == {"ok"}
    assert all(0 <= row["params"]["x"] <= 6 and row["params"]["y"] in (-2, -1, 0, 1, 2)
               for row in rows)
    assert len(trained(tmp_path)) == 8


@pytest.mark.slow
def test_a_killed_tpe_study_resumes_from_its_stored_trials(tmp_path):
    path = workflow(tmp_path, "      strategy: {tpe: {n_startup_trials: 4}}\n"
                              "      max_trials: 16\n" + SPACE, worker="      sleep: 0.3")
    job = start_job(path, tmp_path / "killed.out")
    try:
        wait_for_ok(tmp_path, 4)
    finally:
        kill_job(job, path)
    before = {row["number"]: row for row in trials(tmp_path)}
    finished = {n: row for n, row in before.items() if row["status"] == "ok"}
    running = len(before) - len(finished)
    assert 4 <= len(finished) < 16, "the search should be killed midway"
    trained_before = len(trained(tmp_path))

    rerun = run_diel("run", str(path), n=4, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    quiet(rerun.stderr)
    # the sampler was rebuilt with every trial the database had
    assert re.search(rf"TPESampler: Optuna study rebuilt from the database with "
                     rf"{len(finished)} finished and {running} running trial\(s\)", rerun.stderr)
    rows = {row["number"]: row for row in trials(tmp_path)}
    assert sorted(rows) == list(range(16))          # no number twice, none skipped
    assert {row["status"] for row in rows.values()} == {"ok"}
    for number, row in finished.items():            # finished trials were left alone
        assert rows[number]["params"] == row["params"]
        assert rows[number]["finished_at"] == row["finished_at"]
    again = [json.dumps(p, sort_keys=True) for p in trained(tmp_path)[trained_before:]]
    assert len(again) == 16 - len(finished)
