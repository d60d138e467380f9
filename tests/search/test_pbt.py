"""Population-based training (``strategy: pbt``): the scheduler's exploit and explore
decisions over a made-up population, its options, the engine carrying out an exploit
(the member's run ends, it is dispatched again at once from its donor's checkpoint with
new parameters, or resamples when the donor's checkpoint is gone), the checkpoint
keeping that holds a donor's checkpoint for the member, the worker's link reading the
donor's copy in memory, and a whole search served by worker threads."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from diel.checkpoints import take, write
from diel.errors import ConfigError
from diel.results import Segment, StudyState
from diel.search import master, parse_settings
from diel.search.engine import SearchEngine
from diel.search.protocol import DecisionPoints, checkpoint_tag
from diel.search.retention import Retention
from diel.search.schedulers import Action, Decision
from diel.search.schedulers.pbt import PBTScheduler
from diel.testing.schedulers import SchedulerSuite
from diel.worker.isolated import IsolatedRunner
from diel.worker.link import TrialLink
from diel.worker.trial import PAUSE, Trial, order_of
from tests.helpers.fakespace import FakeSpace
from tests.helpers.links import ScriptedLink
from tests.helpers.pbt import PARAMS, SPACE, checkpoint, epoch, run_population, settings, \
    stored
from tests.search.probe_pbt import member

P = "search"


# -- the scheduler ----------------------------------------------------------------------

def population(**options) -> PBTScheduler:
    scheduler = PBTScheduler(SPACE, seed=7, **{"interval": 2, **options})
    for number in range(4):
        scheduler.member(number, {**PARAMS, "layers": number + 1})
    return scheduler


def test_a_member_in_the_bottom_quantile_at_an_interval_exploits_one_of_the_top():
    scheduler = population(resample_probability=0)
    answers = [scheduler.decide(n, 2, score).action for n, score in
               enumerate([0.1, 0.2, 0.3, 0.4])]
    assert answers == [Action.CONTINUE] * 4   # each ranked among those reported so far
    assert scheduler.decide(0, 3, 0.0).action is Action.CONTINUE   # not an interval
    decision = scheduler.decide(0, 4, 0.15)   # the worst of four: the bottom 1
    assert (decision.action, decision.donor) == (Action.EXPLOIT, 3)   # the top 1
    assert decision.params["layers"] in (3, 5)   # the donor's 4, perturbed
    assert scheduler.decide(2, 4, 0.35).action is Action.CONTINUE   # neither bottom
    assert scheduler.decide(1, 4, 0.9).action is Action.CONTINUE    # best now
    scheduler.finish(3, True)   # ranked no more: no donor
    assert scheduler.decide(0, 6, 0.05).donor == 1


def test_a_member_waits_for_the_master_only_at_its_interval_epochs():
    points = population(interval=4).decision_points(0)
    assert [e for e in range(1, 14) if points.includes(e)] == [4, 8, 12]
    assert DecisionPoints.from_task(points.as_task()) == points
    engine = SearchEngine(settings({"interval": 3}), StudyState(1, [], [], {}), seed=5)
    engine.next_trial()
    assert [e for e in range(1, 10) if engine.waits_at(0, e)] == [3, 6, 9]


def test_a_member_at_its_last_epoch_is_neither_ranked_nor_exploited():
    scheduler = population(max_epochs=4)
    assert [e for e in range(1, 9) if scheduler.decision_points(0).includes(e)] == [2]
    for number, score in enumerate([0.1, 0.2, 0.3, 0.4]):
        scheduler.decide(number, 2, score)
    assert scheduler.decide(0, 4, 0.0).action is Action.CONTINUE   # finished: no retraining
    assert population(max_epochs=6).decide(0, 4, 0.0).action is Action.CONTINUE  # alone
    assert settings({"max_epochs": 12}).strategy_options["max_epochs"] == 12


def test_an_exploit_names_the_step_whose_score_ranked_its_donor():
    scheduler = population(resample_probability=0)
    for number, score in enumerate([0.1, 0.2, 0.3, 0.4]):
        scheduler.decide(number, 2, score)
    scheduler.decide(3, 4, 0.5)   # the donor's latest interval score: step 4
    assert (scheduler.decide(0, 4, 0.0).donor, scheduler.decide(0, 4, 0.0).step) == (3, 4)
    with pytest.raises(ValueError):
        Decision(Action.CONTINUE, step=4)


def test_a_member_is_ranked_against_the_others_latest_scores_whatever_their_epoch():
    scheduler = population()
    scheduler.decide(1, 2, 0.3)
    scheduler.decide(2, 2, 0.4)
    for at, score in [(2, 0.1), (4, 0.5), (6, 0.9)]:   # member 3 runs ahead
        scheduler.decide(3, at, score)
    decision = scheduler.decide(0, 2, 0.2)   # 3 was worse at 2, but is best now (0.9)
    assert (decision.action, decision.donor, decision.step) == (Action.EXPLOIT, 3, 6)


def test_a_member_that_exploited_is_ranked_again_once_it_reports_an_interval_epoch():
    scheduler = population(resample_probability=0)
    for number, score in enumerate([0.1, 0.2, 0.3, 0.4]):
        scheduler.decide(number, 2, score)
    assert scheduler.decide(0, 4, 0.0).donor == 3   # 0 goes on from 3's epoch 2
    decision = scheduler.decide(1, 4, 0.15)   # the worst of 1, 2, 3: 0's 0.0 is of a state it left
    assert (decision.action, decision.donor) == (Action.EXPLOIT, 3)
    assert scheduler.decide(0, 3, 0.6).action is Action.CONTINUE   # not an interval: unranked
    assert scheduler.decide(0, 4, 0.5).action is Action.CONTINUE   # ranked again, the best
    decision = scheduler.decide(2, 4, 0.3)   # the worst of 0, 2 and 3 (1 is exploiting)
    assert (decision.donor, decision.step) == (0, 4)


def test_nobody_exploits_alone_and_the_quantile_takes_at_most_half():
    scheduler = population(quantile=0.5)
    assert scheduler.decide(0, 2, 0.1).action is Action.CONTINUE   # alone
    assert scheduler.decide(1, 2, 0.0).donor == 0                  # bottom 1 of 2
    assert scheduler.decide(1, 4, 0.15).action is Action.CONTINUE  # ranked again: 0 is worse
    for number, score in [(2, 0.2), (3, 0.3)]:
        scheduler.decide(number, 2, score)
    assert scheduler.decide(0, 4, 0.16).donor in (2, 3)   # 2nd worst: bottom 2 of 4, top 2


def test_the_same_reports_get_the_same_answers():
    reports = [(n % 4, 2 * (n // 4 + 1), math.sin(n)) for n in range(24)]
    first, second = population(), population()
    assert [first.decide(*r) for r in reports] == [second.decide(*r) for r in reports]
    assert any(first.decide(*r).action is Action.EXPLOIT for r in reports)


def explore(params: dict, **options) -> dict:
    return PBTScheduler(SPACE, 1, 1, **options).explore(params, np.random.default_rng(3))


def test_explore_perturbs_each_kind_within_its_bounds():
    doubled = explore(PARAMS, perturb=[2.0], resample_probability=0)
    assert doubled["lr"] == pytest.approx(0.02) and doubled["layers"] == 6
    assert doubled["drop"] == pytest.approx(0.4) and doubled["width"] in (16, 64)
    assert doubled["act"] in ("relu", "tanh", "gelu")
    clipped = explore({**PARAMS, "lr": 0.08, "layers": 7, "width": 64, "drop": 0.4},
                      perturb=[2.0], resample_probability=0)
    assert (clipped["lr"], clipped["layers"], clipped["drop"]) == (0.1, 8, 0.5)
    assert clipped["width"] in (32, 64)   # a neighbour, or stays at the end
    stepped = explore({**PARAMS, "layers": 1}, perturb=[1.2], resample_probability=0)
    assert stepped["layers"] == 2   # a small integer moves one step the factor's way
    down = explore({**PARAMS, "layers": 1}, perturb=[0.8], resample_probability=0)
    assert down["layers"] == 1   # and stays within its bounds


def test_explore_resamples_from_the_space_and_changes_only_the_mutable():
    resampled = [explore(PARAMS, resample_probability=1.0) for _ in range(1)][0]
    assert 1e-4 <= resampled["lr"] <= 0.1 and 1 <= resampled["layers"] <= 8
    assert resampled["width"] in (16, 32, 64) and 0 <= resampled["drop"] <= 0.5
    assert resampled != PARAMS
    only_lr = explore(PARAMS, mutable=["lr"], perturb=[2.0], resample_probability=0)
    assert only_lr == {**PARAMS, "lr": pytest.approx(0.02)}


class SuitePBT(PBTScheduler):
    """The pbt scheduler as the conformance suite makes a scheduler."""

    @classmethod
    def from_options(cls, name, options, path):
        return cls(SPACE, seed=11, interval=2)


class TestPBTScheduler(SchedulerSuite):
    scheduler_class = SuitePBT


# -- options ----------------------------------------------------------------------------


@pytest.mark.parametrize("options, more, path, words", [
    ({"quantile": 0.6}, {}, "strategy.pbt.quantile", "<= 0.5"),
    ({"quantile": 0}, {}, "strategy.pbt.quantile", "> 0"),
    ({"resample_probability": 2}, {}, "strategy.pbt.resample_probability", "<= 1"),
    ({"perturb": []}, {}, "strategy.pbt.perturb", "factors > 0"),
    ({"perturb": [0.8, -1]}, {}, "strategy.pbt.perturb", "factors > 0"),
    ({"mutable": ["momentum"]}, {}, "strategy.pbt.mutable", "momentum is not a parameter"),
    ({"interval": 0}, {}, "strategy.pbt.interval", ">= 1"),
    ({"max_epochs": 0}, {}, "strategy.pbt.max_epochs", "last epoch"),
    ({"population": 1}, {}, "strategy.pbt.population", ">= 2"),
    ({"synchronous": "yes"}, {}, "strategy.pbt.synchronous", "true or false"),
    ({"exploit": 1}, {}, "strategy.pbt.exploit", "unknown option"),
    ({}, {"pruner": "median"}, "pruner", "schedules its trials itself"),
    ({}, {"mode": "batch"}, "mode", "asynchronously"),
    ({}, {"max_trials": 5}, "max_trials", "population is 4"),
    ({}, {"objectives": {"accuracy": "maximize", "loss": "minimize"}}, "strategy.pbt",
     "one objective"),
])
def test_a_wrong_option_is_a_config_error_at_its_key(options, more, path, words):
    with pytest.raises(ConfigError) as info:
        settings(options, **more)
    assert info.value.path == f"{P}.{path}" and words in info.value.message, info.value


def test_the_population_is_max_trials_else_one_member_a_worker():
    parsed = settings({"population": None}, max_trials=5)
    assert parsed.strategy_options["population"] == 5 and parsed.pruner is None
    assert settings({"population": 4}, max_trials=4).max_trials == 4
    bare = parse_settings({"strategy": "pbt", "space": {"lr": {"uniform": [0, 1]}}}, P)
    engine = SearchEngine(bare, StudyState(1, [], [], {}), seed=1, workers=3)
    assert [engine.next_trial().number for _ in range(3)] == [0, 1, 2]
    assert engine.next_trial() is None and engine.stop_reason == "pbt exhausted"
    assert engine.task(0)["checkpoint_every"] == 1


# -- the engine -------------------------------------------------------------------------



def four_members() -> SearchEngine:
    """Members 0..3 of a pbt search, each with a checkpoint at epoch 2; member 0 reports
    epoch 4 worst of all and is ordered to exploit member 3."""
    engine = SearchEngine(settings(), StudyState(1, [], [], {}), seed=5)
    assert [engine.next_trial().number for _ in range(4)] == [0, 1, 2, 3]
    for number, score in enumerate([0.1, 0.2, 0.3, 0.4]):
        assert engine.on_epoch(epoch(number, 2, score))[1] is None
        engine.checkpointed(checkpoint(number, 2))
    return engine


def test_an_exploit_ends_the_members_run_and_dispatches_it_at_once_from_the_donor():
    engine = four_members()
    _, order = engine.on_epoch(epoch(0, 4, 0.15))
    assert (order["exploit"], order["step"]) == (3, 2) and order_of(order) == PAUSE
    new = order["params"]
    assert engine.on_epoch(epoch(0, 5, 0.16))[1] is None   # one order a run
    engine.checkpointed(checkpoint(0, 4))   # the pause's own checkpoint: superseded
    ended = engine.on_result({"trial": 0, "status": "paused", "epoch": 4})
    assert ended.record.status == "paused" and ended.warning is None
    assert engine.paused == set() and not engine.done
    engine.checkpointed(checkpoint(3, 4))   # the donor's newest, when it is dispatched
    start = engine.next_trial()
    assert (start.number, start.params, start.resumed_from, start.parent_trial,
            start.parent_step) == (0, new, 4, 3, 4)
    task = engine.task(0)
    assert (task["params"], task["restore"]["trial"], task["restore"]["path"]) == \
        (new, 3, "/c/trial-3/4")
    assert task["checkpoint_every"] == 2 and task["decides"] == [2, None, None, 2]
    assert engine.on_epoch(epoch(0, 5, 0.45))[0].epoch == 5   # goes on from step 4
    assert engine.next_trial() is None   # the population is complete


def test_an_exploit_waits_for_the_donors_checkpoint_of_the_step_that_ranked_it():
    engine = four_members()
    for number, score in [(1, 0.2), (2, 0.3), (3, 0.9)]:   # 3 is ranked at step 4 ...
        engine.on_epoch(epoch(number, 4, score))
    _, order = engine.on_epoch(epoch(0, 4, 0.15))
    assert (order["exploit"], order["step"]) == (3, 4)   # ... whose checkpoint is not here
    engine.checkpointed(checkpoint(0, 4))
    engine.on_result({"trial": 0, "status": "paused", "epoch": 4})
    assert engine.next_trial() is None and not engine.done   # waits for step 4's
    engine.checkpointed(checkpoint(3, 4))
    start = engine.next_trial()
    assert (start.number, start.resumed_from, start.parent_trial, start.parent_step) == \
        (0, 4, 3, 4)
    assert engine.task(0)["restore"]["path"] == "/c/trial-3/4"


def test_a_member_whose_donors_checkpoint_is_gone_resamples_and_goes_on_from_its_own():
    engine = four_members()
    _, order = engine.on_epoch(epoch(0, 4, 0.15))
    engine.on_result({"trial": 3, "status": "ok", "accuracy": 0.5, "epoch": 8})
    engine.checkpointed(checkpoint(0, 4))
    engine.on_result({"trial": 0, "status": "paused", "epoch": 4})
    start = engine.next_trial()
    assert engine.take_notes() == [
        "trial 0: the checkpoint of donor trial 3 is gone; its parameters are resampled and "
        "it goes on from its own step 4"] and engine.take_notes() == []
    assert (start.resumed_from, start.parent_trial, start.parent_step) == (4, 0, 4)
    assert start.params != order["params"]
    assert engine.task(0)["restore"]["path"] == "/c/trial-0/4"


def test_a_spent_time_budget_keeps_an_exploiting_member_paused_for_the_next_run():
    engine = four_members()
    engine.on_epoch(epoch(0, 4, 0.15))
    engine.cut_short, engine.stop_reason = True, "time budget (1 s) spent"
    engine.on_result({"trial": 0, "status": "paused", "epoch": 4})
    assert engine.next_trial() is None and engine.paused == {0}
    for number in (1, 2, 3):
        engine.on_result({"trial": number, "status": "ok", "accuracy": 0.5, "epoch": 8})
    assert engine.done


def test_a_wall_time_stop_keeps_an_exploiting_member_paused_for_the_next_run():
    engine = four_members()
    engine.on_epoch(epoch(0, 4, 0.15))
    engine.on_result({"trial": 0, "status": "paused", "epoch": 4})
    engine.halt("SIGUSR1")
    assert engine.next_trial() is None and 0 in engine.paused
    for number in (1, 2, 3):
        engine.on_result({"trial": number, "status": "paused", "epoch": 4})
    assert engine.done


# -- checkpoint keeping -----------------------------------------------------------------

def test_a_donors_checkpoint_is_kept_until_the_member_has_read_it(tmp_path):
    retention = Retention(tmp_path, 1, 0, True, logging.getLogger("t"))
    donor, own, kept = checkpoint(3, 2), checkpoint(0, 2), checkpoint(5, 2)
    for made in (donor, own, kept):
        retention.added(made)
    retention.hold(0, 3, 2)
    assert retention.added(checkpoint(3, 4)) == []   # 3's step 2 is held for member 0
    assert retention.superseded(0, None) == [own]   # its own lineage is over
    assert retention.release(0) == [donor]
    assert retention.release(0) == []
    assert retention.superseded(5, 2) == [] and retention.holds(5)   # a resample keeps it


# -- the worker -------------------------------------------------------------------------

def test_a_member_reads_its_donors_copy_in_memory_without_taking_it():
    space = FakeSpace()
    data = np.arange(16, dtype=np.uint8)
    space.dist_tput(checkpoint_tag("s", 3), data)
    link = TrialLink(space, "s", 0, 0, 0.0, resumed=True, source=3)
    assert np.array_equal(link.memory_image(16), data)
    assert checkpoint_tag("s", 3) in space.dist_keys()   # still there for others


def test_in_pbt_every_durable_checkpoint_is_kept_in_memory_before_its_report(tmp_path):
    space = FakeSpace()
    link = TrialLink(space, "s", 0, 2, 0.0, keep_copies=True)
    link.checkpointed(write(take({"w": np.zeros(8)}), tmp_path / "c", 2))
    assert checkpoint_tag("s", 2) in space.dist_keys() and link.kept_step == 2
    link.finish(paused=True)   # already kept: not copied again
    assert link.kept_step == 2


def test_should_checkpoint_is_true_at_the_interval_epochs():
    trial = Trial({}, 0, "s", checkpoint_every=2, _reporter=lambda step, metrics: "go")
    seen = []
    for step in range(1, 6):
        trial.report(step, accuracy=0.1)
        seen.append(trial.should_checkpoint)
    assert seen == [False, True, False, True, False] and not trial.should_pause


# -- a whole search ---------------------------------------------------------------------

def test_a_pbt_search_exploits_and_its_lineage_matches_what_the_members_trained(tmp_path,
                                                                                caplog):
    """Four members over worker threads: members with a poor learning rate copy a good
    member's state (read from its copy in memory) and go on with a perturbed one."""
    space, root, log = FakeSpace(), tmp_path / "ckpt", tmp_path / "log"
    reads: list[str] = []
    dist_tread = space.dist_tread

    def traced(tag, *args, **kwargs):
        reads.append(tag)
        return dist_tread(tag, *args, **kwargs)
    space.dist_tread = traced
    out = io.StringIO()
    store, summary = run_population(space, member, {"epochs": 8, "pace": 0.01, "log": str(log)},
                                    {"interval": 2, "quantile": 0.25}, root, out)
    rows = {row["number"]: row for row in store.trials("s")}
    assert sorted(rows) == [0, 1, 2, 3] and {r["status"] for r in rows.values()} == {"ok"}
    assert summary.stop_reason == "pbt exhausted"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    exploits = 0
    for number, row in rows.items():
        segments = store.segments("s", number)
        assert segments[0].index == 0 and segments[0].from_step == 0
        assert segments[0].parent_trial is None
        assert segments[-1].params == row["params"] and row["epoch"] == 8
        for segment in segments[1:]:
            assert segment.parent_step == segment.from_step
            if segment.parent_trial == number:   # its donor finished first: resampled
                continue
            exploits += 1
            restored = [l for l in lines if l.get("trial") == number and
                        l.get("restored") == segment.from_step]
            donors = [l["w"] for l in lines if l.get("trial") == segment.parent_trial and
                      l.get("epoch") == segment.from_step]
            assert any(line["w"] in donors for line in restored)   # the donor's state
    assert exploits, "no member exploited another"
    assert "starts from scratch" not in caplog.text   # every donor's checkpoint was there
    best = summary.best[0]["number"]   # the final report shows its schedule
    assert f"schedule of trial {best} (diel results --lineage {best}):\n  epochs 0-" in \
        out.getvalue()
    assert out.getvalue().count("\n  epochs ") == len(store.segments("s", best))
    assert reads, "no exploit read a donor's copy in memory"


# -- a resumed study ----------------------------------------------------------------------


def test_a_resumed_member_killed_before_it_checkpointed_after_its_exploit_goes_on_from_its_donor():
    """Member 0 exploited member 3 at step 2 and was killed before it checkpointed: it
    goes on from member 3's checkpoint of step 2 with its new parameters; member 1, with
    a checkpoint since its exploit, from its own; the scheduler knows each member's
    current parameters, whatever its replayed answers drew."""
    donor = checkpoint(3, 2)
    members = [
        stored(0, 0.02, 2, [Segment(0, 0, 0, 2, {"lr": 0.001}),
                            Segment(0, 1, 2, 2, {"lr": 0.02}, 3, 2)]),
        stored(1, 0.03, 4, [Segment(1, 0, 0, 2, {"lr": 0.002}),
                            Segment(1, 1, 2, 4, {"lr": 0.03}, 3, 2)], [checkpoint(1, 4)]),
        stored(2, 0.005, 4, [Segment(2, 0, 0, 4, {"lr": 0.005})], [checkpoint(2, 4)]),
        stored(3, 0.01, 4, [Segment(3, 0, 0, 4, {"lr": 0.01})], [checkpoint(3, 4), donor])]
    engine = SearchEngine(settings(), StudyState(1, [], members, {}), seed=5)
    assert engine.donor_restores == {0: (3, donor)}
    starts = {start.number: start for start in (engine.next_trial() for _ in range(4))}
    assert (starts[0].params, starts[0].resumed_from, starts[0].parent_trial) == \
        ({"lr": 0.02}, 2, None)   # a resume: no new segment
    restore = engine.task(0)["restore"]
    assert (restore["trial"], restore["path"]) == (3, donor.path)
    assert engine.task(1)["restore"]["path"] == checkpoint(1, 4).path
    assert engine.scheduler._params == {n: m.params for n, m in enumerate(members)}


def test_a_member_killed_before_its_old_lineage_was_marked_superseded_goes_on_from_its_donor(
        tmp_path):
    """The kill came between the master's commit of member 0's exploit (its segment, its
    epochs after step 2 deleted) and the next, which marks its own checkpoints deleted:
    its step-4 checkpoint, of the lineage it left, is still kept. It goes on from donor
    3's step 2, as its segment says, not from that one, which the resume deletes."""
    donor, left = checkpoint(3, 2), checkpoint(0, 4)
    members = [
        stored(0, 0.02, 2, [Segment(0, 0, 0, 2, {"lr": 0.001}),
                            Segment(0, 1, 2, 2, {"lr": 0.02}, 3, 2)], [left]),
        stored(1, 0.005, 4, [Segment(1, 0, 0, 4, {"lr": 0.005})], [checkpoint(1, 4)]),
        stored(2, 0.002, 4, [Segment(2, 0, 0, 4, {"lr": 0.002})], [checkpoint(2, 4)]),
        stored(3, 0.01, 4, [Segment(3, 0, 0, 4, {"lr": 0.01})], [checkpoint(3, 4), donor])]
    state = StudyState(1, [], members, {})
    engine = SearchEngine(settings(), state, seed=5)
    assert engine.donor_restores == {0: (3, donor)}
    starts = {start.number: start for start in (engine.next_trial() for _ in range(4))}
    assert (starts[0].resumed_from, starts[0].parent_trial) == (2, None)
    restore = engine.task(0)["restore"]
    assert (restore["trial"], restore["path"], restore["older"]) == (3, donor.path, [])
    deleted: list = []
    kept = [c for m in members for c in m.checkpoints]
    store = SimpleNamespace(study_checkpoints=lambda study: kept,
                            delete_checkpoints=lambda study_id, pairs: deleted.extend(pairs))
    retention = master._retention(store, settings(), state, "s", tmp_path,
                                  logging.getLogger("t"), engine.donor_restores)
    assert deleted == [(0, 4)]   # the lineage it left
    doomed = retention.added(checkpoint(3, 6))
    assert [(c.number, c.step) for c in doomed] == [(3, 4)]   # 3's step 2 is held


def test_an_isolated_member_restores_its_donors_copy_in_memory_through_its_rank(tmp_path):
    """Donor 3 pauses at step 3 (its copy kept in the space) and its file goes; member 0,
    in a child process, goes on from the donor's copy, which stays for other members."""
    space, worker = FakeSpace(), Path(__file__).resolve().parents[1] / "worker"
    runner = IsolatedRunner("checkpointing.py:counting", worker, dict(os.environ), grace=1.0)
    try:
        donor = ScriptedLink(lambda step, metrics: "pause" if step == 3 else False,
                             number=3, space=space)
        runner.run({"number": 3, "study": "s", "copy": 0, "device": None,
                    "params": {"epochs": 5}, "restore": None, "checkpoints": str(tmp_path)},
                   donor, None)
        donor.finish(paused=True)
        saved = donor.reports("checkpoint")[-1]
        os.unlink(saved["path"])   # the copy in memory is all that is left
        restore = {key: saved[key] for key in ("step", "path", "nbytes", "checksum")}
        member = TrialLink(space, "s", 0, 0, time.perf_counter(), resumed=True, source=3)
        outcome = runner.run({"number": 0, "study": "s", "copy": 0, "device": None,
                              "params": {"epochs": 4}, "checkpoints": str(tmp_path),
                              "restore": {**restore, "older": [], "trial": 3}}, member, None)
    finally:
        runner.close()
    assert outcome.metrics["resumed"] == 3
    assert checkpoint_tag("s", 3) in space.dist_keys()
