"""Memory kept from one checkpoint to the next: :class:`BlockPool`.

Copying a state into fresh memory costs the kernel a page fault for every page it hands
out (and, at 100 MB, an unmap when the snapshot is freed): copying 100 MiB into fresh
memory took about twice as long as into memory already used (18-25 against 9-12 ms,
measured here). A trial checkpoints states of the same size over and over, so the
:class:`~diel.checkpoints.DurableWriter` keeps the memory of the snapshots it has written
and lends it to the trial's next ones.

Memory is lent only when nothing can reach it any more. The pool lends a block as a new
NumPy view of memory it keeps, and holds only a weak reference to that view. Everything
that can read or write the block refers to the view: the snapshot's memoryview of it,
that memoryview's slices (the snapshot's buffers), the arrays and tensors
:meth:`~diel.checkpoints.Snapshot.load` makes of them, a ``PickleBuffer`` of it, an MPI
request sending it; each holds the view alive through the memoryview's buffer. So the
view dies exactly when the last of them does (a snapshot written and dropped by the
writer, a loaded state freed by the trial), and only then is its memory lent again.
Nothing must release a block by hand, and a state loaded from a snapshot keeps its
memory for as long as the state lives. (The one way around it, ``snapshot.block.obj``,
the view itself, sliced with NumPy, gives arrays that refer to the kept memory and not
to the view: nothing in diel does that.)

The pool keeps at most :data:`POOL_BLOCKS` blocks: the one the writer is writing and the
one the trial's next checkpoint is copied into. When every kept block is lent, a block
is fresh memory the pool does not keep (freed with its snapshot, as without a pool).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # NumPy is imported by the first block, not before
    import numpy as np

__all__ = ["BlockPool", "POOL_BLOCKS"]

POOL_BLOCKS = 2        # the block being written and the block of the next checkpoint
_GRAIN = 2 << 20       # kept blocks are whole huge pages (2 MiB): room for a state to grow


@dataclass
class _Kept:
    memory: np.ndarray                              # what the pool keeps
    lent: weakref.ref[np.ndarray] | None = None     # the view lent last

    def free(self) -> bool:
        return self.lent is None or self.lent() is None


class BlockPool:
    """Blocks of memory for snapshots (module docstring); thread-safe."""

    def __init__(self, blocks: int = POOL_BLOCKS) -> None:
        self.blocks = blocks
        self._kept: list[_Kept] = []
        self._lock = threading.Lock()

    def block(self, nbytes: int) -> np.ndarray:
        """A writable ``uint8`` array of ``nbytes`` bytes, uninitialized: kept memory no
        longer used by anything when some fits, else new memory (kept by the pool while
        it has room)."""
        import numpy as np

        with self._lock:
            free = [kept for kept in self._kept if kept.free()]
            kept = next((kept for kept in free if _fits(kept.memory.nbytes, nbytes)), None)
            if kept is None:
                if free:    # the wrong size (a state that changed size): make room
                    self._kept.remove(free[0])
                if len(self._kept) >= self.blocks:
                    return np.empty(nbytes, np.uint8)   # all lent: memory not kept
                kept = _Kept(np.empty(_capacity(nbytes), np.uint8))
                self._kept.append(kept)
            view = kept.memory[:nbytes]
            kept.lent = weakref.ref(view)
            return view

    @property
    def nbytes(self) -> int:
        """The bytes of memory the pool keeps, lent or not."""
        with self._lock:
            return sum(kept.memory.nbytes for kept in self._kept)

    def clear(self) -> None:
        """Give back the memory kept (a trial's end): blocks lent now are freed with the
        last thing that uses them, the others at once."""
        with self._lock:
            self._kept.clear()


def _capacity(nbytes: int) -> int:
    """The size of a kept block for ``nbytes``: rounded up to whole 2 MiB from 2 MiB on."""
    return nbytes if nbytes < _GRAIN else -(-nbytes // _GRAIN) * _GRAIN


def _fits(capacity: int, nbytes: int) -> bool:
    """A kept block of ``capacity`` bytes holds ``nbytes`` without wasting more than it uses."""
    return nbytes <= capacity <= max(2 * nbytes, _GRAIN)
