"""DurableWriter.checkpoint: a checkpoint reuses the memory of one already written (and
not of one still being written), a waiting one of the same trial gives its memory to
the next, memory stays within two blocks over many checkpoints, no reused block ever
changes a checkpoint being written, a state that cannot be pickled drops nothing, and
free_memory()/close() give the memory back."""

from __future__ import annotations

import gc
import random
import threading
import weakref

import numpy as np
import pytest

from diel.checkpoints import DurableWriter, read, writer as writer_module

from tests.helpers.writer_calls import WAIT_S, Calls

N = 1 << 17    # float64 values: 1 MiB a state


class Blocks:
    """Wraps the writer's ``write``: records the address of each snapshot's block (and
    a weak reference to the memory the pool keeps for it) as its write starts, and can
    hold the writer's thread inside the write of given steps until released."""

    def __init__(self, monkeypatch, hold: tuple[int, ...] = (), pause: float = 0.0) -> None:
        self.at: dict[int, int] = {}
        self.memory: dict[int, weakref.ref] = {}
        self.entered = {step: threading.Event() for step in hold}
        self.opened = {step: threading.Event() for step in hold}
        self.pause = pause
        real = writer_module.write

        def write(snapshot, path, step):
            array = np.frombuffer(snapshot.block, np.uint8)
            self.at[step] = array.__array_interface__["data"][0]
            if isinstance(snapshot.block.obj.base, np.ndarray):
                self.memory[step] = weakref.ref(snapshot.block.obj.base)
            del array
            if step in self.entered:
                self.entered[step].set()
                assert self.opened[step].wait(WAIT_S)
            if self.pause:
                threading.Event().wait(random.uniform(0, self.pause))   # a disk slower than training
            return real(snapshot, path, step)

        monkeypatch.setattr(writer_module, "write", write)


def state(step: int) -> dict:
    return {"x": np.full(N, float(step)), "step": step}


@pytest.fixture
def writer(tmp_path):
    made = DurableWriter(tmp_path / "study")
    yield made
    made.close(timeout=WAIT_S)


def test_a_checkpoint_reuses_the_memory_of_one_written_never_of_one_being_written(
        writer, monkeypatch):
    calls = Calls()
    blocks = Blocks(monkeypatch, hold=(1, 2))
    writer.checkpoint(7, 1, state(1), calls.durable, calls.failed)
    assert blocks.entered[1].wait(WAIT_S)
    writer.checkpoint(7, 2, state(2), calls.durable, calls.failed)   # 1 is being written
    blocks.opened[1].set()
    assert blocks.entered[2].wait(WAIT_S)
    assert blocks.at[2] != blocks.at[1]
    calls.wait_for(1)        # 1 is durable: its memory is free before its callback comes
    writer.checkpoint(7, 3, state(3), calls.durable, calls.failed)   # 2 is being written
    writer.checkpoint(7, 4, state(4), calls.durable, calls.failed)   # 3 waits: dropped for 4
    blocks.opened[2].set()
    assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", 7, 1), ("durable", 7, 2), ("durable", 7, 4)]
    assert 3 not in blocks.at and blocks.at[4] == blocks.at[1]
    for _, _, step, written in calls.events:
        assert np.all(read(written.path, written.checksum).load()["x"] == step)


def test_memory_stays_within_two_blocks_over_many_checkpoints(writer, monkeypatch):
    calls = Calls()
    blocks = Blocks(monkeypatch, pause=0.01)
    for step in range(60):
        writer.checkpoint(1, step, state(step), calls.durable, calls.failed)
    assert writer.flush(WAIT_S)
    assert len(set(blocks.at.values())) <= 2                    # every write from two blocks
    assert writer.pool.nbytes <= 2 * N * 8                      # two blocks of the state's 1 MiB
    assert calls.steps()[-1] == ("durable", 1, 59) and len(calls.events) == len(blocks.at)


def test_a_reused_block_never_changes_a_checkpoint_being_written(writer, monkeypatch):
    """Quick checkpoints of a changing state against a slow, uneven disk, until 20 were
    written: every file holds exactly the state of its step."""
    calls = Calls()
    Blocks(monkeypatch, pause=0.004)
    values = np.zeros(N)
    step = 0
    while len(calls.events) < 20:
        values[:] = step          # the trial changes its state in place, as training does
        writer.checkpoint(3, step, {"x": values, "step": step}, calls.durable, calls.failed)
        if step % 7 == 0:
            threading.Event().wait(random.uniform(0, 0.005))
        step += 1
        assert step < 100_000, calls.events
    assert writer.flush(WAIT_S)
    assert [event[0] for event in calls.events] == ["durable"] * len(calls.events)
    assert calls.events[-1][2] == step - 1 and step > len(calls.events)   # some were dropped
    for _, _, at, written in calls.events:
        loaded = read(written.path, written.checksum).load()
        assert loaded["step"] == at and np.all(loaded["x"] == at)


def test_a_state_that_cannot_be_pickled_drops_no_waiting_checkpoint(writer, monkeypatch):
    calls = Calls()
    blocks = Blocks(monkeypatch, hold=(1,))
    writer.checkpoint(1, 1, state(1), calls.durable, calls.failed)
    assert blocks.entered[1].wait(WAIT_S)
    writer.checkpoint(1, 2, state(2), calls.durable, calls.failed)   # waits
    with pytest.raises(TypeError, match=r"cannot checkpoint state\['lock'\]"):
        writer.checkpoint(1, 3, {**state(3), "lock": threading.Lock()}, calls.durable, calls.failed)
    blocks.opened[1].set()
    assert writer.flush(WAIT_S)
    assert calls.steps() == [("durable", 1, 1), ("durable", 1, 2)]


def test_free_memory_gives_the_kept_memory_back(writer, monkeypatch):
    calls = Calls()
    blocks = Blocks(monkeypatch)
    for step in range(3):
        writer.checkpoint(1, step, state(step), calls.durable, calls.failed)
    assert writer.flush(WAIT_S) and writer.pool.nbytes > 0
    assert all(ref() is not None for ref in blocks.memory.values())
    writer.free_memory()
    gc.collect()
    assert writer.pool.nbytes == 0
    assert all(ref() is None for ref in blocks.memory.values())


def test_close_gives_the_kept_memory_back_and_refuses_more(tmp_path, monkeypatch):
    writer = DurableWriter(tmp_path / "study")
    calls = Calls()
    blocks = Blocks(monkeypatch)
    writer.checkpoint(1, 1, state(1), calls.durable, calls.failed)
    assert writer.close(WAIT_S)
    gc.collect()
    assert writer.pool.nbytes == 0 and blocks.memory[1]() is None
    with pytest.raises(RuntimeError, match="is closed"):
        writer.checkpoint(1, 2, state(2), calls.durable, calls.failed)
