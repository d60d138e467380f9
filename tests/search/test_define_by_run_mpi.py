"""Define-by-run searches under mpiexec: an objective in Optuna's style runs unchanged
with 4 workers (isolated children asking through their ranks), and a define-by-run TPE
study killed mid-way resumes with its sampler rebuilt from the stored distributions."""

from __future__ import annotations

import json

import pytest

import diel.results
from diel.worker import Trial
from tests.helpers.launch import run_diel, search_workflow
from tests.helpers.search import kill_job, quiet, start_job, wait_for_ok, workflow

PROBE = "tests.search.probe_optuna:objective"
RANKS = "tests.search.probe_optuna:on_every_rank"
SEARCH = """\
      strategy: {strategy}
      seed: 3
      max_trials: {trials}
      metrics: [value]
      objective: value
      direction: maximize
      pruner: {{median: {{min_trials: 3, warmup_epochs: 1}}}}"""


def stored(tmp_path):
    with diel.results.open(tmp_path / "wf.db") as results:
        return results.trials(), results.distributions("wf")


def check_trials(trials, distributions) -> None:
    """Each trial has its active parameters only, each with its stored distribution."""
    for trial in trials:
        active = {"classifier", "svc_c" if trial["params"]["classifier"] == "SVC"
                  else "rf_max_depth"}
        assert set(trial["params"]) == active, trial
        assert set(distributions[trial["number"]]) == active


@pytest.mark.mpi
@pytest.mark.parametrize("strategy", ["tpe", "random"])
def test_an_optuna_style_objective_runs_unchanged_on_4_workers(tmp_path, strategy):
    path = workflow(tmp_path, SEARCH.format(strategy=strategy, trials=24), copies=4,
                    function=PROBE)
    job = run_diel("run", str(path), n=6, timeout=240)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    quiet(job.stderr)
    trials, distributions = stored(tmp_path)
    assert len(trials) == 24 and {t["status"] for t in trials} <= {"ok", "pruned"}
    assert any(t["status"] == "pruned" for t in trials)
    check_trials(trials, distributions)
    best = max((t for t in trials if t["status"] == "ok"), key=lambda t: t["objective"])
    from tests.search.probe_optuna import objective   # imports Optuna: not at collection
    again = objective(Trial(params={k: v for k, v in best["params"].items()},
                            number=best["number"], study="by hand"))
    assert again == best["objective"]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_killed_define_by_run_tpe_study_resumes_with_its_sampler_rebuilt(tmp_path):
    path = workflow(tmp_path, SEARCH.format(strategy="tpe", trials=16),
                    worker="      sleep: 0.1", function=PROBE)
    job = start_job(path, tmp_path / "killed.out")
    try:
        wait_for_ok(tmp_path, 4, timeout=120)
    finally:
        kill_job(job, path)
    before, _ = stored(tmp_path)
    rerun = run_diel("run", str(path), n=4, timeout=240)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    quiet(rerun.stderr)
    finished = sum(t["status"] in ("ok", "pruned", "failed") for t in before)
    assert finished < 16   # killed mid-way
    assert "TPESampler: Optuna study rebuilt from the database with " \
           f"{finished} finished" in rerun.stderr
    trials, distributions = stored(tmp_path)
    assert len(trials) == 16 and {t["status"] for t in trials} <= {"ok", "pruned"}
    check_trials(trials, distributions)


@pytest.mark.mpi
def test_a_copy_of_two_ranks_trains_each_trial_with_the_same_suggested_values(tmp_path):
    log = tmp_path / "ranks.log"
    path = search_workflow(tmp_path, SEARCH.format(strategy="tpe", trials=6), (
        f"    function: worker\n    size: 2\n    settings:\n      run: {RANKS}\n"
        f"      params: {{log: '{log}'}}"))
    job = run_diel("run", str(path), n=4, timeout=240)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    trials, distributions = stored(tmp_path)
    check_trials(trials, distributions)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    for trial in trials:
        by_rank = [entry["params"] for entry in seen if entry["number"] == trial["number"]]
        assert len(by_rank) == 2 and by_rank[0] == by_rank[1] == {
            **trial["params"], "log": str(log)}
