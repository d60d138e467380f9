"""The worker module under mpiexec: misbehaving trials, crash loops, pruned programs,
multi-rank timeouts."""

from __future__ import annotations

import sys
import time

import pytest

from tests.helpers.launch import run_diel
from tests.helpers.worker import trials, workflow

pytestmark = pytest.mark.mpi

MODES = ["ok", "segfault", "abort", "exit", "sysexit", "raise", "nan", "hang", "number"]

EXPECTED = {
    "ok": ("ok", None),
    "number": ("ok", None),
    "segfault": ("failed", "killed by SIGSEGV"),
    "abort": ("failed", "killed by SIGABRT"),
    "exit": ("failed", "exited with status 3"),
    "sysexit": ("failed", "the trial called sys.exit(3)"),
    "raise": ("failed", "ValueError: planted failure"),
    "nan": ("failed", "diverged"),
    "hang": ("failed", "timed out after 3 s"),
}


@pytest.mark.slow
def test_every_way_a_trial_can_end_is_recorded_and_the_search_completes(tmp_path):
    path = workflow(tmp_path, "{run: behaviours.py:objective, timeout: 3, grace: 1}",
                    f"{{mode: {{values: {MODES}}}}}")
    started = time.monotonic()
    result = run_diel("run", str(path), n=4, timeout=120)
    wall = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["mode"]: row for row in trials(tmp_path / "wf.db")}
    assert sorted(rows) == sorted(MODES)
    for mode, (status, reason) in EXPECTED.items():
        assert rows[mode]["status"] == status, (mode, rows[mode])
        if reason:
            assert reason in rows[mode]["error"], (mode, rows[mode]["error"])
    assert rows["number"]["objective"] == 0.5
    assert rows["ok"]["accuracy"] == 0.9
    # 9 trials on 2 copies: the 3 s timeout dominates, plus MPI start-up (5 s measured)
    assert wall < 3 + 1 + 12, f"the search took {wall:.1f} s"


@pytest.mark.slow
def test_a_crashing_in_process_trial_is_failed_after_max_attempts(tmp_path):
    path = workflow(tmp_path, "{run: behaviours.py:objective, isolate: false, max_attempts: 2}",
                    "{mode: {values: [ok, segfault, raise, number]}}", copies=1)
    for attempt in range(2):   # the segfault kills the job, once per run
        result = run_diel("run", str(path), n=3, timeout=120)
        assert result.returncode != 0, result.stdout[-2000:]
    crashed = [row for row in trials(tmp_path / "wf.db") if row["mode"] == "segfault"]
    assert crashed[0]["status"] == "running" and crashed[0]["attempts"] == 2
    result = run_diel("run", str(path), n=3, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = trials(tmp_path / "wf.db")
    assert sorted(row["mode"] for row in rows) == ["number", "ok", "raise", "segfault"]
    by_mode = {row["mode"]: row for row in rows}
    assert by_mode["segfault"]["status"] == "failed"
    assert by_mode["segfault"]["error"] == "the job died 2 times while this trial ran"
    assert by_mode["ok"]["status"] == "ok" and by_mode["number"]["status"] == "ok"
    assert by_mode["raise"]["status"] == "failed"


@pytest.mark.slow
@pytest.mark.parametrize("pruner", ["{median: {min_trials: 2, warmup_epochs: 1}}",
                                    "{halving: {min_epochs: 1, eta: 2}}"])
def test_a_program_trial_reporting_progress_is_pruned(tmp_path, pruner):
    program = tmp_path / "train.py"
    program.write_text(
        "import json, os, sys, time\n"
        "quality = float(sys.argv[1])\n"
        "for step in range(1, 7):\n"
        "    time.sleep(0.3)\n"
        "    with open(os.environ['DIEL_REPORT_FILE'], 'a') as f:\n"
        "        f.write(json.dumps({'step': step, 'accuracy': quality * step}) + '\\n')\n"
        "with open(os.environ['DIEL_RESULT_FILE'], 'w') as f:\n"
        "    json.dump({'accuracy': quality * 6}, f)\n")
    path = workflow(tmp_path, f"{{command: [{sys.executable}, train.py, '{{quality}}'], timeout: 60}}",
                    "{quality: {values: [0.16, 0.15, 0.01]}}",
                    search_extra=f"      mode: batch\n      pruner: {pruner}", copies=1)
    result = run_diel("run", str(path), n=3, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["quality"]: row for row in trials(tmp_path / "wf.db")}
    assert rows[0.16]["status"] == "ok" and rows[0.16]["epoch"] == 6
    assert rows[0.01]["status"] == "pruned" and rows[0.01]["epoch"] < 6, rows[0.01]


def test_a_two_rank_trial_with_an_allreduce_per_step_honours_its_timeout(tmp_path):
    (tmp_path / "collective.py").write_text(
        "import time\n"
        "def objective(trial):\n"
        "    total = 0\n"
        "    steps = 1000 if trial.params['pause'] else 20\n"
        "    for step in range(1, steps + 1):\n"
        "        total = trial.comm.allreduce(step)\n"
        "        time.sleep(float(trial.params['pause']))\n"
        "        trial.report(step, accuracy=1 / step)\n"
        "    return {'accuracy': total}\n")
    path = workflow(tmp_path, "{run: collective.py:objective, timeout: 2, grace: 1}",
                    "{pause: {values: [0.05, 0.0]}}", size=2, copies=1)
    started = time.monotonic()
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 60
    rows = {row["pause"]: row for row in trials(tmp_path / "wf.db")}
    assert rows[0.05]["status"] == "failed" and "timed out after 2 s" in rows[0.05]["error"]
    assert rows[0.0]["status"] == "ok"
