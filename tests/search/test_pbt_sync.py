"""Synchronous population-based training (``strategy: {pbt: {synchronous: true}}``): a
generation is decided at once when every live member has reported its interval epoch,
the master holds each member's answer until then, and a member that ends leaves it."""

from __future__ import annotations

import json
import logging
import time

import pytest

from diel.errors import ConfigError
from diel.results import StudyState
from diel.search.engine import SearchEngine
from diel.search.protocol import go_on, hold, prune_tag, report_tag
from diel.search.schedulers import Action
from diel.search.schedulers.pbt import PBTScheduler
from diel.testing.schedulers import SchedulerSuite
from diel.worker.link import TrialLink
from diel.worker.trial import GO, PAUSE, order_of
from tests.search.probe_pbt import member
from tests.helpers.pbt import PARAMS, SPACE, checkpoint, epoch, run_population, settings, \
    stored

P = "search"


def generation(**options) -> PBTScheduler:
    scheduler = PBTScheduler(SPACE, seed=7, **{"interval": 2, "synchronous": True,
                                               "resample_probability": 0, **options})
    for number in range(4):
        scheduler.member(number, {**PARAMS, "layers": number + 1})
    return scheduler


# -- the scheduler ----------------------------------------------------------------------

def test_a_generation_is_decided_only_once_every_member_reported_its_epoch():
    scheduler = generation()
    assert scheduler.holds(0, 2) and not scheduler.holds(0, 1) and not scheduler.holds(0, 3)
    for number, score in [(3, 0.4), (0, 0.1), (2, 0.3)]:
        assert scheduler.decide(number, 1, score).action is Action.CONTINUE
        assert scheduler.decide(number, 2, score).action is Action.CONTINUE   # held
        assert scheduler.answers() == []   # member 1 has not reported epoch 2
    scheduler.decide(1, 2, 0.2)
    answers = scheduler.answers()
    assert [(trial, at) for trial, at, _ in answers] == [(0, 2), (1, 2), (2, 2), (3, 2)]
    decisions = {trial: decision for trial, _, decision in answers}
    assert decisions[0].action is Action.EXPLOIT and (decisions[0].donor,
                                                      decisions[0].step) == (3, 2)
    assert decisions[0].params["layers"] in (3, 5)   # the donor's 4, perturbed
    assert all(decisions[n].action is Action.CONTINUE for n in (1, 2, 3))
    assert scheduler.answers() == []   # each answer once


def test_a_generation_ranks_its_scores_at_its_epoch_whatever_came_first():
    """The same reports in another order give the same answers (each from the
    member's own seeded draws)."""
    first, second = generation(), generation()
    reports = [(n, 2, s) for n, s in enumerate([0.5, 0.1, 0.9, 0.3])]
    for trial, at, score in reports:
        first.decide(trial, at, score)
    for trial, at, score in reversed(reports):
        second.decide(trial, at, score)
    assert first.answers() == second.answers()


def test_a_member_that_fails_leaves_the_generation_and_does_not_block_it():
    scheduler = generation()
    for number, score in [(0, 0.1), (1, 0.2), (2, 0.3)]:
        scheduler.decide(number, 2, score)
    assert scheduler.answers() == []
    scheduler.finish(3, ok=False)   # failed before its epoch 2
    answers = scheduler.answers()
    assert [trial for trial, _, _ in answers] == [0, 1, 2]
    assert all(decision.donor != 3 for _, _, decision in answers)
    for number, score in [(0, 0.1), (1, 0.2)]:   # the next one waits for the two others
        scheduler.decide(number, 4, score)
    scheduler.finish(0, ok=False)   # one that reported and then failed is not ranked
    assert scheduler.answers() == []
    scheduler.decide(2, 4, 0.3)
    assert [trial for trial, _, _ in scheduler.answers()] == [1, 2]


def test_a_member_past_a_pending_generations_epoch_is_not_waited_for():
    """Resumed beyond the epoch (its report there was a killed run's), a member reports
    a later epoch: the generation goes on without it."""
    scheduler = generation()
    for number in range(3):
        scheduler.decide(number, 2, 0.1 * number)
    scheduler.decide(3, 3, 0.5)
    assert [trial for trial, _, _ in scheduler.answers()] == [0, 1, 2]


def test_the_last_epoch_is_no_generation():
    scheduler = generation(max_epochs=4)
    assert scheduler.holds(0, 2) and not scheduler.holds(0, 4)
    for number in range(4):
        scheduler.decide(number, 4, 0.1 * number)
    assert scheduler.answers() == []


class SuiteSyncPBT(PBTScheduler):
    """The synchronous pbt scheduler as the conformance suite makes a scheduler."""

    @classmethod
    def from_options(cls, name, options, path):
        return cls(SPACE, seed=11, interval=2, synchronous=True)


class TestSyncPBTScheduler(SchedulerSuite):
    scheduler_class = SuiteSyncPBT


# -- options ----------------------------------------------------------------------------

def test_a_population_larger_than_the_workers_is_refused_when_synchronous():
    parsed = settings({"synchronous": True})   # population 4; validation knows no workers
    with pytest.raises(ConfigError) as info:
        SearchEngine(parsed, StudyState(1, [], [], {}), seed=1, workers=3)
    assert info.value.path == "settings.strategy.pbt.synchronous"
    assert "population is 4" in info.value.message and "3 worker copies" in info.value.message
    assert "synchronous: false" in info.value.message
    assert SearchEngine(settings(), StudyState(1, [], [], {}), seed=1, workers=3)   # async


# -- the engine and the master's answers --------------------------------------------------

def four_members() -> SearchEngine:
    engine = SearchEngine(settings({"synchronous": True}), StudyState(1, [], [], {}), seed=5,
                          workers=4)
    assert [engine.next_trial().number for _ in range(4)] == [0, 1, 2, 3]
    return engine


def test_the_engine_holds_each_members_answer_until_its_generation_is_decided():
    engine = four_members()
    for number, score in enumerate([0.1, 0.2, 0.3]):
        assert engine.on_epoch(epoch(number, 1, score))[1] is None
        assert engine.on_epoch(epoch(number, 2, score))[1] == hold(2)
        engine.checkpointed(checkpoint(number, 2))
        assert engine.released() == []
    assert engine.on_epoch(epoch(3, 2, 0.4))[1] == hold(2)
    due = dict(engine.released())
    assert sorted(due) == [0, 1, 2, 3] and engine.released() == []
    assert due[0]["exploit"] == 3 and due[0]["step"] == 2 and order_of(due[0]) == PAUSE
    assert due[1] == due[2] == due[3] == go_on(2)


def test_a_member_that_fails_releases_the_others_and_a_stop_releases_every_one():
    engine = four_members()
    for number in range(3):
        engine.on_epoch(epoch(number, 2, 0.1 * number))
    engine.on_result({"trial": 3, "status": "failed", "error": "boom", "epoch": 1})
    due = dict(engine.released())
    assert sorted(due) == [0, 1, 2] and due[0]["exploit"] == 2   # 3 is no donor
    for number in (1, 2):   # held: member 0 goes on from its donor, not yet there
        assert engine.on_epoch(epoch(number, 4, 0.1 * number))[1] == hold(4)
    assert engine.released() == []
    engine.halt("SIGUSR1")
    assert engine.released() == [(1, go_on(4)), (2, go_on(4))]   # after their pauses


def test_a_resumed_generation_does_not_wait_for_members_that_resumed_past_it():
    """Killed while member 3's epoch 4 was still to come: members 0-2 resume from their
    checkpoints of epoch 4 (their held reports there were the killed run's), member 3
    from epoch 2; its report of 4 is answered once the others report a later epoch."""
    members = [stored(n, 0.01 * (n + 1), 4, checkpoints=[checkpoint(n, 4)]) for n in range(3)]
    members.append(stored(3, 0.04, 3, checkpoints=[checkpoint(3, 2)]))
    engine = SearchEngine(settings({"synchronous": True}), StudyState(1, [], members, {}),
                          seed=5, workers=4)
    assert sorted(engine.next_trial().number for _ in range(4)) == [0, 1, 2, 3]
    assert engine.released() == []   # the replay's answers were carried out already
    assert engine.on_epoch(epoch(3, 3, 0.1))[1] is None
    assert engine.on_epoch(epoch(3, 4, 0.1))[1] == hold(4)
    for number in range(3):
        assert engine.released() == []
        engine.on_epoch(epoch(number, 5, 0.2))
    assert engine.released() == [(3, go_on(4))]   # alone in its generation


# -- the worker's wait --------------------------------------------------------------------

class _Answers:
    """A space whose prune tag gives ``script`` in turn (an exception is raised)."""

    def __init__(self, script: list) -> None:
        self.script, self.put = list(script), []

    def tput(self, tag, value):
        self.put.append((tag, value))

    def tget(self, tag, timeout=None):
        assert tag == prune_tag("s", 0) and timeout is not None
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_held_report_waits_past_the_answer_wait_without_a_warning(caplog):
    space = _Answers([hold(2), TimeoutError(), TimeoutError(), go_on(2)])
    link = TrialLink(space, "s", 0, 0, time.perf_counter(),
                     decides=PBTScheduler(SPACE, 1, 2).decision_points(0))
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        assert link.report(2, {"accuracy": 0.5}) == GO
    assert space.script == [] and caplog.text == ""
    assert space.put[0][0] == report_tag("s")
    timed = _Answers([hold(2), TimeoutError(), go_on(2)])   # the trial's timeout comes first
    link = TrialLink(timed, "s", 0, 0, time.perf_counter() - 5, timeout=5.0,
                     decides=PBTScheduler(SPACE, 1, 2).decision_points(0))
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        assert link.report(2, {"accuracy": 0.5}) == GO
    assert timed.script == [go_on(2)] and caplog.text == ""
    unheld = _Answers([TimeoutError()])   # not held: the trial goes on after the wait
    link = TrialLink(unheld, "s", 0, 0, time.perf_counter(),
                     decides=PBTScheduler(SPACE, 1, 2).decision_points(0))
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        assert link.report(2, {"accuracy": 0.5}) == GO
    assert "no answer from the search master" in caplog.text


# -- a whole search ---------------------------------------------------------------------

def uneven(trial) -> dict:
    """The probe member, each member's epochs taking a different time (member 3 the
    slowest), so that members left alone drift apart."""
    report = trial.report

    def slow(step, **metrics):
        time.sleep(0.004 * (trial.number + 1) ** 2)
        return report(step, **metrics)
    trial.report = slow
    return member(trial)


def test_a_synchronous_search_keeps_its_members_in_lockstep(tmp_path):
    """Four members of uneven speed: no member logs an epoch past an interval epoch
    before every member has logged it, and each exploit goes on from an interval epoch
    that every member had reached."""
    from tests.helpers.fakespace import FakeSpace
    log = tmp_path / "log"
    store, summary = run_population(FakeSpace(), uneven, {"epochs": 8, "pace": 0.005,
                                                          "log": str(log)},
                                    {"interval": 2, "synchronous": True, "max_epochs": 8},
                                    tmp_path / "ckpt")
    rows = {row["number"]: row for row in store.trials("s")}
    assert sorted(rows) == [0, 1, 2, 3] and {r["status"] for r in rows.values()} == {"ok"}
    assert summary.stop_reason == "pbt exhausted"
    reached = dict.fromkeys(range(4), 0)   # each member's latest epoch logged so far
    exploited_at: list[int] = []
    for line in map(json.loads, log.read_text().splitlines()):
        at = line.get("epoch", line.get("restored"))
        if "restored" in line:
            exploited_at.append(at)
        behind = [n for n, e in reached.items() if e < at - (at - 1) % 2 - 1]
        assert not behind, f"{line} logged before members {behind} reached the interval"
        if "epoch" in line:
            reached[line["trial"]] = at
        if "restored" in line:
            assert at % 2 == 0 and all(e >= at for e in reached.values()), line
    exploits = [s for n in rows for s in store.segments("s", n)[1:]]
    assert exploits and all(s.from_step % 2 == 0 and s.parent_step == s.from_step
                            for s in exploits)
    assert exploited_at, "no member went on from a donor"
