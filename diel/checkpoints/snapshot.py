"""A trial's state as bytes: :func:`take` serializes it, :meth:`Snapshot.load` gives it back.

Pickle protocol 5 with out-of-band buffers: the large memory blocks of a state are kept
apart from the pickle stream, so that serializing never copies them into it. What goes
out of band (each block of at least :data:`IN_BAND_MAX` bytes):

* contiguous NumPy arrays (NumPy's own protocol-5 reduction);
* CPU torch tensors: their storage, as ``torch.save`` keeps it (views of one storage stay
  views of one storage after loading; a tensor's strides and offset are kept);
* ``bytes`` and ``bytearray`` values.

:func:`take` copies each of those blocks once (one ``memcpy`` each, by NumPy, without
holding the GIL), into one contiguous buffer the snapshot owns (each block at a multiple
of :data:`ALIGN` bytes), so that the trial may change its arrays the moment it returns,
and the file is one sequential write of that buffer. That buffer is new memory, or
memory kept from the trial's earlier snapshots once nothing uses them any more
(:class:`~diel.checkpoints.pool.BlockPool`, what the writer's
:meth:`~diel.checkpoints.DurableWriter.checkpoint` uses): no page faults then.
Everything else (small blocks, numbers, strings, the structure of dicts and lists)
is in the pickle stream, copied there once by pickle.

What other paths copy: NumPy pickles a non-contiguous array inside the stream (its own
copy, then the stream's). A CUDA tensor goes through torch's own reduction: the legacy
``torch.save`` of its storage into a ``bytes`` object (copied to host memory on the way),
which then goes out of band as above; loading it calls ``torch.load`` on those bytes,
which puts the tensor back on the same CUDA device, and fails, as ``torch.load`` does
without ``map_location``, on a machine without one. A tensor subclass, a tensor with
Python attributes, a quantized or sparse tensor also goes through torch's own reduction.

:meth:`Snapshot.load` copies nothing out of band: the arrays and tensors it returns are
views of the snapshot's buffer (``bytes`` values are copied: a ``bytes`` object owns its
memory). Load a snapshot once, or copy what you will change.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any, Callable, Sequence

from diel.limits import LOG_TEXT_CHARS, clip

__all__ = ["Snapshot", "take", "ALIGN", "IN_BAND_MAX", "buffer_offsets"]

ALIGN = 64             # each out-of-band buffer starts at a multiple of this (a cache line)
IN_BAND_MAX = 4096     # smaller buffers stay in the pickle stream (not worth a buffer entry)
_SEARCH_DEPTH = 64     # how deep an unpicklable value is looked for, to name its key


def buffer_offsets(lengths: Sequence[int]) -> tuple[list[int], int]:
    """Where each buffer of ``lengths`` bytes starts in the contiguous block (each at a
    multiple of :data:`ALIGN`), and the block's length (the end of the last buffer)."""
    offsets, end = [], 0
    for length in lengths:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + length
    return offsets, end


class Snapshot:
    """A serialized state: ``header`` the pickle stream, ``block`` the out-of-band
    buffers laid end to end (:func:`buffer_offsets`), ``lengths`` their lengths.

    ``buffers`` are the out-of-band buffers (memoryviews into ``block``); ``nbytes`` the
    bytes the snapshot holds. ``block`` is writable memory: loaded arrays are views of it.
    A snapshot pickles (to cross a pipe or the tuple space) with its block as one
    protocol-5 buffer.
    """

    __slots__ = ("header", "block", "lengths", "buffers")

    def __init__(self, header: bytes | memoryview, block: Any, lengths: Sequence[int]) -> None:
        self.header = header
        self.block = memoryview(block).cast("B")
        if self.block.readonly:   # loading would give read-only arrays, and torch refuses them
            raise ValueError("a snapshot's block must be writable memory")
        self.lengths = tuple(lengths)
        offsets, end = buffer_offsets(self.lengths)
        if end != self.block.nbytes:
            raise ValueError(f"a snapshot block of {self.block.nbytes} bytes cannot hold buffers "
                             f"of {list(self.lengths)} bytes laid out in {end} bytes")
        self.buffers = [self.block[start:start + length]
                        for start, length in zip(offsets, self.lengths)]

    @property
    def nbytes(self) -> int:
        return len(self.header) + self.block.nbytes

    def load(self) -> Any:
        """The state this snapshot was taken of (its arrays are views of ``block``)."""
        return _Unpickler(io.BytesIO(self.header), buffers=self.buffers).load()

    def __reduce_ex__(self, protocol: int) -> tuple:
        if protocol < 5:    # a PickleBuffer needs protocol 5: copy into the stream instead
            return Snapshot, (bytes(self.header), bytearray(self.block), self.lengths)
        return Snapshot, (pickle.PickleBuffer(self.header), pickle.PickleBuffer(self.block),
                          self.lengths)

    def __repr__(self) -> str:
        return f"<Snapshot: {len(self.header)} bytes of pickle, {len(self.lengths)} buffers " \
               f"in {self.block.nbytes} bytes>"


def take(state: Any, memory: Callable[[int], Any] | None = None) -> Snapshot:
    """Serialize ``state`` (module docstring), copying its large buffers once.

    Returns once the snapshot owns a copy of everything: the caller may change ``state``
    at once. A state that cannot be pickled raises TypeError naming the first value that
    cannot be (``state['model']['hook']``) and its type. ``memory(nbytes)``, called once
    the state is pickled, gives the writable ``uint8`` array of ``nbytes`` bytes the
    buffers are copied into (a :class:`~diel.checkpoints.pool.BlockPool`'s); by default
    new memory.
    """
    pieces: list[pickle.PickleBuffer] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        if memoryview(buffer).nbytes < IN_BAND_MAX:
            return True     # true: pickle copies it into the stream
        pieces.append(buffer)
        return False

    stream = io.BytesIO()
    try:
        _Pickler(stream, protocol=5, buffer_callback=out_of_band).dump(state)
    except Exception as e:   # pickle raises many types (PicklingError, TypeError, AttributeError, ...)
        raise TypeError(_unpicklable(state, e)) from e
    try:
        return _gather(stream.getvalue(), pieces, memory)
    finally:
        for piece in pieces:
            piece.release()


def _gather(header: bytes, pieces: list[pickle.PickleBuffer],
            memory: Callable[[int], Any] | None) -> Snapshot:
    """The snapshot of ``header`` and the live buffers ``pieces``: one block, one copy of
    each buffer (by NumPy, which lets other threads run meanwhile: the writer's), the
    gaps between them zeroed (no stray memory reaches a file)."""
    import numpy as np   # here, not at the top: a worker rank or child that never
                         # checkpoints starts without NumPy
    raws = [piece.raw() for piece in pieces]
    lengths = [raw.nbytes for raw in raws]
    offsets, end = buffer_offsets(lengths)
    if memory is None or not end:
        block = np.empty(end, np.uint8)   # uninitialized: NumPy's large pages, no zeroing pass
    else:
        block = memory(end)
    filled = 0
    for raw, start, length in zip(raws, offsets, lengths):
        block[filled:start] = 0
        np.copyto(block[start:start + length], np.frombuffer(raw, np.uint8))
        filled = start + length
    return Snapshot(header, block, lengths)


class _Pickler(pickle.Pickler):
    """Protocol 5, with ``bytes``, ``bytearray`` and CPU torch tensors out of band."""

    def persistent_id(self, obj: Any) -> Any:
        # bytes and bytearray never reach reducer_override (pickle's fast path)
        kind = type(obj)
        if (kind is bytes or kind is bytearray) and len(obj) >= IN_BAND_MAX:
            return kind.__name__, pickle.PickleBuffer(obj)
        return None

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")   # a state holds no tensor unless torch is loaded
        if torch is None:
            return NotImplemented
        if type(obj) is torch.Tensor and _plain_cpu_tensor(obj, torch):
            return _rebuild_tensor, (obj.untyped_storage(), obj.storage_offset(), tuple(obj.shape),
                                     obj.stride(), obj.dtype, obj.requires_grad)
        if type(obj) is torch.UntypedStorage and obj.device.type == "cpu":
            raw = torch.empty(0, dtype=torch.uint8).set_(obj).numpy()
            return _rebuild_storage, (pickle.PickleBuffer(raw),)
        return NotImplemented


def _plain_cpu_tensor(tensor: Any, torch: Any) -> bool:
    """A dense CPU tensor whose storage, offset, shape, strides, dtype and requires_grad
    are all of it (anything else goes through torch's own reduction)."""
    return (tensor.device.type == "cpu" and tensor.layout is torch.strided
            and not tensor.is_quantized and not tensor.is_conj() and not tensor.is_neg()
            and (tensor.is_leaf or not tensor.requires_grad) and not tensor.__dict__)


def _rebuild_storage(buffer: Any) -> Any:
    import torch
    if not memoryview(buffer).nbytes:
        return torch.UntypedStorage(0)
    return torch.frombuffer(buffer, dtype=torch.uint8).untyped_storage()


def _rebuild_tensor(storage: Any, offset: int, shape: tuple, stride: tuple, dtype: Any,
                    requires_grad: bool) -> Any:
    import torch
    tensor = torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
    return tensor.requires_grad_(requires_grad)


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        kind, buffer = pid
        if kind == "bytes":
            return bytes(buffer)
        if kind == "bytearray":
            return bytearray(buffer)
        raise pickle.UnpicklingError(f"unknown out-of-band value kind {kind!r}")


def _unpicklable(state: Any, error: Exception) -> str:
    """One line naming the first value of ``state`` that cannot be pickled, and why."""
    where, culprit = _find_unpicklable(state, "state", _SEARCH_DEPTH, set())
    kind = type(culprit)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    reason = clip(" ".join(f"{type(error).__name__}: {error}".splitlines()), LOG_TEXT_CHARS)
    return f"cannot checkpoint {where}: a value of type {name} cannot be pickled ({reason})"


def _find_unpicklable(value: Any, where: str, depth: int, seen: set[int]) -> tuple[str, Any]:
    """The innermost ``(where, value)`` under ``value`` that fails to pickle on its own:
    through dict values, list and tuple items and object attributes."""
    seen.add(id(value))
    if depth > 0:
        for child_where, child in _children(value, where):
            if id(child) not in seen and not _picklable(child):
                return _find_unpicklable(child, child_where, depth - 1, seen)
    return where, value


def _children(value: Any, where: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(f"{where}[{key!r}]", item) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return [(f"{where}.{name}", item) for name, item in attributes.items()]
    return []


def _picklable(value: Any) -> bool:
    try:   # false: buffers go out of band, so nothing large is copied
        _Pickler(io.BytesIO(), protocol=5, buffer_callback=lambda buffer: False).dump(value)
    except Exception:
        return False
    return True
