"""DurableWriter: writes in submission order on its own thread, one callback per write, a
waiting snapshot dropped (without a callback) for a newer one of the same trial, flush and
close bounded by their timeouts, and a write the system refuses reported through on_failed
in one line while the writer goes on."""

from __future__ import annotations

import gc
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import weakref
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from diel.checkpoints import DurableWriter, Written, read, take, writer as writer_module
from diel.checkpoints.layout import checkpoint_path

from tests.helpers.launch import REPO
from tests.helpers.unprivileged import unprivileged_argv
from tests.helpers.writer_calls import WAIT_S, Calls


def snapshot(value: float = 0.0):
    return take({"x": np.full(20_000, value)})


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def writer(tmp_path):
    made = DurableWriter(tmp_path / "study")
    yield made
    made.close(timeout=WAIT_S)


class Gate:
    """Holds the writer's thread inside its write of one checkpoint until opened."""

    def __init__(self, monkeypatch, step: int) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()
        real = writer_module.write

        def write(snap, path, at):
            if at == step:
                self.entered.set()
                assert self.opened.wait(WAIT_S)
            return real(snap, path, at)

        monkeypatch.setattr(writer_module, "write", write)


def test_writes_come_in_submission_order_one_callback_each_from_the_writer_thread(writer, calls):
    keys = [5, 2, 9, 0, 7, 3, 11, 4]        # one write per trial: none is dropped
    for key in keys:
        writer.submit(key, key + 1, snapshot(key), calls.durable, calls.failed)
    assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", key, key + 1) for key in keys]
    assert calls.threads == {"diel-checkpoint-writer"}
    for _, key, step, written in calls.events:
        assert written.path == str(checkpoint_path(writer.folder, key, step))
        assert read(written.path, written.checksum).load()["x"][0] == key


def test_every_write_is_made_when_the_disk_keeps_up(writer, calls):
    """One snapshot at a time (each flushed): nothing is dropped, in order."""
    for step in range(5):
        writer.submit(1, step, snapshot(step), calls.durable, calls.failed)
        assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", 1, step) for step in range(5)]
    assert sorted(os.listdir(writer.folder / "trial-1")) == [f"step-{s}.ckpt" for s in range(5)]


def test_a_waiting_snapshot_is_dropped_without_callback_for_a_newer_one_of_its_trial(
        writer, calls, monkeypatch):
    gate = Gate(monkeypatch, step=100)
    writer.submit(1, 100, snapshot(), calls.durable, calls.failed)   # being written: kept
    assert gate.entered.wait(WAIT_S)
    writer.submit(2, 1, snapshot(1), calls.durable, calls.failed)
    writer.submit(3, 1, snapshot(1), calls.durable, calls.failed)
    writer.submit(2, 2, snapshot(2), calls.durable, calls.failed)     # drops 2/1
    writer.submit(1, 101, snapshot(), calls.durable, calls.failed)    # 1/100 is being written
    writer.submit(2, 3, snapshot(3), calls.durable, calls.failed)     # drops 2/2
    gate.opened.set()
    assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", 1, 100), ("durable", 3, 1), ("durable", 1, 101),
                             ("durable", 2, 3)]
    assert os.listdir(writer.folder / "trial-2") == ["step-3.ckpt"]


def test_flush_waits_for_the_write_under_way_and_times_out(writer, calls, monkeypatch):
    assert writer.flush(0)                     # nothing submitted: idle
    gate = Gate(monkeypatch, step=1)
    writer.submit(1, 1, snapshot(), calls.durable, calls.failed)
    assert gate.entered.wait(WAIT_S)
    started = time.monotonic()
    assert writer.flush(0.2) is False
    assert 0.15 < time.monotonic() - started < 5
    assert calls.events == []
    gate.opened.set()
    assert writer.flush(WAIT_S) is True
    assert calls.steps() == [("durable", 1, 1)]


def test_close_at_its_timeout_fails_what_is_queued_and_lets_the_write_under_way_finish(
        tmp_path, calls, monkeypatch):
    writer = DurableWriter(tmp_path / "study")
    gate = Gate(monkeypatch, step=1)
    writer.submit(1, 1, snapshot(), calls.durable, calls.failed)
    assert gate.entered.wait(WAIT_S)
    writer.submit(2, 5, snapshot(), calls.durable, calls.failed)
    writer.submit(3, 6, snapshot(), calls.durable, calls.failed)
    started = time.monotonic()
    assert writer.close(timeout=0.2) is False
    assert time.monotonic() - started < 5
    assert calls.steps() == [("failed", 2, 5), ("failed", 3, 6)]
    reason = calls.events[0][3]
    assert reason == (f"checkpoint {checkpoint_path(writer.folder, 2, 5)}: not written: the "
                      "writer was closed after 0.2 s with it still queued")
    with pytest.raises(RuntimeError, match="is closed"):
        writer.submit(4, 1, snapshot(), calls.durable, calls.failed)
    gate.opened.set()
    calls.wait_for(3)
    assert calls.steps()[2] == ("durable", 1, 1)    # the write under way: its own callback
    assert not (writer.folder / "trial-2").exists()


def test_close_without_timeout_writes_everything_queued(tmp_path, calls):
    writer = DurableWriter(tmp_path / "study")
    for key in range(4):
        writer.submit(key, 1, snapshot(key), calls.durable, calls.failed)
    assert writer.close() is True
    assert calls.steps() == [("durable", key, 1) for key in range(4)]
    assert writer._thread is not None and not writer._thread.is_alive()


def test_a_writer_never_used_closes_at_once(tmp_path):
    writer = DurableWriter(tmp_path / "study")
    assert writer.close(timeout=0) is True
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize("key, step", [(-1, 1), (1, -1), (True, 1), (1, 2.0)])
def test_submit_checks_key_and_step_in_the_caller(writer, calls, key, step):
    with pytest.raises(ValueError):
        writer.submit(key, step, snapshot(), calls.durable, calls.failed)
    assert writer.flush(0) and writer._thread is None


def test_flush_or_close_from_a_callback_is_refused_not_a_deadlock(writer, calls):
    errors: list[str] = []

    def durable(written: Written) -> None:
        for call in (writer.flush, writer.close):
            try:
                call()
            except RuntimeError as e:
                errors.append(str(e))
        calls.durable(written)

    writer.submit(1, 1, snapshot(), durable, calls.failed)
    calls.wait_for(1)
    assert errors == ["DurableWriter.flush() called from a checkpoint callback would wait for itself",
                      "DurableWriter.close() called from a checkpoint callback would wait for itself"]


def test_a_callback_that_raises_is_logged_and_the_writer_goes_on(writer, calls, caplog):
    def broken(written: Written) -> None:
        raise KeyError("boom\nsecond line")

    with caplog.at_level(logging.ERROR, logger="diel.checkpoints"):
        writer.submit(1, 1, snapshot(), broken, calls.failed)
        writer.submit(2, 1, snapshot(), calls.durable, calls.failed)
        assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", 2, 1)]
    [record] = caplog.records
    assert "KeyError" in record.getMessage() and "\n" not in record.getMessage()


def test_a_path_too_long_fails_in_one_line_every_time(tmp_path, calls):
    writer = DurableWriter(tmp_path / ("s" * 300))
    writer.submit(1, 1, snapshot(), calls.durable, calls.failed)
    assert writer.flush(WAIT_S)
    writer.submit(2, 1, snapshot(), calls.durable, calls.failed)   # the thread lives on
    assert writer.close(WAIT_S)
    assert calls.steps() == [("failed", 1, 1), ("failed", 2, 1)]
    reason = calls.events[0][3]
    assert reason.startswith(f"checkpoint {tmp_path / ('s' * 300)}/trial-1/step-1.ckpt: not written: ")
    assert reason.endswith("File name too long (ENAMETOOLONG)") and "\n" not in reason


def test_an_unexpected_error_in_a_write_reaches_on_failed(writer, calls, monkeypatch):
    def broken(snap, path, step):
        raise RuntimeError("the disk\nmisbehaved")

    monkeypatch.setattr(writer_module, "write", broken)
    writer.submit(1, 1, snapshot(), calls.durable, calls.failed)
    assert writer.flush(WAIT_S)
    [(kind, key, step, reason)] = calls.events
    assert kind == "failed" and reason.endswith("not written: RuntimeError: the disk misbehaved")


def test_a_folder_the_user_may_not_write_fails_through_on_failed(tmp_path):
    """Run as a user the permissions apply to (nobody when the tests run as root), in a
    folder outside pytest's (which only its owner may enter) that user may not write."""
    folder = Path(tempfile.mkdtemp(prefix="diel-readonly-"))
    try:
        folder.chmod(0o555)
        program = textwrap.dedent(f"""
            import numpy as np
            from diel.checkpoints import DurableWriter, take
            writer = DurableWriter({str(folder / "study")!r})
            writer.submit(3, 7, take({{"x": np.zeros(1000)}}), lambda written: print("durable"),
                          lambda key, step, reason: print("failed", key, step, reason))
            print("closed", writer.close(30))
        """)
        done = subprocess.run([*unprivileged_argv(), sys.executable, "-c", program], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        failed, closed = done.stdout.splitlines()
        assert failed == (f"failed 3 7 checkpoint {folder}/study/trial-3/step-7.ckpt: not written: "
                          "Permission denied (EACCES)")
        assert closed == "closed True"
        assert os.listdir(folder) == []
    finally:
        shutil.rmtree(folder)


def test_a_written_snapshot_is_released_at_once_not_kept_until_the_next(writer, calls):
    """The writer's thread must not hold the last snapshot (up to gigabytes) while idle."""
    snap = snapshot()
    block = weakref.ref(snap.block.obj)    # the array that owns the snapshot's memory
    writer.submit(1, 1, snap, calls.durable, calls.failed)
    del snap
    assert writer.flush(WAIT_S)
    gc.collect()
    assert block() is None
