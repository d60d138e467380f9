"""The conformance suite of a results storage: :class:`StorageSuite`.

It checks a :class:`~diel.results.Storage` class against the contract in its docstrings
(:mod:`diel.results`' ``Storage``), by calling it as the search master does and reading
back what a reader gets:

* a new study opens empty, as given; a reopened one returns its trials split into
  finished (with their values and epochs) and left running, as stored;
* what is recorded reads back (:meth:`~Storage.trials`) with the keys, order and values
  of :meth:`diel.results.Results.trials`: starts, workers' starts, epochs (the last
  report of an epoch wins, the epoch reached only grows), results (a NaN metric as
  None, a start for every finished trial); nothing handed in or out aliases the store;
* a trial run again reuses its row with one more attempt; a trial left running after
  ``max_attempts`` dispatches is given up; a ``check`` that refuses a resume leaves
  everything as it was, and so does a write that fails;
* ``best`` ranks a study's ok trials as :func:`~diel.results.best_first` does, the first
  ``top`` of them;
* ``forget`` takes back a dispatch (deleted, or one attempt less; an interrupted one
  stays running, uncharged); ``rescore`` and ``update_config`` change what they say;
* durable checkpoints read back newest first (one a step), by trial for a whole study,
  and with a reopened study's unfinished trials; deleted ones are no longer kept; a trial dispatched again resumes with its epochs up to the step it
  resumes from (the lost run's later ones deleted); every dispatch is an attempt with the
  step it resumed from, its worker, start, end and status; a ``paused`` trial is not
  finished, not charged its attempt, never given up, and keeps its row when a dispatch
  of it is taken back;
* segments (schema 7): a trial's first dispatch begins its segment 0, an exploit (a
  start with a parent) the next one, from the step it resumes from; a crash-resume or
  a promotion adds none; each ends where the next begins, the last at the trial's
  epoch reached; the trial's params are its current ones; a reopened study's trials
  come back with their segments; suggested parameters merge into the trial's params,
  key, distributions and last segment, before the call's results;
* one run a study: a live lease refuses a second, names its holder, is given back, and
  a heartbeat of a lease that is gone says so;
* methods are atomic while other threads read.

Subclass it in a test module and name the class; where the store needs a place (a file,
a server), give each check a fresh one by overriding :meth:`StorageSuite.make` (or set
``url``)::

    class TestMyStore(StorageSuite):
        storage_class = MyStore
        url = "mystore://localhost/test"
"""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from diel.errors import ResultsError, StudyBusy
from diel.results import Checkpoint, EpochRecord, ResultRecord, Segment, StartedRecord, \
    Storage, StudyState, Suggested, TrialStart, best_first, crash_error

__all__ = ["StorageSuite", "TRIAL_KEYS"]

#: The keys of a trial dict, in order, for a study of one objective (a study of several
#: has ``objectives`` after ``objective``).
TRIAL_KEYS = ("study", "number", "status", "objective", "accuracy", "loss", "time", "epoch",
              "worker", "attempts", "params", "metrics", "queued_at", "started_at",
              "finished_at", "error")
_STUDY = "suite"
_TWO = (("accuracy", "maximize"), ("time", "minimize"))


def _expect(condition: bool, message: str) -> None:
    """Fail the check (an AssertionError, whether or not Python runs with -O)."""
    if not condition:
        raise AssertionError(message)


def _start(number: int) -> TrialStart:
    return TrialStart(number, {"x": number, "shape": [number, (1, 2)]}, f'{{"x":{number}}}')


def _taken(*numbers: int) -> list[StartedRecord]:
    """Workers' words that they took trials ``numbers`` (a crash is charged only then)."""
    return [StartedRecord(number, 1, datetime.now(timezone.utc)) for number in numbers]


def _checkpoint(number: int, step: int, path: str = "") -> Checkpoint:
    return Checkpoint(number, step, path or f"/ckpt/trial-{number}/step-{step}.ckpt",
                      1000 * step, f"crc32:{number:04x}{step:04x}")


def _time(text: str | None) -> datetime | None:
    """An ISO time a trial dict holds, as an aware UTC datetime (naive means UTC)."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


class StorageSuite:
    """The checks every storage class must pass (see the module docstring)."""

    #: The class under test.
    storage_class: ClassVar[type[Storage]]
    #: The URL each check's store is made with (:meth:`make`).
    url: str = "memory://"

    def make(self) -> Storage:
        """A new store with no study in it (the default: ``storage_class(url)``)."""
        return self.storage_class(self.url)

    def opened(self, store: Storage, name: str = _STUDY, **kwargs: Any) -> StudyState:
        """Study ``name`` opened as a master opens it."""
        return store.open_study(name, "grid", "accuracy", "maximize", {"seed": 1}, **kwargs)

    def by_number(self, store: Storage, name: str = _STUDY) -> dict[int, dict[str, Any]]:
        return {trial["number"]: trial for trial in store.trials(name)}

    # -- the checks -----------------------------------------------------------------

    def test_a_new_study_opens_empty_and_reads_back(self) -> None:
        store = self.make()
        try:
            _expect(store.study(_STUDY) is None and store.trials(_STUDY) == [],
                    "a store with no study gave one back")
            state = self.opened(store)
            _expect(not state.finished and not state.running and state.next_number == 0,
                    f"a new study opened with trials: {state}")
            _expect((state.strategy, state.objective, state.direction, state.config,
                     state.objectives) == ("grid", "accuracy", "maximize", {"seed": 1},
                                           (("accuracy", "maximize"),)),
                    f"a new study opened with other settings than given: {state}")
            _expect(store.study(_STUDY) == {
                "name": _STUDY, "strategy": "grid", "objective": "accuracy",
                "direction": "maximize", "config": {"seed": 1},
                "objectives": [{"expression": "accuracy", "direction": "maximize"}]},
                f"study() gave {store.study(_STUDY)}")
            for bad in ({"max_attempts": 0}, {"max_attempts": True},
                        {"objectives": [("time", "minimize")]}):
                try:
                    self.opened(store, "other", **bad)
                except ValueError:
                    continue
                raise AssertionError(f"open_study took {bad}; a ValueError was due")
            _expect(store.study("other") is None, "a refused open_study created its study")
        finally:
            store.close()

    def test_what_is_recorded_reads_back_as_a_reader_gets_it(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            began = datetime.now(timezone.utc) - timedelta(seconds=1)
            start = _start(0)
            store.record(study, starts=[start, _start(1), _start(2)])
            start.params["x"] = 99   # what the caller keeps is not the store's
            took = began + timedelta(milliseconds=500)
            store.record(study, started=[StartedRecord(0, 3, took)],
                         epochs=[EpochRecord(0, 2, {"accuracy": 0.1}, worker=None),
                                 EpochRecord(0, 2, {"accuracy": 0.4}),
                                 EpochRecord(0, 1, {"accuracy": 0.2})])
            store.record(study, results=[
                ResultRecord(0, "ok", 0.9, time=1.5, accuracy=0.9, loss=0.1,
                             metrics={"f1": 0.8, "nan": float("nan"), "deep": {"a": [1]}}),
                ResultRecord(1, "failed", error="boom", worker=1)])
            rows = store.trials(_STUDY)
            _expect([row["number"] for row in rows] == [0, 1, 2], f"trials() gave {rows}")
            for row in rows:
                _expect(tuple(row) == TRIAL_KEYS, f"a trial's keys are {tuple(row)}, "
                                                  f"not {TRIAL_KEYS}")
            done, failed, running = rows
            _expect(done["params"] == {"x": 0, "shape": [0, [1, 2]]},
                    f"params read back as {done['params']}, not as JSON keeps them")
            _expect((done["status"], done["objective"], done["accuracy"], done["loss"],
                     done["time"], done["epoch"], done["worker"], done["attempts"]) ==
                    ("ok", 0.9, 0.9, 0.1, 1.5, 2, 3, 1), f"the ok trial read back as {done}")
            _expect(done["metrics"] == {"f1": 0.8, "nan": None, "deep": {"a": [1]}},
                    f"metrics read back as {done['metrics']} (a NaN is stored as None)")
            _expect(_time(done["started_at"]) == took, "a worker's start was not kept")
            _expect(_time(failed["started_at"]) == _time(failed["queued_at"]) and
                    failed["finished_at"] is not None and failed["error"] == "boom",
                    f"a finished trial with no start recorded has none: {failed}")
            _expect(running["status"] == "running" and running["started_at"] is None and
                    running["finished_at"] is None and _time(running["queued_at"]) >= began,
                    f"a trial just started read back as {running}")
            _expect([row["number"] for row in store.trials(_STUDY, "failed")] == [1],
                    "trials(status=...) did not keep that status alone")
            done["params"]["x"] = 7
            _expect(store.trials(_STUDY)[0]["params"]["x"] == 0,
                    "changing a trial dict trials() gave changed the store")
            state = self.opened(store)
            ok = state.finished[0]
            _expect(ok.epochs == {1: {"accuracy": 0.2}, 2: {"accuracy": 0.4}},
                    f"epochs read back as {ok.epochs}: the last report of an epoch wins")
            _expect(ok.values == {"accuracy": 0.9, "loss": 0.1, "time": 1.5, "epoch": 2,
                                  "f1": 0.8, "deep": {"a": [1]}} and ok.scores == (0.9,),
                    f"a finished trial reopened as {ok}")
            _expect([t.number for t in state.running] == [2] and state.next_number == 3,
                    f"reopening split the trials as {state}")
        finally:
            store.close()

    def test_a_trial_run_again_reuses_its_row(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0)])
            store.record(study, epochs=[EpochRecord(0, 1, {"accuracy": 0.3}, worker=2)])
            store.record(study, starts=[TrialStart(0, {"x": 5}, '{"x":5}')])
            [row] = store.trials(_STUDY)
            _expect((row["attempts"], row["status"], row["epoch"], row["worker"],
                     row["params"]) == (2, "running", None, None, {"x": 5}),
                    f"a trial run again read back as {row}")
            store.record(study, results=[ResultRecord(0, "ok", 0.5, accuracy=0.5)])
            _expect(self.opened(store).finished[0].epochs == {},
                    "a trial run again kept the epochs of its first run")
        finally:
            store.close()

    def test_a_spent_trial_is_given_up_unless_the_check_refuses(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)], started=_taken(0, 1))
            store.record(study, starts=[_start(0)], started=_taken(0))   # trial 0 ran twice
            before = store.trials(_STUDY)

            def refuse(state: StudyState) -> None:
                raise LookupError("refused")
            try:
                self.opened(store, check=refuse)
            except LookupError:
                pass
            else:
                raise AssertionError("what check raised did not propagate")
            _expect(store.trials(_STUDY) == before, "a refused resume changed the trials")
            state = self.opened(store, max_attempts=2)
            _expect([t.number for t in state.given_up] == [0] and
                    [t.number for t in state.running] == [1],
                    f"the trial dispatched twice was not given up: {state}")
            _expect(state.given_up[0].error == crash_error(2) and
                    state.finished[0].status == "failed", f"given up as {state.given_up}")
            row = self.by_number(store)[0]
            _expect((row["status"], row["error"]) == ("failed", crash_error(2)) and
                    row["finished_at"] is not None, f"a given-up trial is stored as {row}")
        finally:
            store.close()

    def test_a_trial_that_checkpointed_progress_is_not_given_up(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)], started=_taken(0, 1),
                         checkpoints=[_checkpoint(0, 2)])
            self.opened(store, max_attempts=2)   # the job died: both ran once
            store.record(study, starts=[TrialStart(0, {"x": 0}, '{"x":0}', resumed_from=2),
                                        _start(1)], started=_taken(0, 1))
            store.record(study, checkpoints=[_checkpoint(0, 4)])   # trial 0 progressed
            state = self.opened(store, max_attempts=2)   # and the job died again
            _expect([t.number for t in state.given_up] == [1] and
                    [t.number for t in state.running] == [0],
                    f"a trial whose last attempt checkpointed past the step it resumed from "
                    f"must be resumed, however often the job died; one with no checkpoint "
                    f"is spent: given up {state.given_up}, running {state.running}")
            store.record(study, starts=[TrialStart(0, {"x": 0}, '{"x":0}', resumed_from=4)],
                         started=_taken(0))
            state = self.opened(store, max_attempts=2)
            _expect([t.number for t in state.given_up] == [0],
                    f"an attempt that made no new checkpoint is charged: {state}")
        finally:
            store.close()

    def test_forget_takes_a_dispatch_back(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1), _start(2)])
            store.record(study, starts=[_start(1)])   # trial 1 run again
            store.forget(study, [0, 1])
            rows = self.by_number(store)
            _expect(sorted(rows) == [1, 2] and rows[1]["attempts"] == 1 and
                    rows[1]["status"] == "running",
                    f"forget deleted a first dispatch and kept a rerun: {rows}")
            store.record(study, starts=[_start(3)])   # the newest row, taken back and
            store.forget(study, [3])                   # its number used again
            store.record(study, starts=[_start(3)])
            _expect([(s.index, s.from_step) for s in store.segments(_STUDY, 3)] == [(0, 0)],
                    f"a first dispatch taken back left its segment: "
                    f"{store.segments(_STUDY, 3)}")
            store.forget(study, [3])
            store.forget(study, [1, 2], interrupted=True)
            rows = self.by_number(store)
            _expect([(n, r["status"], r["attempts"]) for n, r in sorted(rows.items())] ==
                    [(1, "running", 0), (2, "running", 0)],
                    f"an interrupted dispatch must stay running, uncharged: {rows}")
        finally:
            store.close()

    def test_rescore_and_update_config(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)])
            store.record(study, results=[ResultRecord(n, "ok", 0.5, time=2.0, accuracy=0.5)
                                         for n in (0, 1)])
            store.rescore(study, _TWO, {0: (0.5, float("inf"))})
            rows = self.by_number(store)
            _expect(rows[0]["objectives"] == {"accuracy": 0.5, "time": None} and
                    tuple(rows[0])[:5] == TRIAL_KEYS[:4] + ("objectives",),
                    f"a rescored trial of two objectives read back as {rows[0]}")
            _expect(rows[1]["objective"] == 0.5, "a trial not rescored lost its objective")
            _expect(store.study(_STUDY)["objectives"] ==
                    [{"expression": text, "direction": way} for text, way in _TWO],
                    f"rescore stored the objectives as {store.study(_STUDY)}")
            store.rescore(study, (("loss", "minimize"),), {0: None, 1: (0.25,)})
            rows = self.by_number(store)
            _expect((rows[0]["objective"], rows[1]["objective"]) == (None, 0.25) and
                    "objectives" not in rows[0],
                    f"rescored to one objective, the trials read back as {rows}")
            state = self.opened(store)
            _expect((state.objective, state.direction, state.objectives) ==
                    ("loss", "minimize", (("loss", "minimize"),)),
                    f"rescore stored the objective as {state}")
            store.update_config(study, {"seed": 2, "space": {"x": [1]}})
            _expect(store.study(_STUDY)["config"] == {"seed": 2, "space": {"x": [1]}},
                    f"update_config stored {store.study(_STUDY)['config']}")
        finally:
            store.close()

    def test_best_ranks_the_ok_trials_as_best_first(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            values = [0.5, None, 0.9, 0.5, math.inf, -math.inf, math.nan, 0.1, 0.9, 0.3]
            store.record(study, starts=[_start(n) for n in range(len(values) + 3)])
            store.record(study, results=[ResultRecord(n, "ok", value)
                                         for n, value in enumerate(values)] + [
                ResultRecord(len(values), "failed", 2.0, error="boom"),
                ResultRecord(len(values) + 1, "pruned", 3.0)])
            ok = store.trials(_STUDY, status="ok")
            for direction in ("maximize", "minimize"):
                ranked = [t["number"] for t in best_first(ok, direction)]
                for top in (None, 1, 3, 8, 50):
                    got = [t["number"] for t in store.best(_STUDY, direction, top)]
                    _expect(got == ranked[:top],
                            f"best({direction!r}, {top}) gave trials {got}, not "
                            f"{ranked[:top]}: best objective first, the ok trials alone, "
                            "those without a finite objective last, by number among equals")
            _expect(store.best(_STUDY, "maximize", 1) == [ok[2]],
                    "best() gave a trial otherwise than trials() does")
            _expect(store.best("other", "maximize", 3) == [], "best() of no study gave trials")
        finally:
            store.close()

    def test_several_objectives_read_back_in_order(self) -> None:
        store = self.make()
        try:
            study = store.open_study(_STUDY, "nsga2", "accuracy", "maximize", {},
                                     objectives=_TWO).study_id
            store.record(study, starts=[_start(0)])
            store.record(study, results=[ResultRecord(0, "ok", 0.7, objective_values=(
                0.7, math.nan))])
            [row] = store.trials(_STUDY)
            _expect(row["objectives"] == {"accuracy": 0.7, "time": None},
                    f"objective values read back as {row.get('objectives')}")
            _expect(self.opened(store).finished[0].scores == (0.7, None),
                    "a reopened trial lost its objective values")
        finally:
            store.close()

    def test_a_failed_write_changes_nothing(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0)])
            before = store.trials(_STUDY), store.attempts(_STUDY, 0)
            try:
                store.record(study, starts=[_start(1)], checkpoints=[_checkpoint(0, 1)],
                             results=[ResultRecord(0, "ok", 0.5, metrics={"x": object()})])
            except ResultsError:
                pass
            else:
                raise AssertionError("a metric no database can hold was stored")
            _expect((store.trials(_STUDY), store.attempts(_STUDY, 0)) == before and
                    store.checkpoints(_STUDY, 0) == [], "a record that failed wrote part of it")
        finally:
            store.close()

    def test_one_run_holds_a_study(self) -> None:
        store = self.make()
        try:
            lease = store.acquire_lease(_STUDY)
            try:
                store.acquire_lease(_STUDY)
            except StudyBusy as busy:
                _expect(f"host {lease.host} pid {lease.pid}" in str(busy),
                        f"a refused lease must name its holder: {busy}")
            else:
                raise AssertionError("a second run took a live lease")
            store.heartbeat(lease)
            store.release_lease(lease)
            again = store.acquire_lease(_STUDY)
            store.release_lease(lease)   # no longer this run's: nothing happens
            try:
                store.heartbeat(lease)
            except StudyBusy as lost:
                _expect("lost its lease" in str(lost), f"a lost lease said {lost}")
            else:
                raise AssertionError("a heartbeat of a lease another run holds went on")
            store.heartbeat(again)
            store.release_lease(again)
            store.release_lease(store.acquire_lease(_STUDY))
        finally:
            store.close()

    def test_checkpoints_read_back_newest_first(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)])
            store.record(study, checkpoints=[_checkpoint(0, 1), _checkpoint(0, 3, "/old")])
            store.record(study, checkpoints=[_checkpoint(0, 2), _checkpoint(0, 3),
                                             _checkpoint(7, 1)])   # trial 7: no such trial
            kept = store.checkpoints(_STUDY, 0)
            _expect([(c.number, c.step, c.path, c.nbytes, c.checksum) for c in kept] ==
                    [(0, s, f"/ckpt/trial-0/step-{s}.ckpt", 1000 * s, f"crc32:0000{s:04x}")
                     for s in (3, 2, 1)],
                    f"checkpoints read back as {kept}: newest first, a step's last one kept")
            _expect(all(c.created_at.tzinfo is not None for c in kept),
                    "a checkpoint's created_at must be an aware time")
            _expect(store.checkpoints(_STUDY, 1) == [] and store.checkpoints(_STUDY, 7) == []
                    and store.checkpoints("other", 0) == [],
                    "a trial without checkpoints (or no such trial) has some")
            state = self.opened(store)
            _expect([c.step for c in state.running[0].checkpoints] == [3, 2, 1],
                    f"a reopened study's running trial came back with "
                    f"{state.running[0].checkpoints}")
        finally:
            store.close()

    def test_checkpoints_deleted_are_no_longer_kept(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1), _start(2)])
            store.record(study, checkpoints=[_checkpoint(1, 1), _checkpoint(0, 1),
                                             _checkpoint(0, 2), _checkpoint(2, 5)])
            _expect([(c.number, c.step) for c in store.study_checkpoints(_STUDY)] ==
                    [(0, 2), (0, 1), (1, 1), (2, 5)],
                    f"a study's checkpoints read back as {store.study_checkpoints(_STUDY)}: "
                    "by trial, each trial's newest first")
            store.delete_checkpoints(study, [(0, 1), (2, 5), (2, 9), (8, 1)])  # 2/9, 8: none
            _expect([(c.number, c.step) for c in store.study_checkpoints(_STUDY)] ==
                    [(0, 2), (1, 1)] and [c.step for c in store.checkpoints(_STUDY, 0)] == [2],
                    f"deleted checkpoints are still kept: {store.study_checkpoints(_STUDY)}")
            _expect([c.step for c in self.opened(store).running[0].checkpoints] == [2],
                    "a reopened study's trial came back with a deleted checkpoint")
            _expect(store.study_checkpoints("other") == [], "a study that does not exist "
                                                            "has checkpoints")
        finally:
            store.close()

    def test_a_trial_resumed_keeps_its_epochs_up_to_its_checkpoint(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)])
            store.record(study, epochs=[EpochRecord(n, e, {"accuracy": e / 10})
                                        for n in (0, 1) for e in (1, 2, 3, 4)],
                         checkpoints=[_checkpoint(0, 2)])
            state = self.opened(store)   # the job died: both run again
            _expect([sorted(t.epochs) for t in state.running] == [[1, 2, 3, 4]] * 2,
                    f"a trial left running came back with epochs {state.running}")
            store.record(study, starts=[TrialStart(0, {"x": 0}, '{"x":0}', resumed_from=2),
                                        _start(1)])
            rows = self.by_number(store)
            _expect(rows[0]["epoch"] == 2 and rows[1]["epoch"] is None,
                    f"the epoch reached after a resume is {rows[0]['epoch']}, not 2")
            store.record(study, epochs=[EpochRecord(0, 3, {"accuracy": 0.33})])
            state = self.opened(store, max_attempts=5)
            _expect([t.epochs for t in state.running] ==
                    [{1: {"accuracy": 0.1}, 2: {"accuracy": 0.2}, 3: {"accuracy": 0.33}}, {}],
                    f"a resumed trial must keep its epochs up to its checkpoint and lose the "
                    f"lost run's later ones, one run from scratch all: {state.running}")
        finally:
            store.close()

    def test_every_dispatch_is_an_attempt(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            began = datetime.now(timezone.utc) - timedelta(seconds=1)
            store.record(study, starts=[_start(0), _start(1)])
            store.record(study, started=[StartedRecord(0, 2, began), StartedRecord(1, 3, began)])
            store.record(study, results=[ResultRecord(0, "ok", 0.5)])
            done = store.attempts(_STUDY, 0)
            _expect(len(done) == 1 and (done[0]["attempt"], done[0]["resumed_from"],
                                        done[0]["worker"], done[0]["status"]) ==
                    (1, None, 2, "ok") and _time(done[0]["started_at"]) == began and
                    _time(done[0]["ended_at"]) >= began, f"a finished attempt read back as {done}")
            self.opened(store)   # the job died while trial 1 ran
            store.record(study, starts=[TrialStart(1, {"x": 1}, '{"x":1}', resumed_from=3)])
            attempts = store.attempts(_STUDY, 1)
            _expect(len(attempts) == 2, f"two dispatches read back as {attempts}")
            died, again = attempts
            _expect((died["status"], died["ended_at"], died["worker"]) == ("died", None, 3),
                    f"an attempt the job died in read back as {died}")
            _expect((again["attempt"], again["resumed_from"], again["status"],
                     again["started_at"], again["worker"]) == (2, 3, "running", None, None),
                    f"an attempt resumed from step 3 read back as {again}")
            _expect(store.attempts(_STUDY, 5) == [] and store.attempts("other", 0) == [],
                    "a trial that does not exist has attempts")
        finally:
            store.close()

    def test_a_paused_trial_is_not_finished_nor_charged(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0)])
            store.record(study, started=[StartedRecord(0, 1, datetime.now(timezone.utc))],
                         epochs=[EpochRecord(0, 1, {"accuracy": 0.1})],
                         checkpoints=[_checkpoint(0, 1)])
            store.record(study, results=[ResultRecord(0, "paused", accuracy=0.1, epoch=1)])
            [row] = store.trials(_STUDY)
            _expect((row["status"], row["finished_at"], row["attempts"]) == ("paused", None, 0),
                    f"a paused trial must have no end and its pause not charged: {row}")
            _expect([a["status"] for a in store.attempts(_STUDY, 0)] == ["paused"],
                    f"a paused attempt read back as {store.attempts(_STUDY, 0)}")
            state = self.opened(store, max_attempts=1)
            _expect(not state.finished and not state.given_up and
                    [(t.number, t.status) for t in state.running] == [(0, "paused")],
                    f"a paused trial must come back to run again, never given up: {state}")
            store.record(study, starts=[TrialStart(0, {"x": 0}, '{"x":0}', resumed_from=1)])
            store.forget(study, [0])   # taken back before a worker took it
            [row] = store.trials(_STUDY)
            _expect((row["status"], row["attempts"], row["epoch"]) == ("running", 0, 1) and
                    [c.step for c in store.checkpoints(_STUDY, 0)] == [1],
                    f"taking back a dispatch of a paused trial must keep its row: {row}")
            _expect([a["status"] for a in store.attempts(_STUDY, 0)] == ["paused"],
                    "the attempt taken back must go")
            store.record(study, starts=[TrialStart(0, {"x": 0}, '{"x":0}', resumed_from=1)])
            store.record(study, started=[StartedRecord(0, 1, datetime.now(timezone.utc))])
            store.forget(study, [0], interrupted=True)
            _expect([a["status"] for a in store.attempts(_STUDY, 0)] == ["paused", "interrupted"]
                    and store.trials(_STUDY)[0]["attempts"] == 0,
                    f"an interrupted attempt read back as {store.attempts(_STUDY, 0)}")
        finally:
            store.close()

    def test_segments_follow_first_dispatches_and_exploits(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            store.record(study, starts=[_start(0), _start(1)])
            store.record(study, epochs=[EpochRecord(n, e, {"accuracy": e / 10})
                                        for n in (0, 1) for e in (1, 2, 3)],
                         checkpoints=[_checkpoint(0, 3), _checkpoint(1, 3)])
            store.record(study, results=[ResultRecord(1, "paused", epoch=3)])
            store.record(study, starts=[TrialStart(1, {"x": 1}, '{"x":1}', resumed_from=3)])
            _expect([s.index for s in store.segments(_STUDY, 1)] == [0],
                    f"a trial resumed after its pause began a segment: "
                    f"{store.segments(_STUDY, 1)}")
            exploit = TrialStart(1, {"x": 0.5}, '{"x":0.5}', resumed_from=2, parent_trial=0,
                                 parent_step=2)
            store.record(study, starts=[exploit])
            exploit.params["x"] = 99   # what the caller keeps is not the store's
            store.record(study, epochs=[EpochRecord(1, 3, {"accuracy": 0.5}),
                                        EpochRecord(1, 4, {"accuracy": 0.6})])
            _expect(store.segments(_STUDY, 1) == [
                Segment(1, 0, 0, 2, {"x": 1, "shape": [1, [1, 2]]}),
                Segment(1, 1, 2, 4, {"x": 0.5}, parent_trial=0, parent_step=2)],
                f"an exploit's segments read back as {store.segments(_STUDY, 1)}: the "
                "first ends where the exploit begins, the last at the epoch reached")
            _expect(self.by_number(store)[1]["params"] == {"x": 0.5},
                    "a trial's params must be its current segment's")
            _expect(store.segments(_STUDY, 0) == [
                Segment(0, 0, 0, 3, {"x": 0, "shape": [0, [1, 2]]})] and
                store.segments(_STUDY, 7) == [] and store.segments("other", 0) == [],
                f"a trial's one segment read back as {store.segments(_STUDY, 0)}")
            state = self.opened(store, max_attempts=5)   # the job died: a crash-resume
            running = {t.number: t for t in state.running}
            _expect([s.index for s in running[1].segments] == [0, 1] and
                    running[0].segments == tuple(store.segments(_STUDY, 0)),
                    f"a reopened study's trials came back with segments {state.running}")
            store.record(study, starts=[TrialStart(1, {"x": 0.5}, '{"x":0.5}', resumed_from=4)])
            _expect(len(store.segments(_STUDY, 1)) == 2 and   # begins no segment
                    store.segments(_STUDY, 1)[1].to_step == 4,
                    f"a crash-resume began a segment: {store.segments(_STUDY, 1)}")
        finally:
            store.close()

    def test_suggested_parameters_merge_into_the_trial(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            uniform = {"kind": "float", "low": 0.0, "high": 1.0, "log": False}
            choice = {"kind": "categorical", "choices": ["a", "b"]}
            store.record(study, starts=[TrialStart(0, {"kind": "a"}, '{"kind":"a"}')],
                         suggested=[Suggested(0, "lr", 0.1, uniform),
                                    Suggested(0, "opt", "b", choice),
                                    Suggested(9, "lr", 0.5, uniform)])   # no trial 9
            store.record(study, suggested=[Suggested(0, "lr", 0.25, uniform)],
                         results=[ResultRecord(0, "ok", 0.5, accuracy=0.5)])
            [row] = store.trials(_STUDY)
            _expect(row["params"] == {"kind": "a", "lr": 0.25, "opt": "b"} and
                    row["status"] == "ok",
                    f"suggested parameters merged into the trial as {row['params']}")
            [trial] = self.opened(store).finished
            _expect(trial.param_key == '{"kind":"a","lr":0.25,"opt":"b"}',
                    f"the trial's key is {trial.param_key!r}, not its params' canonical JSON")
            _expect(trial.distributions == {"lr": uniform, "opt": choice},
                    f"distributions read back as {trial.distributions}")
            _expect([s.params for s in trial.segments] == [row["params"]],
                    f"the trial's last segment lacks what was suggested: {trial.segments}")
            try:
                store.record(study, starts=[_start(1)],
                             suggested=[Suggested(0, "bad", math.nan, uniform)])
            except ResultsError:
                pass
            else:
                raise AssertionError("a suggested NaN was stored in a trial's params")
            _expect([r["number"] for r in store.trials(_STUDY)] == [0],
                    "a record whose suggestion failed wrote part of it")
        finally:
            store.close()

    def test_reads_are_atomic_while_the_master_writes(self) -> None:
        store = self.make()
        try:
            study = self.opened(store).study_id
            seen: list[int] = []
            done = threading.Event()

            def read() -> None:
                while not done.is_set():
                    seen.append(len(store.trials(_STUDY)))
            readers = [threading.Thread(target=read) for _ in range(2)]
            for reader in readers:
                reader.start()
            try:
                for batch in range(20):
                    store.record(study, starts=[_start(5 * batch + i) for i in range(5)])
            finally:
                done.set()
                for reader in readers:
                    reader.join()
            _expect(len(store.trials(_STUDY)) == 100, "threads lost trials")
            _expect(all(count % 5 == 0 for count in seen),
                    f"a read saw a record half written: {sorted(set(seen))}")
        finally:
            store.close()
