"""Whole searches under mpiexec: master, tuple space, workers and the database together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers.launch import REPO, find_mpiexec, run_diel, run_diel_in_process
from tests.helpers.search import GRID, finished_so_far, kill_job, trained, trials, workflow

@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["async", "batch"])
def test_full_grid_lands_in_the_database_exactly_once(tmp_path, mode):
    path = workflow(tmp_path, GRID + f"\n      mode: {mode}")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = trials(tmp_path)
    points = sorted((row["params"]["x"], row["params"]["y"]) for row in rows)
    assert points == [(x, y) for x in range(6) for y in (-1, 1)]
    assert {row["status"] for row in rows} == {"ok"}
    # every row names its worker copy (which copies got work depends on start-up timing)
    assert {row["worker"] for row in rows} <= {0, 1}
    assert "grid exhausted" in result.stdout + result.stderr


@pytest.mark.mpi
def test_batch_mode_waits_for_the_whole_group(tmp_path):
    path = workflow(tmp_path, GRID + "\n      mode: batch", worker="      sleep: 0.2")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = sorted(trials(tmp_path), key=lambda row: row["number"])
    for first, second in zip(rows[0::2], rows[1::2]):  # groups of two (one per worker copy)
        group_end = max(first["finished_at"], second["finished_at"])
        later = [row for row in rows if row["number"] > second["number"]]
        assert all(row["started_at"] >= group_end for row in later)


@pytest.mark.mpi
def test_random_search_stops_at_its_threshold(tmp_path):
    path = workflow(tmp_path, """\
      strategy: random
      seed: 3
      space:
        x: {int: [0, 6]}
      stop_when: accuracy >= 0.99
      max_trials: 200""", worker="      sleep: 0.05")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = trials(tmp_path)
    assert any(row["accuracy"] >= 0.99 for row in rows)
    assert len(rows) < 60  # stopped long before max_trials
    assert "stop_when" in result.stdout + result.stderr or "accuracy >= 0.99" in result.stdout + result.stderr


@pytest.mark.mpi
def test_failing_and_diverging_trials_are_recorded_and_the_search_completes(tmp_path):
    path = workflow(tmp_path, GRID, worker="      fail_at: 1\n      diverge_at: 4")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = trials(tmp_path)
    assert len(rows) == 12
    failed = {(row["params"]["x"], row["params"]["y"]): row["error"] for row in rows
              if row["status"] == "failed"}
    assert set(failed) == {(1, -1), (1, 1), (4, -1), (4, 1)}
    assert "planted failure at x=1" in failed[(1, 1)]
    assert "diverged" in failed[(4, 1)]
    assert sum(row["status"] == "ok" for row in rows) == 8


@pytest.mark.mpi
@pytest.mark.slow
def test_executable_trainer_timeouts_and_exit_codes_are_recorded(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("""
import json, os, sys, time
x = int(sys.argv[1])
if x == 1:
    time.sleep(30)
if x == 2:
    print("CUDA out of memory (planted)", file=sys.stderr)
    sys.exit(4)
json.dump({"accuracy": 0.5 + x / 10, "loss": 0.1}, open(os.environ["DIEL_RESULT_FILE"], "w"))
""")
    path = workflow(tmp_path, "      space: {x: {values: [0, 1, 2, 3]}}", function="trainer",
                    worker=f"      command: [python, '{script}', '{{x}}']\n      timeout: 2")
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {row["params"]["x"]: row for row in trials(tmp_path)}
    assert rows[0]["status"] == rows[3]["status"] == "ok"
    assert rows[3]["accuracy"] == pytest.approx(0.8)
    assert rows[1]["status"] == "failed" and "timed out after 2 s" in rows[1]["error"]
    assert rows[2]["status"] == "failed" and "exited with status 4" in rows[2]["error"]
    assert "CUDA out of memory (planted)" in rows[2]["error"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request, tmp_path) -> str:
    """Where the search writes: the workflow's SQLite file, or a fresh database on the
    throwaway PostgreSQL server (tests/helpers/postgres.py; skipped where there is none)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'wf.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.mark.mpi
@pytest.mark.slow
def test_killed_search_resumes_without_retraining_finished_trials(tmp_path, database):
    path = workflow(tmp_path, GRID.replace("[0, 5]", "[0, 9]") + f"\n      database: '{database}'",
                    worker="      sleep: 0.3")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    job = subprocess.Popen([find_mpiexec(), "-n", "4", sys.executable, "-m", "diel", "run",
                            str(path)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    finished_before = []
    while time.monotonic() < deadline and len(finished_before) < 4:
        time.sleep(0.2)
        finished_before = finished_so_far(tmp_path, database)
    kill_job(job, path)
    assert 4 <= len(finished_before) < 20, "the search should be killed midway"
    assert database.startswith("sqlite") or not (tmp_path / "wf.db").exists()
    rows_after_kill = trials(tmp_path, database)
    finished_at_kill = {json.dumps(row["params"], sort_keys=True) for row in rows_after_kill
                        if row["status"] == "ok"}
    trained_before = len(trained(tmp_path))

    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = trials(tmp_path, database)
    points = sorted((row["params"]["x"], row["params"]["y"]) for row in rows)
    assert points == [(x, y) for x in range(10) for y in (-1, 1)]  # each point exactly once
    assert {row["status"] for row in rows} == {"ok"}
    retrained = [json.dumps(p, sort_keys=True) for p in trained(tmp_path)[trained_before:]]
    assert not finished_at_kill & set(retrained)
    assert len(retrained) == len(set(retrained)) == 20 - len(finished_at_kill)


def test_configs_pass_validate():
    for config in sorted((REPO / "configs").glob("*.yaml")):
        result = run_diel_in_process("validate", str(config))
        assert result.returncode == 0, (config, result.stderr)
        assert "run it with: mpiexec -n" in result.stdout
