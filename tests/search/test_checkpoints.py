"""The search master's side of checkpoints: recording the workers' durable checkpoints,
handing a resumed or paused trial its ``restore``, keeping only what the checkpoint
settings say (with real files), and wall-time stops that pause the running trials.
Workers here are threads speaking the search protocol over an in-memory tuple space
(:class:`Worker`), on the in-memory results store."""

from __future__ import annotations

import io
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from diel.checkpoints import layout, take, write
from diel.cli import main as diel_main
from diel.errors import ConfigError
from diel.executive.walltime import STOPPED_STATUS, Stopped, WallTime, parse_duration
from diel.results import Checkpoint, MemoryStorage
from diel.search import parse_settings, run_search
from diel.search.engine import SearchEngine
from diel.search.protocol import PAUSE, checkpoint_report, prune_tag, report_tag, \
    start_report, task_tag
from diel.search.retention import Retention
from diel.search.schedulers import Decision, Scheduler
from tests.helpers.fakespace import FakeSpace

STUDY = "s"
SPACE = {"x": {"range": [0, 3], "step": 1}}


def settings(**extra) -> dict:
    return {"strategy": "grid", "space": SPACE, "objective": "accuracy", **extra}


class Worker(threading.Thread):
    """A worker copy serving tasks: each trial reports ``epochs`` epochs of accuracy
    ``x / 10 + epoch / 100`` from the step after its restore, checkpoints each epoch
    (a real file in ``root``) when ``checkpoints``, stops at a pause order (``paused``)
    unless ``deaf``, and sleeps ``pace`` s an epoch; the final checkpoint of the trials
    in ``late_checkpoint`` is reported after their result. Every task it took is in
    ``tasks``."""

    def __init__(self, space: FakeSpace, copy: int, root: Path, epochs: int = 3,
                 checkpoints: bool = True, pace: float = 0.0, deaf: bool = False,
                 late_checkpoint: tuple[int, ...] = ()) -> None:
        super().__init__(daemon=True)
        self.space, self.copy, self.root, self.epochs = space, copy, root, epochs
        self.checkpoints, self.pace, self.deaf = checkpoints, pace, deaf
        self.late_checkpoint = late_checkpoint
        self.tasks: list[dict] = []
        self.trained: list[tuple[int, int]] = []   # (trial, epoch) of every epoch trained

    def run(self) -> None:
        while (task := self.space.tget(task_tag(STUDY))) is not None:
            self.tasks.append(task)
            self.space.tput(report_tag(STUDY), start_report(task["trial"], self.copy))
            self.trial(task)

    def trial(self, task: dict) -> None:
        number, x = task["trial"], task["params"]["x"]
        first = task["restore"]["step"] + 1 if task["restore"] else 1
        accuracy = None
        for epoch in range(first, self.epochs + 1):
            time.sleep(self.pace)
            self.trained.append((number, epoch))
            accuracy = x / 10 + epoch / 100
            self.space.tput(report_tag(STUDY), {"kind": "epoch", "trial": number,
                                                "epoch": epoch, "worker": self.copy,
                                                "metrics": {"accuracy": accuracy}})
            order = self.space.try_tget(prune_tag(STUDY, number))
            late = number in self.late_checkpoint and epoch == self.epochs
            if self.checkpoints and not late:
                self.checkpoint(number, epoch)
            if order == PAUSE and not self.deaf:
                self.space.tput(report_tag(STUDY), {
                    "kind": "result", "trial": number, "worker": self.copy,
                    "status": "paused", "epoch": epoch, "accuracy": accuracy})
                return
        self.space.tput(report_tag(STUDY), {"kind": "result", "trial": number,
                                            "worker": self.copy, "status": "ok",
                                            "accuracy": accuracy, "epoch": self.epochs})
        if number in self.late_checkpoint:   # its final checkpoint is durable after the result
            self.checkpoint(number, self.epochs)

    def checkpoint(self, number: int, step: int) -> None:
        path = layout.checkpoint_path(layout.study_folder(self.root, STUDY), number, step)
        written = write(take({"step": step}), path, step)
        self.space.tput(report_tag(STUDY), checkpoint_report(
            number, self.copy, step, written.path, written.nbytes, written.checksum))


def search(space: FakeSpace, store: MemoryStorage, root: Path, workers: list[Worker],
           extra: dict | None = None, **kwargs):
    """Run a search of ``settings(**extra)`` served by ``workers`` (started here)."""
    for worker in workers:
        worker.start()
    try:
        return run_search(space, parse_settings(settings(**(extra or {})), "search"), store,
                          len(workers), study=STUDY, out=io.StringIO(), poll=0.02,
                          checkpoints=root, **kwargs)
    finally:
        for worker in workers:
            worker.join(timeout=10)


def files(root: Path) -> list[tuple[int, int]]:
    """The (trial, step) of every checkpoint file under ``root``."""
    found = [layout.parse(p) for p in root.rglob("*.ckpt")]
    return sorted((where.trial, where.step) for where in found)


def kept(store: MemoryStorage) -> list[tuple[int, int]]:
    return sorted((c.number, c.step) for c in store.study_checkpoints(STUDY))


# -- recording -----------------------------------------------------------------------

def test_durable_checkpoints_are_recorded_also_after_the_result(tmp_path):
    space, store = FakeSpace(), MemoryStorage()
    workers = [Worker(space, 0, tmp_path, late_checkpoint=(0, 2))]
    search(space, store, tmp_path, workers, {"checkpoints": {"keep_best": 4}})
    assert kept(store) == [(n, 3) for n in range(4)], \
        "a final checkpoint durable after its trial's result was not recorded"
    [newest] = store.checkpoints(STUDY, 2)
    assert Path(newest.path).is_file() and newest.nbytes == Path(newest.path).stat().st_size
    assert newest.checksum.startswith("crc32:")


def test_a_checkpoint_report_for_no_trial_of_this_run_or_outside_the_folder_is_ignored(
        tmp_path, caplog):
    space, store = FakeSpace(), MemoryStorage()
    outside = tmp_path / "elsewhere" / "precious.txt"
    outside.parent.mkdir()
    outside.write_text("not a checkpoint")
    space.tput(report_tag(STUDY), checkpoint_report(0, 0, 1, str(outside), 16, "crc32:0"))
    space.tput(report_tag(STUDY), checkpoint_report(99, 0, 1, str(outside), 16, "crc32:0"))

    class Misplacing(Worker):
        def checkpoint(self, number: int, step: int) -> None:
            self.space.tput(report_tag(STUDY), checkpoint_report(
                number, self.copy, step, str(outside), 16, "crc32:00000000"))

    with caplog.at_level(logging.WARNING):
        search(space, store, tmp_path, [Misplacing(space, 0, tmp_path / "ckpt")],
               {"checkpoints": {"keep_best": 0}})
    assert kept(store) == [] and outside.exists(), "a file outside the study's folder was " \
                                                   "recorded, or deleted"
    assert "ignoring a checkpoint report" in caplog.text and "trial-0" in caplog.text


def test_a_malformed_checkpoint_report_is_not_recorded():
    store = MemoryStorage()
    state = store.open_study(STUDY, "grid", "accuracy", "maximize", {})
    engine = SearchEngine(parse_settings(settings(), "search"), state, seed=1)
    engine.next_trial()
    good = checkpoint_report(0, 0, 2, "/c/s/trial-0/step-2.ckpt", 10, "crc32:0000abcd")
    made = engine.on_checkpoint(good)
    assert (made.number, made.step, made.path, made.nbytes, made.checksum) == \
        (0, 2, good["path"], 10, "crc32:0000abcd")
    for bad in ({"trial": 1}, {"step": -1}, {"step": 1.5}, {"step": True}, {"path": ""},
                {"path": "/" + "x" * 5000}, {"path": None}, {"nbytes": -1},
                {"checksum": "c" * 300}, {"checksum": 7}):
        assert engine.on_checkpoint({**good, **bad}) is None, bad


# -- resume --------------------------------------------------------------------------

def _paused_study(store: MemoryStorage, root: Path, steps: tuple[int, ...],
                  status: str = "paused") -> None:
    """Study ``s`` with trial 0 (x=0) paused (or left running) after the epochs of
    ``steps``, a real checkpoint file at each, and trial 1 finished ok."""
    from diel.results import EpochRecord, ResultRecord, TrialStart
    state = store.open_study(STUDY, "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(0, {"x": 0}, '{"x":0}'),
                                          TrialStart(1, {"x": 1}, '{"x":1}')])
    folder = layout.study_folder(root, STUDY)
    checkpoints = []
    for step in steps:
        written = write(take({"step": step}), layout.checkpoint_path(folder, 0, step), step)
        checkpoints.append(Checkpoint(0, step, written.path, written.nbytes, written.checksum))
    store.record(state.study_id, checkpoints=checkpoints,
                 epochs=[EpochRecord(0, e, {"accuracy": e / 100}) for e in range(1, 4)] +
                 [EpochRecord(1, e, {"accuracy": 0.1 + e / 100}) for e in range(1, 4)],
                 results=[ResultRecord(1, "ok", accuracy=0.13, objective=0.13)] +
                 ([ResultRecord(0, "paused", epoch=steps[-1])] if status == "paused" else []))


def test_a_paused_trial_resumes_first_from_its_newest_checkpoint_uncharged(tmp_path):
    space, store = FakeSpace(), MemoryStorage()
    _paused_study(store, tmp_path, (1, 2))
    worker = Worker(space, 0, tmp_path)
    search(space, store, tmp_path, [worker], {"checkpoints": {"keep": 2}})
    first = worker.tasks[0]
    assert first["trial"] == 0 and first["restore"]["step"] == 2
    assert [c["step"] for c in first["restore"]["older"]] == [1]
    assert set(first["restore"]) == {"step", "path", "nbytes", "checksum", "older"}
    assert all(task["restore"] is None for task in worker.tasks[1:]), worker.tasks
    assert [epoch for trial, epoch in worker.trained if trial == 0] == [3], \
        "the resumed trial trained an epoch before its checkpoint again"
    [attempt] = store.attempts(STUDY, 0)[-1:]
    assert attempt["resumed_from"] == 2 and attempt["status"] == "ok"
    row = next(t for t in store.trials(STUDY) if t["number"] == 0)
    assert row["status"] == "ok" and row["attempts"] == 1, "the pause was charged"


def test_a_trial_left_running_by_a_crash_resumes_and_its_scheduler_sees_each_epoch_once(
        tmp_path):
    store = MemoryStorage()
    _paused_study(store, tmp_path, (2,), status="running")
    state = store.open_study(STUDY, "grid", "accuracy", "maximize", {})
    seen: list[tuple[int, int]] = []

    class Recorder(Scheduler):
        def decide(self, trial, epoch, score):
            seen.append((trial, epoch))
            return Decision.continue_()

        def finish(self, trial, ok):
            pass

    parsed = parse_settings(settings(pruner="median"), "search")
    parsed.pruner = Recorder()
    engine = SearchEngine(parsed, state, seed=1)
    assert seen == [(1, 1), (1, 2), (1, 3), (0, 1), (0, 2)], \
        "the stored epochs up to the checkpoint were not replayed (or later ones were)"
    start = engine.next_trial()
    assert (start.number, start.resumed_from) == (0, 2)
    assert engine.task(0)["restore"]["step"] == 2
    engine.on_epoch({"trial": 0, "epoch": 2, "metrics": {"accuracy": 0.5}})
    engine.on_epoch({"trial": 0, "epoch": 3, "metrics": {"accuracy": 0.5}})
    assert seen[5:] == [(0, 3)], "an epoch at or before the restored step was shown again"


# -- garbage collection ----------------------------------------------------------------

def _checkpoint(folder: Path, trial: int, step: int) -> Checkpoint:
    written = write(take(b"x" * 100), layout.checkpoint_path(folder, trial, step), step)
    return Checkpoint(trial, step, written.path, written.nbytes, written.checksum)


def test_retention_keeps_the_newest_of_a_running_trial_and_the_final_of_the_best(tmp_path):
    retention = Retention(tmp_path, keep=2, keep_best=1, maximize=True,
                          log=logging.getLogger("test"))
    made = {(t, s): _checkpoint(tmp_path, t, s) for t in (0, 1, 2) for s in (1, 2, 3)}
    assert retention.added(made[0, 1]) == [] and retention.added(made[0, 2]) == []
    assert retention.added(made[0, 3]) == [made[0, 1]], "keep 2: the oldest goes"
    assert retention.finished(0, 0.5) == [made[0, 2]], "a best trial keeps its final one"
    for step in (1, 2, 3):
        retention.added(made[1, step])
    assert retention.finished(1, 0.7) == [made[1, 2], made[0, 3]], \
        "a better trial displaces the best one's final checkpoint"
    for step in (1, 2):
        retention.added(made[2, step])
    assert retention.finished(2, None) == [made[2, 2], made[2, 1]], "a failed trial keeps none"
    assert retention.holds(1) and not retention.holds(0) and not retention.holds(2)
    assert retention.added(made[2, 3]) == [made[2, 3]], "a late one of a finished trial " \
                                                        "not among the best is kept"
    assert retention.added(made[1, 3]) == [], "a best trial's final one went"


def test_the_search_deletes_what_it_does_not_keep_files_included(tmp_path):
    space, store = FakeSpace(), MemoryStorage()
    folder = layout.study_folder(tmp_path, STUDY)
    leftover = layout.temporary_path(layout.checkpoint_path(folder, 7, 1))
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a checkpoint")
    search(space, store, tmp_path, [Worker(space, 0, tmp_path), Worker(space, 1, tmp_path)],
           {"checkpoints": {"keep": 1, "keep_best": 2}})
    assert kept(store) == files(tmp_path) == [(2, 3), (3, 3)], \
        "only the final checkpoints of the two best trials (x=3, x=2) stay"
    assert not leftover.exists(), "a crash's temporary file was not deleted at the start"
    assert sorted(p.name for p in folder.iterdir()) == ["trial-2", "trial-3"], \
        "emptied trial folders were left"


def test_a_checkpoint_that_cannot_be_deleted_is_one_warning(tmp_path, caplog):
    retention = Retention(tmp_path, keep=1, keep_best=0, maximize=True,
                          log=logging.getLogger("test"))
    stuck = [Checkpoint(n, 1, str(tmp_path / f"trial-{n}" / "step-1.ckpt"), 1, "crc32:0")
             for n in (0, 1)]
    for checkpoint in stuck:   # a folder where the file was: unlink fails, as root too
        Path(checkpoint.path).mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        retention.delete_files(stuck)
    assert caplog.text.count("could not delete checkpoint") == 1, caplog.text


def test_lowering_keep_best_deletes_the_extra_finals_at_the_next_start(tmp_path):
    space, store = FakeSpace(), MemoryStorage()
    search(space, store, tmp_path, [Worker(space, 0, tmp_path)],
           {"checkpoints": {"keep_best": 4}})
    assert len(files(tmp_path)) == 4
    search(space, store, tmp_path, [Worker(space, 0, tmp_path)],
           {"checkpoints": {"keep_best": 1}})
    assert kept(store) == files(tmp_path) == [(3, 3)]


# -- wall-time stops -------------------------------------------------------------------

@pytest.mark.parametrize("grace", [0, -1, "soon"])
def test_stop_grace_must_be_a_positive_number(grace):
    with pytest.raises(ConfigError) as error:
        parse_settings(settings(stop_grace=grace), "search")
    assert error.value.path == "search.stop_grace"
    assert parse_settings(settings(), "search").stop_grace == 120

@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200),
                                           ("1h30m", 5400), ("90", 90), ("1:30:00", 5400),
                                           ("2-00:00:00", 172800), ("1d12h", 129600)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1h3", "soon", "0s", "-5m", "1.5h30m", "h"])
def test_a_bad_stop_after_is_a_usage_error(text, capsys):
    with pytest.raises(SystemExit) as exit:
        diel_main(["run", f"--stop-after={text}", "workflow.yaml"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--stop-after" in err and "expected a duration such as 90s" in err


def test_sigusr1_is_noted_not_fatal():
    wall_time = WallTime()
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        wall_time.listen()
        assert wall_time.reason() is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert wall_time.reason() == "SIGUSR1"
    finally:
        signal.signal(signal.SIGUSR1, previous)
    ticks = iter([0.0, 5.0, 5400.0])
    assert WallTime(5400, clock=lambda: next(ticks)).reason() is None
    later = WallTime(5400, clock=lambda: 0.0)
    later.clock = lambda: 5400.0
    assert later.reason() == "--stop-after 1h30m"


class Soon(WallTime):
    """A stop asked once ``count`` epochs of ``workers`` were trained."""

    def __init__(self, workers: list[Worker], count: int) -> None:
        super().__init__()
        self.workers, self.count = workers, count

    def reason(self) -> str | None:
        if not self.signalled and sum(len(w.trained) for w in self.workers) >= self.count:
            self.signalled, self.asked_at = True, time.monotonic()
        return super().reason()


def test_a_stop_pauses_the_running_trials_and_the_next_run_resumes_them(tmp_path, caplog):
    space, store = FakeSpace(), MemoryStorage()
    extra = {"checkpoints": {"keep_best": 0}, "mode": "async", "prefetch": 1}
    workers = [Worker(space, c, tmp_path, epochs=200, pace=0.01, checkpoints=c == 0)
               for c in range(2)]
    with pytest.raises(Stopped) as stopped:
        search(space, store, tmp_path, workers, extra, wall_time=Soon(workers, 4))
    assert str(stopped.value) == (
        "diel: stopped at the wall-time limit: 1 trial paused with a checkpoint, 1 paused "
        "without one (starts again from scratch); run the same command to resume")
    rows = {t["number"]: t for t in store.trials(STUDY)}
    assert sorted(rows) == [0, 1], "a queued trial no worker took was not taken back"
    assert {t["status"] for t in rows.values()} == {"paused"}
    assert all(t["attempts"] == 0 and t["finished_at"] is None for t in rows.values())
    paused_at = {w.tasks[0]["trial"]: w.trained[-1][1] for w in workers}
    with_checkpoint = workers[0].tasks[0]["trial"]
    again = [Worker(space, c, tmp_path, epochs=200, checkpoints=False) for c in range(2)]
    with caplog.at_level(logging.INFO, logger="diel.search"):
        search(space, store, tmp_path, again, extra)
    assert "0 left running and 2 paused are run again (1 from a checkpoint)" in caplog.text
    restored = {task["trial"]: task["restore"] for w in again for task in w.tasks}
    assert restored[with_checkpoint]["step"] == paused_at[with_checkpoint]
    assert restored[1 - with_checkpoint] is None
    assert {t["status"] for t in store.trials(STUDY)} == {"ok"} and len(store.trials(STUDY)) == 4
    retrained = [(n, e) for w in again for n, e in w.trained if n == with_checkpoint]
    assert retrained[0][1] == paused_at[with_checkpoint] + 1, "an epoch was trained twice"


def test_a_trial_that_does_not_pause_within_the_grace_is_taken_back(tmp_path):
    space, store = FakeSpace(), MemoryStorage()
    worker = Worker(space, 0, tmp_path, epochs=150, pace=0.005, deaf=True, checkpoints=False)
    worker.start()
    wall_time = Soon([worker], 2)
    with pytest.raises(Stopped) as stopped:
        run_search(space, parse_settings(settings(stop_grace=0.3), "search"), store, 1,
                   study=STUDY, out=io.StringIO(), poll=0.02, checkpoints=tmp_path,
                   wall_time=wall_time)
    ended = time.monotonic()
    worker.join(timeout=10)
    assert ended - wall_time.asked_at < 1.3, "the stop waited long past its grace"
    assert "1 did not pause within stop_grace (0.3 s) and is run again first (from its " \
           "last checkpoint, if any)" in str(stopped.value)
    [row] = store.trials(STUDY)
    assert (row["status"], row["attempts"]) == ("running", 0), row
    assert STOPPED_STATUS == 75
