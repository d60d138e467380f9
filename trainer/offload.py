"""Host offload of saved activations, after IBM's Large Model Support (LMS).

While training, each layer keeps arrays for its backward pass (``Layer.saved_for_backward``
names the attributes). With ``offload`` on a GPU, :class:`Offloader` copies those arrays of
layer ``i - 1`` to pinned host memory once layer ``i`` has run its forward pass (the input
of layer ``i`` is then no longer needed on the device), replacing the attribute by a
:class:`Swapped` handle. The device array is given back one layer later: the compute
stream first waits for its copy (unless it is seen finished), so the copy overlaps one
layer's forward and the memory is reused only after it. Before layer ``i``'s backward
pass it waits for layer ``i``'s arrays to be back and starts bringing back layer
``i - 1``'s, so one copy overlaps one layer's backward (double buffering on a separate
CUDA stream); after its backward a layer lets go of them. Peak device memory then holds
a few layers' saved arrays instead of all.

An array saved by two neighbouring layers (an activation's output is the next dense
layer's input) is copied once and shared. The model turns off its layers' buffer cache
while offloading, so a swapped-out array really is released.

On the CPU there is nothing to offload to and the model ignores the setting. The copies
go through a small ops object (:class:`CupyOffloadOps` on the GPU); :class:`NumpyOffloadOps` does the
same bookkeeping with plain copies, so the swapping logic is tested without a GPU.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from trainer.allocator import Allocator

__all__ = ["Offloader", "Swapped", "CupyOffloadOps", "NumpyOffloadOps"]


class Swapped:
    """A saved array while it lives on the host: ``host`` copy, the device ``array`` when
    it is back (or still being copied out: held until the copy has finished)."""

    def __init__(self, host: Any, source: Any, event: Any) -> None:
        self.host, self.source, self.event = host, source, event
        self.array: Any = None
        self.ready: Any = None


class NumpyOffloadOps:
    """Synchronous stand-in for :class:`CupyOffloadOps` (tests, CPU): copies, no streams."""

    def to_host(self, array: Any, key: Any) -> tuple[Any, Any, Any]:
        """Start copying ``array`` out; ``(host copy, the device array the copy reads,
        completion event)``: the caller keeps that array alive until the event."""
        return np.array(array, copy=True), array, None

    def to_device(self, host: Any) -> tuple[Any, Any]:
        """Start copying ``host`` back; ``(new device array, completion event)``."""
        return np.array(host, copy=True), None

    def done(self, event: Any) -> bool:
        """Whether the copy behind ``event`` has finished."""
        return True

    def wait(self, event: Any) -> None:
        """Make the compute stream wait for ``event``."""


class CupyOffloadOps:
    """Copies on a dedicated non-blocking CUDA stream into reused pinned host buffers; the
    device arrays it makes (contiguous temporaries, arrays brought back) come from
    ``memory`` (the model's :class:`~trainer.allocator.Allocator`)."""

    def __init__(self, cupy: Any, memory: Allocator) -> None:
        self.cp, self.memory = cupy, memory
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._pinned: dict[Any, np.ndarray] = {}

    def _host(self, key: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        host = self._pinned.get(key)
        if host is None or host.shape != shape or host.dtype != dtype:
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            memory = self.cp.cuda.alloc_pinned_memory(max(nbytes, 1))
            host = self._pinned[key] = np.frombuffer(memory, dtype, int(np.prod(shape))).reshape(shape)
        return host

    def to_host(self, array: Any, key: Any) -> tuple[Any, Any, Any]:
        # A non-contiguous array is copied to a contiguous temporary first; the copy out
        # reads that temporary, so it is returned to be held until the copy has finished
        # (freed at once, its memory could be reused by the compute stream mid-copy).
        if not array.flags.c_contiguous:
            contiguous = self.memory.empty(array.shape, array.dtype, "activation")
            contiguous[...] = array
            array = contiguous
        host = self._host(key, array.shape, array.dtype)
        self.stream.wait_event(self.cp.cuda.get_current_stream().record())  # after the forward wrote it
        self.cp.cuda.runtime.memcpyAsync(host.ctypes.data, array.data.ptr, array.nbytes,
                                         self.cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        return host, array, self.stream.record()

    def to_device(self, host: Any) -> tuple[Any, Any]:
        array = self.memory.empty(host.shape, host.dtype, "activation")  # from the compute stream's pool
        self.stream.wait_event(self.cp.cuda.get_current_stream().record())
        self.cp.cuda.runtime.memcpyAsync(array.data.ptr, host.ctypes.data, array.nbytes,
                                         self.cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)
        return array, self.stream.record()

    def done(self, event: Any) -> bool:
        return bool(event.done)

    def wait(self, event: Any) -> None:
        self.cp.cuda.get_current_stream().wait_event(event)


class Offloader:
    """Swaps ``layers``' saved arrays out after the forward pass and back before backward."""

    def __init__(self, layers: Sequence[Any], ops: Any) -> None:
        self.layers, self.ops = list(layers), ops
        self._recent: dict[int, tuple[Any, Swapped]] = {}  # the previous layer's arrays, for sharing
        self._outgoing: list[tuple[int, Swapped]] = []  # (layer, handle) whose device copy is still held
        self.swapped_out = 0  # arrays copied to the host (a count for tests and benchmarks)

    def after_forward(self, index: int) -> None:
        """Layer ``index`` has run forward: swap out layer ``index - 1``'s saved arrays, and
        give back the device memory of the copies started before that."""
        self._release(before=index - 1)
        if index < 1:
            return
        layer, recent = self.layers[index - 1], {}
        for name in getattr(layer, "saved_for_backward", ()):
            array = getattr(layer, name, None)
            if array is None or isinstance(array, Swapped):
                continue
            shared = self._recent.get(id(array))
            if shared is not None and shared[0] is array:
                handle = shared[1]
            else:
                host, source, event = self.ops.to_host(array, (index - 1, name))
                handle = Swapped(host, source, event)
                self._outgoing.append((index - 1, handle))
                self.swapped_out += 1
            recent[id(array)] = (array, handle)
            setattr(layer, name, handle)
        self._recent = recent

    def before_backward(self, index: int) -> None:
        """Bring layer ``index``'s arrays back (waiting for them) and start layer
        ``index - 1``'s copy so it overlaps this layer's backward."""
        self._recent = {}
        self._release(before=len(self.layers))
        self._fetch(index, wait=True)
        if index >= 1:
            self._fetch(index - 1, wait=False)

    def after_backward(self, index: int) -> None:
        """Layer ``index`` has run backward: its saved arrays are no longer needed, so the
        layer lets go of them (they would otherwise stay on the device until the next step)."""
        for name in getattr(self.layers[index], "saved_for_backward", ()):
            setattr(self.layers[index], name, None)

    def _fetch(self, index: int, wait: bool) -> None:
        layer = self.layers[index]
        for name in getattr(layer, "saved_for_backward", ()):
            handle = getattr(layer, name, None)
            if not isinstance(handle, Swapped):
                continue
            if handle.array is None:  # same stream as the copy out, so it runs after it
                handle.array, handle.ready = self.ops.to_device(handle.host)
            if wait:
                if handle.ready is not None:
                    self.ops.wait(handle.ready)
                setattr(layer, name, handle.array)

    def _release(self, before: int) -> None:
        """Give back the device arrays swapped out of layers before ``before``. A copy that
        may still be reading one first makes the compute stream wait for it: CuPy's pool
        hands freed memory only to later work on the stream that allocated it (the compute
        stream), which then runs after the copy. Host Python runs far ahead of the GPU, so
        waiting for copies to be seen finished would keep every array until the backward."""
        pending = []
        for layer, handle in self._outgoing:
            if layer >= before:
                pending.append((layer, handle))
                continue
            if handle.event is not None and not self.ops.done(handle.event):
                self.ops.wait(handle.event)
            handle.source = None
        self._outgoing = pending
