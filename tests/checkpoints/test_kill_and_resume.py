"""Must show (issue 20): a search whose whole job is SIGKILLed at three random moments and
run again each time trains no epoch it had checkpointed, and ends with every trial's
per-epoch metrics bitwise equal to an uninterrupted run's; a checkpoint damaged on disk
is skipped for the one before it."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

import diel.results
from diel.results import get_storage
from tests.helpers.launch import run_diel, search_workflow
from tests.helpers.search import kill_job, quiet, start_job

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

TRIALS, EPOCHS = 6, 6
SEARCH = """\
      strategy: grid
      space:
        lr: {values: [0.05, 0.2, 0.4]}
        seed: {values: [0, 1]}
      objective: loss
      direction: minimize"""


def worker(folder: Path) -> str:
    # max_attempts: the kills are the test's: a trial queued ahead of the workers when one
    # comes is charged an attempt as if it had crashed the job
    return ("    function: worker\n    copies: 2\n    settings:\n"
            "      run: tests.checkpoints.objectives:sgd\n      max_attempts: 10\n"
            f"      params: {{epochs: {EPOCHS}, sleep: 0.1, log: '{folder / 'trained.log'}'}}\n")


def trained(folder: Path) -> list[dict]:
    """Every epoch trained so far, in order: {trial, epoch, pid}."""
    log = folder / "trained.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def latest_checkpoints(folder: Path) -> dict[int, int]:
    """Trial number -> the step of its latest recorded checkpoint, for unfinished trials."""
    store = get_storage(f"sqlite:///{folder / 'wf.db'}")
    try:
        rows = store.trials("wf")
        return {row["number"]: (found[0].step if (found := store.checkpoints("wf", row["number"]))
                                else 0)
                for row in rows if row["status"] not in ("ok", "failed", "pruned")}
    finally:
        store.close()


def finished_trials(folder: Path) -> set[int]:
    with diel.results.open(folder / "wf.db") as results:
        return {row["number"] for row in results.trials("wf") if row["status"] == "ok"}


def epochs_of(folder: Path) -> dict[int, dict[int, dict]]:
    with diel.results.open(folder / "wf.db") as results:
        return results.epochs("wf")


def wait_for_lines(folder: Path, count: int, job, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while len(trained(folder)) < count:
        assert job.poll() is None, "the job ended before the moment chosen to kill it"
        assert time.monotonic() < deadline, f"fewer than {count} epochs trained in {timeout} s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> dict[int, dict[int, dict]]:
    """The per-epoch metrics of the search run without interruption."""
    reference = tmp_path_factory.mktemp("reference")
    search_workflow(reference, SEARCH, worker(reference))
    done = run_diel("run", str(reference / "wf.yaml"), n=4, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    found = epochs_of(reference)
    assert len(found) == TRIALS and all(len(e) == EPOCHS for e in found.values())
    return found


def test_three_sigkills_lose_only_what_was_not_checkpointed_and_end_bitwise_equal(tmp_path,
                                                                                  expected):
    killed = tmp_path / "killed"
    killed.mkdir()
    search_workflow(killed, SEARCH, worker(killed))

    chosen = random.Random()
    seed = chosen.randrange(1 << 30)
    chosen.seed(seed)
    before = None   # what the last kill left: checkpoints, finished trials, epochs trained
    for kill in range(3):
        job = start_job(killed / "wf.yaml", killed / f"run{kill}.out")
        # a random moment: 2 to 9 more epochs into this run, then part of one
        wait_for_lines(killed, len(trained(killed)) + chosen.randint(2, 9), job)
        time.sleep(chosen.uniform(0, 0.12))
        kill_job(job, killed / "wf.yaml")
        within_keep(killed)
        resumed_after(before, trained(killed), seed)
        before = latest_checkpoints(killed), finished_trials(killed), len(trained(killed))
    last = run_diel("run", str(killed / "wf.yaml"), n=4, timeout=240)
    assert last.returncode == 0, last.stdout + last.stderr
    quiet(last.stdout + last.stderr)
    resumed_after(before, trained(killed), seed)
    files = checkpoint_files(killed)
    best = min(expected, key=lambda n: expected[n][EPOCHS]["loss"])
    assert {n: len(f) for n, f in files.items() if f} == {best: 1}, \
        f"a finished search keeps the final checkpoint of its best trial alone: {files}"
    assert metrics_of(epochs_of(killed)) == metrics_of(expected), \
        f"the resumed search differs from the uninterrupted one (seed {seed})"
    store = get_storage(f"sqlite:///{killed / 'wf.db'}")
    try:
        resumes = [a["resumed_from"] for n in range(TRIALS) for a in store.attempts("wf", n)]
    finally:
        store.close()
    assert any(resumes), f"no trial resumed from a checkpoint: {resumes} (seed {seed})"


def checkpoint_files(folder: Path) -> dict[int, list[str]]:
    """Trial number -> its checkpoint files on disk (crash leftovers included)."""
    root = folder / "wf.db.checkpoints"
    return {int(trial.name.removeprefix("trial-")): sorted(p.name for p in trial.iterdir())
            for trial in root.glob("*/trial-*")}


def within_keep(folder: Path) -> None:
    """Each trial holds at most keep (1) checkpoints, plus one newer being recorded
    (written, not yet known to the master: it deletes the older once it records it)
    and a temporary file the kill cut short."""
    for number, names in checkpoint_files(folder).items():
        done = [name for name in names if name.endswith(".ckpt")]
        assert len(done) <= 2 and len(names) <= 3, f"trial {number} holds {names}"


def resumed_after(before, lines: list[dict], seed: int) -> None:
    """A run after a kill trained each trial from the epoch after its last recorded
    checkpoint, and no trial that had finished."""
    if before is None:
        return
    saved, ended, count = before
    firsts: dict[int, int] = {}
    for line in lines[count:]:
        firsts.setdefault(line["trial"], line["epoch"])
    for number, epoch in firsts.items():
        assert number not in ended, f"finished trial {number} trained again (seed {seed})"
        assert epoch == saved.get(number, 0) + 1, \
            f"trial {number} resumed at epoch {epoch}; its last checkpoint was of epoch " \
            f"{saved.get(number, 0)} (seed {seed})"


def metrics_of(epochs: dict[int, dict[int, dict]]) -> dict[int, dict[int, tuple]]:
    """Each epoch's loss and accuracy (the worker's wall time differs run to run)."""
    return {number: {epoch: (m["loss"], m["accuracy"]) for epoch, m in by_epoch.items()}
            for number, by_epoch in epochs.items()}


def test_a_damaged_checkpoint_is_skipped_for_the_one_before_it(tmp_path, expected):
    search_workflow(tmp_path, SEARCH + "\n      checkpoints: {keep: 2}", worker(tmp_path))
    for attempt in range(20):   # until the kill finds a trial with two checkpoints kept
        job = start_job(tmp_path / "wf.yaml", tmp_path / f"run{attempt}.out")
        wait_for_lines(tmp_path, len(trained(tmp_path)) + 4, job)
        kill_job(job, tmp_path / "wf.yaml")
        store = get_storage(f"sqlite:///{tmp_path / 'wf.db'}")
        try:
            kept = {n: store.checkpoints("wf", n) for n in latest_checkpoints(tmp_path)}
        finally:
            store.close()
        damaged = next((n for n, found in sorted(kept.items()) if len(found) >= 2), None)
        if damaged is not None:
            break
    else:
        pytest.fail("no kill found a trial with two checkpoints kept")
    newest, older = kept[damaged][:2]
    with open(newest.path, "r+b") as f:   # flip one byte in the middle of the newest
        f.seek(newest.nbytes // 2)
        byte = f.read(1)
        f.seek(newest.nbytes // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    lines = len(trained(tmp_path))
    done = run_diel("run", str(tmp_path / "wf.yaml"), n=4, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    warnings = [line for line in output.splitlines() if newest.path in line]
    assert len(warnings) == 1 and "damaged" in warnings[0], output[-3000:]
    first = next(line["epoch"] for line in trained(tmp_path)[lines:] if line["trial"] == damaged)
    assert first == older.step + 1, f"trial {damaged} resumed at epoch {first}, not after " \
                                    f"its older checkpoint of epoch {older.step}"
    assert metrics_of(epochs_of(tmp_path)) == metrics_of(expected)
