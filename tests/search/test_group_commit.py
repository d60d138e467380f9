"""The master's commits (diel.search.master): every report a pass takes goes in one
transaction; a result (or checkpoint) is committed before the master dispatches or waits
again, seen by another connection (what a crash leaves); a running trial's start, epoch
and suggest reports alone wait at most DEFER_S for the next commit, and the answers its
worker waits for are put before any commit."""

from __future__ import annotations

import logging
import sqlite3
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from diel.results import EpochRecord, ResultRecord, StartedRecord, TrialStart
from diel.search import master
from diel.search.master import _Loop
from tests.helpers.fakespace import FakeSpace
from tests.helpers.search import Harness


def epochs_then_result(params: dict, report) -> dict:
    """Four quick epoch reports, then the result."""
    for epoch in range(1, 5):
        time.sleep(0.002)
        report(epoch, {"accuracy": params["lr"] * epoch})
    return {"accuracy": params["lr"] * 5}


class WatchedSpace(FakeSpace):
    """A space that, whenever the master puts a task, reads the database through a
    connection of its own (what a crash at that moment would leave) and notes every
    result the master has taken that is not committed there; ``crash_at``: the put of
    that task raises :class:`Crash` instead, once."""

    def __init__(self, database, crash_at: int | None = None) -> None:
        super().__init__()
        self.database, self.crash_at = database, crash_at
        self.taken: set[int] = set()      # trials whose result the master took
        self.uncommitted: list[tuple[int, list[int]]] = []   # (task, results not committed)
        self.tasks = 0

    def tget_many(self, tag, limit, timeout=None):
        reports = super().tget_many(tag, limit, timeout)
        if tag.endswith("/report"):
            for value in reports:
                self.taken |= {one["trial"] for one in (value if isinstance(value, list)
                                                        else [value]) if one["kind"] == "result"}
        return reports

    def tput(self, tag, value):
        if tag.endswith("/task") and isinstance(value, dict):
            self.tasks += 1
            self.uncommitted.append((value["trial"], sorted(self.taken - self.committed())))
            if self.tasks == self.crash_at:
                raise Crash(f"the master dies before it puts task {value['trial']}")
        super().tput(tag, value)

    def committed(self) -> set[int]:
        """The trials another connection sees finished."""
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True) as conn:
            return {n for n, in conn.execute("SELECT number FROM trials WHERE status != "
                                             "'running'")}


class Crash(Exception):
    pass


SETTINGS = {"strategy": "random", "seed": 3, "max_trials": 12, "prefetch": 0,
            "space": {"lr": {"uniform": [0.1, 1.0]}}}


def test_every_result_taken_is_committed_before_the_next_dispatch(tmp_path):
    h = Harness(tmp_path, workers=3, sql=True)
    h.space = WatchedSpace(tmp_path / "results.db")
    h.run(SETTINGS, trial=epochs_then_result)
    assert len(h.space.taken) == 12 and h.space.tasks == 12
    assert [found for found in h.space.uncommitted if found[1]] == []
    rows = h.trials(sort="number")
    assert [row["status"] for row in rows] == ["ok"] * 12


def test_a_crash_after_a_pass_loses_no_result_taken_and_the_rerun_completes(tmp_path):
    """The master dies at its eighth dispatch: every result it had taken is in the
    database; the trials left running (their epoch reports perhaps never committed) run
    again on resume and report their epochs again."""
    h = Harness(tmp_path, workers=3, sql=True)
    h.space = WatchedSpace(tmp_path / "results.db", crash_at=8)
    with pytest.raises(Crash):
        h.run(SETTINGS, trial=epochs_then_result)
    taken = set(h.space.taken)
    assert taken and taken <= h.space.committed()
    h.space = FakeSpace()
    h.run(SETTINGS, trial=epochs_then_result)
    rows = h.trials(sort="number")
    assert [row["status"] for row in rows] == ["ok"] * 12
    with sqlite3.connect(tmp_path / "results.db") as conn:
        epochs = conn.execute("SELECT trial_id, count(*) FROM trial_metrics "
                              "GROUP BY trial_id").fetchall()
    assert len(epochs) == 12 and {count for _, count in epochs} == {4}


class FakeEngine(SimpleNamespace):
    """The engine's side of a pass: every epoch is at a decision point (its worker
    waits for go-on), every report is of a running trial, nothing more to dispatch."""

    def __init__(self) -> None:
        super().__init__(recovering=False, running={}, done=False, halted=False,
                         sampler=SimpleNamespace(learns_from_results=True),
                         settings=SimpleNamespace(space=None))

    def on_epoch(self, report):
        return EpochRecord(report["trial"], report["epoch"], {}), None

    def waits_at(self, number, epoch):
        return True

    def on_start(self, report):
        return StartedRecord(report["trial"], report["worker"], datetime.now(timezone.utc))

    def on_result(self, report):
        record = ResultRecord(report["trial"], "ok", 0.5)
        return SimpleNamespace(record=record, warning=None, stale_prune=False)

    def next_trial(self):
        return None

    def queued(self, numbers, at):
        pass

    def unpromotable(self):
        return []

    def take_notes(self):
        return []

    def released(self, every=False):
        return []


def pass_loop() -> tuple[_Loop, list[dict]]:
    """A loop over a fake engine whose store notes each commit's reports."""
    commits: list[dict] = []

    def record(study, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        commits.append({"epochs": [(e.number, e.epoch) for e in epochs],
                        "results": [r.number for r in results],
                        "started": [s.number for s in started]})
    loop = _Loop(FakeSpace(), FakeEngine(), SimpleNamespace(record=record), 1, "s",
                 workers=3, mode="async", prefetch=0, log=logging.getLogger("test"))
    return loop, commits


def epoch(trial: int, step: int) -> dict:
    return {"kind": "epoch", "trial": trial, "epoch": step, "worker": trial, "metrics": {}}


def test_a_pass_of_several_reports_is_one_commit_and_answers_come_first():
    loop, commits = pass_loop()
    for value in ({"kind": "start", "trial": 2, "worker": 2}, epoch(0, 1), epoch(1, 1),
                  {"kind": "result", "trial": 0, "worker": 0, "status": "ok"}):
        loop.space.tput("s/report", value)
    loop.collect(0.0)
    assert commits == []   # the waiting epochs are answered before anything is committed
    assert [tag for tag, _ in loop.space.log[4:]] == ["s/prune/0", "s/prune/1"]
    loop.commit_and_dispatch()
    assert commits == [{"epochs": [(0, 1), (1, 1)], "results": [0], "started": [2]}]


def test_epoch_reports_alone_wait_for_the_next_commit_at_most_defer_s(monkeypatch):
    monkeypatch.setattr(master, "DEFER_S", 0.3)
    loop, commits = pass_loop()
    loop.space.tput("s/report", epoch(0, 1))
    loop.collect(0.0)
    loop.commit_and_dispatch()
    loop.space.tput("s/report", epoch(0, 2))
    loop.collect(0.0)
    loop.commit_and_dispatch()
    assert commits == []   # deferred: a rerun of trial 0 would report both again
    began = time.monotonic()
    loop.collect(5.0)      # nothing comes: the wait ends when the reports are due
    assert 0.1 < time.monotonic() - began < 2.0
    loop.commit_and_dispatch()
    assert commits == [{"epochs": [(0, 1), (0, 2)], "results": [], "started": []}]
    loop.space.tput("s/report", epoch(0, 3))
    loop.collect(0.0)
    loop.engine.done = True    # the end of the search commits everything
    loop.commit_and_dispatch()
    assert commits[1]["epochs"] == [(0, 3)]




def proposing_loop(seconds: float) -> tuple[_Loop, list[tuple[list[int], list[int]]]]:
    """A loop whose strategy learns from results and proposes trials 0 and 1, then None,
    then 2 and 3, then None, each proposal taking ``seconds``; and its commits (results,
    starts)."""
    proposals = iter([0, 1, None, 2, 3, None])

    def propose():
        time.sleep(seconds)
        number = next(proposals)
        return None if number is None else TrialStart(number, {}, f"k{number}")
    made: list[tuple[list[int], list[int]]] = []
    loop, _ = pass_loop()
    loop.engine.next_trial, loop.engine.task = propose, lambda number: {"trial": number}
    loop.store = SimpleNamespace(record=lambda study, epochs, results, starts, *rest: made.append(
        ([r.number for r in results], [t.number for t in starts])))
    return loop, made


@pytest.mark.parametrize("mean, slow", [(0.001, False), (0.2, True)])
def test_a_learning_strategy_commits_its_results_first_only_before_slow_proposals(mean, slow):
    """Proposals of a millisecond (tpe's) go in the results' transaction; proposals
    expected to take SLOW_PROPOSALS_S or more (gp's seconds), from the mean of the ones
    before them, wait for the results' own commit."""
    loop, made = proposing_loop(0.0)
    loop.propose_time = mean
    loop.results = [ResultRecord(7, "ok", objective=0.5)]
    loop.commit_and_dispatch()
    assert made == ([([7], []), ([], [0, 1])] if slow else [([7], [0, 1])])


def test_the_proposals_are_timed():
    loop, made = proposing_loop(0.1)
    loop.commit_and_dispatch()
    assert made == [([], [0, 1])]
    assert loop.propose_time * 3 >= master.SLOW_PROPOSALS_S   # three places free: slow
