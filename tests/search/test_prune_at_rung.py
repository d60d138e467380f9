"""Pruning takes effect at the report that crosses a rung: the master's answer to a
report at one of the trial's decision points (a halving rung; an epoch past the median
rule's warm-up) reaches the trial before ``trial.report`` returns, so a pruned trial
trains exactly its rung's epochs, in the rank, in an isolated child and as a program
(each counts the epochs it trains); a multi-rank copy under mpiexec too."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

import pytest

import diel.results
from diel.results import MemoryStorage
from diel.search import parse_settings, run_search
from diel.search.protocol import DecisionPoints, go_on, prune_tag
from diel.search.schedulers import HalvingPruner, HyperbandPruner, MedianPruner
from diel.worker.inprocess import InProcessRunner
from diel.worker.isolated import IsolatedRunner
from diel.worker.link import TrialLink
from diel.worker.program import ProgramRunner
from diel.worker.serve import serve_tasks
from tests.helpers.fakespace import FakeSpace
from tests.helpers.launch import run_diel, search_workflow
from tests.search import probe_rungs
from tests.search.probe_rungs import trained

HERE = Path(__file__).parent
QUALITIES = [0.9, 0.8, 0.7, 0.6]   # each trial worse than every one before it
HALVING = {"halving": {"min_epochs": 1, "eta": 2}}   # rungs 1, 2, 4, 8
MEDIAN = {"median": {"min_trials": 1, "warmup_epochs": 1}}   # decides from epoch 2


def search(tmp_path: Path, runner, pruner: dict, epochs: int = 9, pace: float = 0.0) -> dict:
    """A grid search over QUALITIES on one worker (trials one after another) running
    ``runner``; the trials' rows by number."""
    space, store, log = FakeSpace(), MemoryStorage(), tmp_path / "trained.log"
    fixed = {"log": str(log), "epochs": epochs, "pace": pace}
    worker = threading.Thread(target=serve_tasks, args=(space, "s", 0, runner),
                              kwargs={"params": fixed}, daemon=True)
    worker.start()
    settings = parse_settings({"strategy": "grid", "space": {"quality": {"values": QUALITIES}},
                               "objective": "accuracy", "pruner": pruner}, "search")
    try:
        run_search(space, settings, store, 1, study="s", out=io.StringIO(), poll=0.5)
    finally:
        worker.join(timeout=30)
        runner.close()
    assert not worker.is_alive()
    return {row["number"]: row for row in store.trials("s")}


def assert_pruned_at(rows: dict, log: Path, epoch: int) -> None:
    """Trial 0 trained to the end; every later one was pruned at ``epoch`` and trained
    exactly that many epochs (its last report was its rung's)."""
    epochs = trained(str(log))
    assert rows[0]["status"] == "ok", rows[0]
    for number in range(1, len(QUALITIES)):
        assert rows[number]["status"] == "pruned", rows[number]
        assert rows[number]["epoch"] == epoch, rows[number]
        assert epochs[number] == list(range(1, epoch + 1)), (number, epochs)


def test_a_trial_in_the_rank_trains_exactly_its_rung(tmp_path):
    rows = search(tmp_path, InProcessRunner(probe_rungs.trains), HALVING)
    assert_pruned_at(rows, tmp_path / "trained.log", 1)


def test_median_pruning_stops_at_the_first_report_after_the_warm_up(tmp_path):
    rows = search(tmp_path, InProcessRunner(probe_rungs.trains), MEDIAN)
    assert_pruned_at(rows, tmp_path / "trained.log", 2)


def test_an_isolated_trial_trains_exactly_its_rung(tmp_path):
    runner = IsolatedRunner("probe_rungs.py:trains", HERE, dict(os.environ), grace=1.0)
    rows = search(tmp_path, runner, HALVING)
    assert_pruned_at(rows, tmp_path / "trained.log", 1)


def test_a_program_is_stopped_at_its_rung(tmp_path):
    """A program does not wait for the answer, but its rung's line is answered before
    the worker reads on: it is stopped within the epoch after its rung (0.6 s between its
    epochs against the worker's look at the report file every 0.2 s), and recorded at
    the rung."""
    argv = [sys.executable, str(HERE / "probe_rungs.py"), "{log}", "{trial}", "{quality}",
            "{epochs}", "{pace}"]
    runner = ProgramRunner(argv, tmp_path, dict(os.environ), grace=1.0)
    rows = search(tmp_path, runner, HALVING, epochs=2, pace=0.6)
    assert_pruned_at(rows, tmp_path / "trained.log", 1)


def test_the_schedulers_name_their_decision_points():
    assert [e for e in range(1, 20) if HalvingPruner(1, 2).decision_points(0).includes(e)] \
        == [1, 2, 4, 8, 16]
    assert HalvingPruner(2, 3, max_epochs=18).decision_points(0) == DecisionPoints(2, 3, 18)
    hyperband = HyperbandPruner(min_epochs=1, max_epochs=9, eta=3)
    for number in range(8):
        bracket = hyperband.brackets[hyperband.bracket(number)]
        assert hyperband.decision_points(number) == DecisionPoints(bracket.min_epochs, 3, 9)
    median = MedianPruner(warmup_epochs=2).decision_points(0)
    assert not median.includes(2) and median.includes(3) and median.includes(100)
    assert DecisionPoints.from_task(DecisionPoints(2, 3, 18).as_task()) == \
        DecisionPoints(2, 3, 18)
    assert DecisionPoints.from_task(None) is None and DecisionPoints.from_task([0, 2]) is None


def test_a_report_at_a_decision_point_waits_for_its_own_answer(tmp_path):
    """A go-on answering an earlier report (one the worker gave up waiting for) is not
    taken for this report's answer; an order is obeyed whenever it comes; elsewhere a
    report does not wait."""
    space = FakeSpace()
    link = TrialLink(space, "s", 0, 5, 0.0, decides=DecisionPoints(1, 2))
    space.tput(prune_tag("s", 5), go_on(1))   # stale
    threading.Timer(0.2, space.tput, args=(prune_tag("s", 5), go_on(2))).start()
    assert link.report(2, {"accuracy": 0.5}) == "go"
    assert link.report(3, {"accuracy": 0.5}) == "go"   # no decision point: no wait
    threading.Timer(0.2, space.tput, args=(prune_tag("s", 5), True)).start()
    assert link.report(4, {"accuracy": 0.5}) == "prune"


MULTI_RANK = """\
import sys
sys.path.insert(0, {here!r})
from probe_rungs import trains
"""


@pytest.mark.mpi
def test_a_copy_of_two_ranks_trains_exactly_its_rung_on_both(tmp_path):
    (tmp_path / "objective.py").write_text(MULTI_RANK.format(here=str(HERE)))
    log = tmp_path / "trained.log"
    search = (f"      space: {{quality: {{values: {QUALITIES}}}}}\n      mode: batch\n"
              "      progress_interval: 3600\n      pruner: {halving: {min_epochs: 1, eta: 2}}")
    path = search_workflow(tmp_path, search, (
        "    function: worker\n    copies: 1\n    size: 2\n    settings:\n"
        f"      run: objective.py:trains\n      params: {{log: '{log}', epochs: 4}}"))
    result = run_diel("run", str(path), n=4, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    with diel.results.open(tmp_path / "wf.db") as results:
        rows = {row["number"]: row for row in results.trials()}
    assert_pruned_at(rows, log, 1)
    lines = log.read_text().split("\n")
    assert sum(line.endswith(" 1") for line in lines) == 4 + 3   # rank 1 trained the same
