"""Promotion Hyperband and successive halving (``mode: promotion``): a trial that stop
mode would stop at a rung is paused (it checkpoints and frees its worker) and promoted,
resumed from its checkpoint, once it is among the top of its rung; no epoch is trained
twice. The schedulers alone, then whole searches served by thread workers over an
in-memory tuple space, with real checkpoint files, on the in-memory results store."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from diel.checkpoints import layout, take, write
from diel.errors import ConfigError
from diel.results import Checkpoint, MemoryStorage, StoredTrial, StudyState, get_storage
from diel.search import parse_settings, run_search
from diel.search.engine import SearchEngine
from diel.search.protocol import PAUSE, STOP, checkpoint_report, prune_tag, report_tag, \
    start_report, task_tag
from diel.search.schedulers import Action, HalvingPruner, HyperbandPruner, parse_pruner
from diel.search.space import param_key
from diel.testing.schedulers import SchedulerSuite
from tests.helpers.fakespace import FakeSpace
from tests.helpers.launch import run_diel
from tests.helpers.search import trials, workflow

STUDY = "s"
EPOCHS = 9
# Trial n has x = XS[n] (better with x). Hyperband (1, 9, 3) puts trials 0, 2, 4, 6, 8
# and 10 in bracket 0 (rungs 1 and 3): trial 2, second of 2 at rung 1, is paused there
# and promoted once trial 10 makes it second of 6; the best, 9, is in bracket 1.
XS = [8, 5, 6, 7, 0, 4, 1, 9, 3, 11, 2, 10]


# -- the schedulers ------------------------------------------------------------------

class TestHalvingPromotion(SchedulerSuite):
    scheduler_class = HalvingPruner
    options = {"min_epochs": 1, "eta": 3, "mode": "promotion"}


class TestHyperbandPromotion(SchedulerSuite):
    scheduler_class = HyperbandPruner
    options = {"min_epochs": 1, "max_epochs": 9, "eta": 3, "mode": "promotion"}


def test_halving_pauses_where_it_would_stop_and_promotes_once_among_the_top():
    stop, promotion = HalvingPruner(1, 3, mode="stop"), HalvingPruner(1, 3, mode="promotion")
    assert Action.PAUSE in promotion.actions and Action.PAUSE not in stop.actions
    for trial, score in enumerate([0.5, 0.2]):   # trial 1 is not among the top 1 of 2
        answers = [s.decide(trial, 1, score).action for s in (stop, promotion)]
    assert answers == [Action.STOP, Action.PAUSE]
    assert promotion.waiting() == {1} and promotion.promote() is None
    for trial, score in [(2, 0.1), (3, 0.05), (4, 0.01), (5, 0.005)]:
        assert promotion.decide(trial, 1, score).action is Action.PAUSE
    assert promotion.promote() == 1   # rung 1 filled: second of six, and the top 2 go on
    assert promotion.promote() is None and promotion.waiting() == {2, 3, 4, 5}
    promotion.finish(4, False)
    assert promotion.waiting() == {2, 3, 5}


def decide_all(pruner: HalvingPruner, reports: list[tuple[int, int, float]]) -> list[str]:
    return [pruner.decide(trial, epoch, score).action.value for trial, epoch, score in reports]


def test_the_highest_rung_is_promoted_first_and_a_later_rung_ends_the_wait():
    pruner = HalvingPruner(1, 2, mode="promotion")   # rungs 1, 2, 4, ...
    assert decide_all(pruner, [(0, 1, .9), (0, 2, .9), (1, 1, .8), (2, 1, .95), (2, 2, .5),
                               (6, 1, .99), (6, 2, .2), (7, 1, .98), (7, 2, .15)]) == \
        ["continue", "continue", "pause", "continue", "pause", "continue", "pause",
         "continue", "pause"]
    assert pruner.promote() == 2   # second of four at rung 2: among the top 2
    assert decide_all(pruner, [(n, 1, n / 100) for n in range(10, 15)]) == ["pause"] * 5
    assert pruner.waiting() == {1, 6, 7, 10, 11, 12, 13, 14}
    assert pruner.promote() == 1 and pruner.promote() is None   # fifth of ten at rung 1
    assert pruner.decide(14, 2, .99).action is Action.CONTINUE   # its pause came late
    assert 14 not in pruner.waiting()


def test_hyperband_promotes_within_each_bracket():
    pruner = HyperbandPruner(min_epochs=1, max_epochs=9, eta=3, mode="promotion")
    first = [n for n in range(40) if pruner.bracket(n) == 0][:6]
    for n, score in zip(first, [0.9, 0.1, 0.2, 0.3, 0.01, 0.02]):
        pruner.decide(n, 1, score)
    assert pruner.waiting() == set(first[1:])
    assert pruner.promote() == first[3] and pruner.promote() is None   # 6 scores: keep 2
    other = next(n for n in range(40) if pruner.bracket(n) == 1)
    assert pruner.decide(other, 1, 0.0).action is Action.CONTINUE   # not a rung of bracket 1


@pytest.mark.parametrize("spec, path", [
    ({"hyperband": {"max_epochs": 9, "mode": "pause"}}, "p.hyperband.mode"),
    ({"halving": {"mode": None}}, "p.halving.mode"),
])
def test_a_mode_other_than_stop_or_promotion_is_a_config_error_at_its_key(spec, path):
    with pytest.raises(ConfigError) as info:
        parse_pruner(spec, "p")
    assert info.value.path == path
    assert info.value.message.startswith("expected one of stop, promotion; got"), info.value
    assert parse_pruner({"halving": {}}, "p")[0].mode == "stop"


# -- searches --------------------------------------------------------------------------

class Worker(threading.Thread):
    """A worker copy serving tasks: trial ``x`` trains epochs 1..EPOCHS (from the one
    after its restore) with accuracy ``x / 100 + epoch / 1000``, sleeping ``pace`` s each;
    after each report it checkpoints (a real file in ``root``, unless ``checkpoints``
    is false), then ends pruned at a stop order or paused at a pause order. Every epoch
    it trains goes to ``trained`` (shared), every task it takes to ``tasks``."""

    def __init__(self, space: FakeSpace, copy: int, root: Path, trained: list,
                 checkpoints: bool = True, pace: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.space, self.copy, self.root, self.trained = space, copy, root, trained
        self.checkpoints, self.pace = checkpoints, pace
        self.tasks: list[dict] = []

    def run(self) -> None:
        while (task := self.space.tget(task_tag(STUDY))) is not None:
            self.tasks.append(task)
            self.space.tput(report_tag(STUDY), start_report(task["trial"], self.copy))
            self.trial(task["trial"], task["params"]["x"], task["restore"])

    def trial(self, number: int, x: int, restore: dict | None) -> None:
        status, epoch = "ok", restore["step"] if restore else 0
        while epoch < EPOCHS:
            epoch += 1
            time.sleep(self.pace)
            self.trained.append((number, epoch))
            self.space.tput(report_tag(STUDY), {
                "kind": "epoch", "trial": number, "epoch": epoch, "worker": self.copy,
                "metrics": {"accuracy": x / 100 + epoch / 1000}})
            order = self.space.try_tget(prune_tag(STUDY, number))
            if self.checkpoints:
                path = layout.checkpoint_path(layout.study_folder(self.root, STUDY),
                                              number, epoch)
                written = write(take({"epoch": epoch}), path, epoch)
                self.space.tput(report_tag(STUDY), checkpoint_report(
                    number, self.copy, epoch, written.path, written.nbytes, written.checksum))
            if order in (STOP, PAUSE):
                status = "pruned" if order is STOP else "paused"
                break
        self.space.tput(report_tag(STUDY), {
            "kind": "result", "trial": number, "worker": self.copy, "status": status,
            "epoch": epoch, "accuracy": x / 100 + epoch / 1000})


def search(root: Path, pruner: dict, checkpoints: bool = True):
    """A grid search over XS under ``pruner``, on two workers: its summary, its store,
    the epochs trained (in order) and the workers."""
    space, store, trained = FakeSpace(), MemoryStorage(), []
    workers = [Worker(space, copy, root, trained, checkpoints) for copy in range(2)]
    settings = parse_settings({"strategy": "grid", "space": {"x": {"values": XS}},
                               "objective": "accuracy", "pruner": pruner}, "search")
    for worker in workers:
        worker.start()
    try:
        summary = run_search(space, settings, store, len(workers), study=STUDY,
                             out=io.StringIO(), poll=0.02, checkpoints=root)
    finally:
        for worker in workers:
            worker.join(timeout=10)
    return summary, store, trained, workers


def hyperband(mode: str) -> dict:
    return {"hyperband": {"min_epochs": 1, "max_epochs": EPOCHS, "eta": 3, "mode": mode}}


def test_promotion_hyperband_trains_no_epoch_twice_and_finds_stop_modes_best(tmp_path):
    stopped, stop_store, _, _ = search(tmp_path / "stop", hyperband("stop"))
    summary, store, trained, workers = search(tmp_path / "promotion", hyperband("promotion"))
    twice = [step for step, times in Counter(trained).items() if times > 1]
    assert not twice, f"epochs trained twice: {twice}"
    assert summary.stats.best_trial == stopped.stats.best_trial == XS.index(max(XS))
    rows = {row["number"]: row for row in store.trials(STUDY)}
    assert len(rows) == len(XS) and {row["status"] for row in rows.values()} == {"ok", "pruned"}
    pruned = [n for n, row in rows.items() if row["status"] == "pruned"]
    assert pruned and all(row["epoch"] < EPOCHS for n, row in rows.items() if n in pruned)
    resumed = [task for worker in workers for task in worker.tasks if task["restore"]]
    assert resumed, "no trial was promoted"
    pruner = HyperbandPruner(min_epochs=1, max_epochs=EPOCHS, eta=3)
    for task in resumed:   # from the step it paused at, a rung of its bracket or just past
        number, step = task["trial"], task["restore"]["step"]
        before = [epoch for n, epoch in trained if n == number]
        assert step in before and before[before.index(step) + 1] == step + 1
        assert step >= pruner.brackets[pruner.bracket(number)].min_epochs
    assert 2 in {task["trial"] for task in resumed}
    assert {row["number"] for row in stop_store.trials(STUDY, "pruned")} >= set(pruned)


def test_promotion_halving_searches_too(tmp_path):
    summary, store, trained, _ = search(tmp_path, {"halving": {"eta": 2, "mode": "promotion"}})
    assert max(Counter(trained).values()) == 1
    assert summary.stats.best_trial == XS.index(max(XS))
    assert {row["status"] for row in store.trials(STUDY)} <= {"ok", "pruned"}


def test_a_trial_paused_without_a_checkpoint_ends_pruned_at_once_with_a_warning(
        tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="diel.search"):
        summary, store, trained, workers = search(tmp_path, hyperband("promotion"),
                                                  checkpoints=False)
    assert not any(task["restore"] for worker in workers for task in worker.tasks)
    pruned = [row["number"] for row in store.trials(STUDY) if row["status"] == "pruned"]
    assert pruned and max(Counter(trained).values()) == 1
    for number in pruned:
        assert f"trial {number} was paused at a rung but made no checkpoint" in caplog.text


# -- a resumed study -------------------------------------------------------------------

def stored(number: int, x: int, epochs: int, status: str = "ok",
           checkpoint: int | None = None) -> StoredTrial:
    params = {"x": x}
    curve = {e: {"accuracy": x / 100 + e / 1000} for e in range(1, epochs + 1)}
    kept = (Checkpoint(number, checkpoint, f"/c/{number}", 1, "crc32:0"),) \
        if checkpoint is not None else ()
    return StoredTrial(number, params, param_key(params), status,
                       objective=curve[epochs]["accuracy"] if status == "ok" else None,
                       epochs=curve, checkpoints=kept)


def test_a_resumed_study_keeps_waiting_the_trials_its_scheduler_holds_paused():
    """Trials 0 and 2 (bracket 0) are stored finished; trial 4, paused at rung 1 below
    them both, waits rather than resume; trial 1 (bracket 1), paused by a wall-time
    stop, resumes first; once nothing runs and nothing more starts, 4 ends pruned."""
    settings = parse_settings({"strategy": "grid", "space": {"x": {"values": [5, 6, 7, 8, 1]}},
                               "objective": "accuracy", "pruner": hyperband("promotion")},
                              "search")
    state = StudyState(1, [stored(0, 5, EPOCHS), stored(2, 7, EPOCHS),
                           stored(3, 8, EPOCHS)],
                       [stored(1, 6, 2, "paused", 2), stored(4, 1, 2, "paused", 2)], {})
    engine = SearchEngine(settings, state, seed=1)
    assert engine.waiting == [4] and settings.pruner.bracket(4) == 0
    first = engine.next_trial()
    assert (first.number, first.resumed_from) == (1, 2)
    assert engine.next_trial() is None and engine.unpromotable() == []   # 1 still runs
    engine.on_result({"trial": 1, "status": "ok", "accuracy": 0.07, "epoch": EPOCHS})
    assert engine.next_trial() is None
    [ended] = engine.unpromotable()
    assert (ended.record.number, ended.record.status, ended.record.epoch) == (4, "pruned", 2)
    assert ended.record.objective == pytest.approx(0.012) and engine.done


def test_the_made_up_study_of_the_suite_pauses_and_promotes():
    suite = TestHalvingPromotion()
    answers = suite.run(suite.make(), range(suite.trials)).answers
    assert any(d is not None and d.action is Action.PAUSE for *_, d in answers)
    assert any(d is None for *_, d in answers), "no promotion"


# -- the engine ------------------------------------------------------------------------

def engine_of(pruner: dict, xs: list[int]) -> SearchEngine:
    settings = parse_settings({"strategy": "grid", "space": {"x": {"values": xs}},
                               "objective": "accuracy", "pruner": pruner}, "search")
    return SearchEngine(settings, StudyState(1, [], [], {}), seed=1)


def epoch(number: int, at: int, accuracy: float) -> dict:
    return {"trial": number, "epoch": at, "metrics": {"accuracy": accuracy}}


def test_the_engine_orders_a_pause_keeps_the_trial_waiting_and_a_wall_time_stop_keeps_it():
    engine = engine_of({"halving": {"eta": 3, "mode": "promotion"}}, [1, 2, 3])
    first, second = engine.next_trial(), engine.next_trial()
    assert engine.on_epoch(epoch(first.number, 1, 0.9))[1] is None
    assert engine.on_epoch(epoch(second.number, 1, 0.1))[1] == PAUSE
    assert engine.on_epoch(epoch(second.number, 2, 0.2))[1] is None   # one order a trial
    engine.checkpointed(Checkpoint(second.number, 2, "/c/1/2", 1, "crc32:0"))
    outcome = engine.on_result({"trial": second.number, "status": "paused", "epoch": 2})
    assert outcome.record.status == "paused" and not outcome.stale_prune
    assert engine.waiting == [second.number] and engine.paused == set()
    assert engine.next_trial().number == 2   # not promotable yet: a new trial
    engine.halt("SIGUSR1")
    assert engine.paused == {second.number} and engine.next_trial() is None
    for number in (first.number, 2):
        engine.on_result({"trial": number, "status": "paused", "epoch": 1})
    assert engine.done and engine.unpromotable() == []   # it stays paused for the next run


def test_a_promoted_trial_is_dispatched_from_its_latest_checkpoint():
    engine = engine_of({"halving": {"eta": 2, "mode": "promotion"}}, [1, 2, 3, 4])
    assert [engine.next_trial().number for _ in range(2)] == [0, 1]
    engine.on_epoch(epoch(0, 1, 0.5))
    assert engine.on_epoch(epoch(1, 1, 0.4))[1] == PAUSE
    for step in (1, 2):
        engine.checkpointed(Checkpoint(1, step, f"/c/1/{step}", 1, "crc32:0"))
    engine.on_result({"trial": 1, "status": "paused", "epoch": 2, "metrics": {"accuracy": 0.4}})
    engine.on_result({"trial": 0, "status": "ok", "accuracy": 0.5})
    assert engine.next_trial().number == 2   # second of 2 at rung 1: not among the top 1
    engine.on_epoch(epoch(2, 1, 0.1))
    assert engine.next_trial().number == 3   # second of 3: still not
    engine.on_epoch(epoch(3, 1, 0.05))
    promoted = engine.next_trial()   # second of 4: among the top 2
    assert (promoted.number, promoted.resumed_from) == (1, 2) and engine.waiting == []
    restore = engine.task(1)["restore"]
    assert (restore["step"], restore["path"], restore["older"]) == (2, "/c/1/2", [])
    assert engine.on_epoch(epoch(1, 2, 0.41))[0].epoch == 2   # stored; shown once


def test_a_promoted_trial_taken_back_before_it_started_waits_again_and_ends_pruned():
    """A time budget spent while a promoted trial's task was queued: the master takes it
    back; it waits again, and with nothing running it ends pruned at its paused step."""
    engine = engine_of({"halving": {"eta": 2, "mode": "promotion"}}, [1, 2, 3, 4])
    [engine.next_trial() for _ in range(2)]
    engine.on_epoch(epoch(0, 1, 0.5))
    engine.on_epoch(epoch(1, 1, 0.4))
    engine.checkpointed(Checkpoint(1, 2, "/c/1/2", 1, "crc32:0"))
    engine.on_result({"trial": 1, "status": "paused", "epoch": 2, "metrics": {"accuracy": 0.4}})
    engine.on_result({"trial": 0, "status": "ok", "accuracy": 0.5})
    for number, score in [(2, 0.1), (3, 0.05)]:
        assert engine.next_trial().number == number
        engine.on_epoch(epoch(number, 1, score))
    assert engine.next_trial().number == 1   # promoted: second of 4
    engine.cut_short, engine.stop_reason = True, "time budget (1 s) spent"
    engine.withdraw(1)
    assert engine.waiting == [1] and engine.next_trial() is None
    for number in (2, 3):
        engine.on_result({"trial": number, "status": "ok", "accuracy": 0.5})
    [ended] = engine.unpromotable()
    assert (ended.record.number, ended.record.status, ended.record.epoch) == (1, "pruned", 2)


# -- under mpiexec -----------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.slow
def test_a_promotion_hyperband_search_under_mpiexec_trains_no_epoch_twice(tmp_path):
    """The probe function that checkpoints each epoch, on two worker copies: paused trials
    resume from their checkpoints on whichever worker is free."""
    search = (f"      strategy: grid\n      space: {{x: {{values: {XS}}}}}\n"
              f"      objective: accuracy\n      progress_interval: 3600\n"
              f"      pruner: {{hyperband: {{min_epochs: 1, max_epochs: {EPOCHS}, eta: 3, "
              f"mode: promotion}}}}")
    path = workflow(tmp_path, search, f"      pace: 0.1\n      epochs: {EPOCHS}",
                    function="tests.search.probe_checkpoints:resumable")
    result = run_diel("run", str(path), n=4, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    log = (tmp_path / "trained.log").read_text().splitlines()
    epochs = Counter((d["x"], d["epoch"]) for d in map(json.loads, log))
    assert max(epochs.values()) == 1, [key for key, n in epochs.items() if n > 1]
    rows = {row["number"]: row for row in trials(tmp_path)}
    assert len(rows) == len(XS) and {row["status"] for row in rows.values()} == {"ok", "pruned"}
    store = get_storage(f"sqlite:///{tmp_path / 'wf.db'}")
    try:
        resumed = {n: [a["resumed_from"] for a in store.attempts("wf", n)] for n in rows}
    finally:
        store.close()
    assert any(steps[1:] for steps in resumed.values()), resumed   # some were promoted
    assert all(None not in steps[1:] for steps in resumed.values()), resumed
    assert max(rows.values(), key=lambda row: row["accuracy"] or 0)["number"] == \
        XS.index(max(XS))
