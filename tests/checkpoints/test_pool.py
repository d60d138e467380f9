"""BlockPool: kept memory is lent again only once nothing can reach it (not a snapshot,
not a state loaded from one, not a buffer of it), the pool keeps at most two blocks,
a block of the wrong size gives way, and clear() gives the memory back."""

from __future__ import annotations

import gc
import pickle
import weakref

import numpy as np
import pytest

from diel.checkpoints import take
from diel.checkpoints.pool import POOL_BLOCKS, BlockPool

MIB = 1 << 20


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def kept(pool: BlockPool) -> list[weakref.ref]:
    """Weak references to the memory the pool keeps, to see it freed."""
    return [weakref.ref(entry.memory) for entry in pool._kept]


def test_a_block_is_lent_again_once_its_view_and_everything_made_of_it_are_gone():
    pool = BlockPool()
    first = pool.block(MIB)
    at = address(first)
    piece = memoryview(first).cast("B")[64:128]   # what a snapshot's buffers are
    del first
    second = pool.block(MIB)
    assert address(second) != at                  # a slice still reaches the first
    del piece
    third = pool.block(MIB)
    assert address(third) == at
    assert third.nbytes == MIB and third.flags.writeable


@pytest.mark.parametrize("holder", ["load", "pickle buffer", "tensor view"])
def test_memory_a_loaded_state_or_a_buffer_still_uses_is_never_lent(holder):
    torch = pytest.importorskip("torch")   # here, not at the top: tests/test_collection.py
    pool = BlockPool()
    values = np.arange(MIB // 4, dtype=np.float32)
    snapshot = take({"x": values, "t": torch.arange(MIB // 4, dtype=torch.float32)}, pool.block)
    if holder == "load":
        kept_alive = snapshot.load()
    elif holder == "pickle buffer":
        kept_alive = pickle.PickleBuffer(snapshot.block)
    else:
        kept_alive = snapshot.load()["t"].view(2, -1)[1]
    at = address(np.frombuffer(snapshot.block, np.uint8))
    del snapshot
    gc.collect()
    for _ in range(2 * POOL_BLOCKS):    # every block lent now is other memory, and scribbled on
        block = pool.block(2 * MIB)
        assert address(block) != at
        block[:] = 0xFF
    if holder == "load":
        assert np.array_equal(kept_alive["x"], values)
        assert torch.equal(kept_alive["t"], torch.arange(MIB // 4, dtype=torch.float32))
    del kept_alive
    assert address(pool.block(2 * MIB)) == at    # now free: lent again


def test_the_pool_keeps_at_most_two_blocks_however_many_are_lent():
    pool = BlockPool()
    lent = [pool.block(3 * MIB) for _ in range(5)]
    assert pool.nbytes == POOL_BLOCKS * 4 * MIB   # 3 MiB rounded up to whole 2 MiB
    assert len({address(block) for block in lent}) == 5   # the others: memory not kept
    kept_at = {address(entry.memory) for entry in pool._kept}
    del lent
    assert address(pool.block(3 * MIB)) in kept_at
    assert pool.nbytes == POOL_BLOCKS * 4 * MIB


def test_a_state_that_changes_size_gets_a_block_of_its_size():
    pool = BlockPool()
    small = address(pool.block(3 * MIB))
    assert address(pool.block(3 * MIB + 1000)) == small   # within the rounding: reused
    large = pool.block(10 * MIB)                            # too small: replaced
    assert address(large) != small and pool.nbytes == 10 * MIB
    del large
    assert pool.block(MIB).nbytes == MIB                    # far too large: replaced
    assert pool.nbytes == MIB                               # under 2 MiB: its own size


def test_clear_frees_the_free_blocks_at_once_and_the_lent_ones_with_their_last_user():
    pool = BlockPool()
    lent = pool.block(MIB)
    pool.block(MIB)     # dropped at once: free
    memory = kept(pool)
    pool.clear()
    gc.collect()
    assert pool.nbytes == 0
    assert [ref() is None for ref in memory] == [False, True]
    lent[:] = 1          # still the caller's to use
    del lent
    gc.collect()
    assert memory[0]() is None
