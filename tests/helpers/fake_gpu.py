"""Stand-ins for a GPU made of NumPy arrays, so the memory types, the allocator and the
offload bookkeeping run on a machine without one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from trainer.memory import DeviceOps


class FakeOps(DeviceOps):
    """A 'device' whose arrays are NumPy arrays (of ``array_type``), counting transfers.
    Unified memory is one array, so its host view is the array itself."""

    def __init__(self, array_type: type = np.ndarray) -> None:
        self.transfers: list[tuple[str, Any]] = []
        self.array_type = array_type

    def empty(self, shape, dtype, device_id):
        array = np.empty(shape, dtype)
        return array if self.array_type is np.ndarray else array.view(self.array_type)

    empty_managed = empty

    def to_device(self, src, dst, stream=None):
        self.transfers.append(("to_device", stream))
        dst[...] = src

    def to_host(self, src, dst, stream=None):
        self.transfers.append(("to_host", stream))
        dst[...] = src

    def prefetch(self, array, device_id, stream=None):
        self.transfers.append(("prefetch", stream))

    def host_view(self, array):
        self.transfers.append(("host_view", None))
        return array


class DeviceArray(np.ndarray):
    """A NumPy array that answers ``.data.ptr`` like a CuPy array."""

    @property
    def data(self):  # noqa: D401 - CuPy's MemoryPointer stand-in
        return SimpleNamespace(ptr=self.ctypes.data)


class FakeEvent:
    """A CUDA event the test completes by hand."""

    def __init__(self) -> None:
        self.done = False


class FakeStream:
    """Records the events it recorded and the events it was told to wait for."""

    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = id(self)
        self.events: list[FakeEvent] = []
        self.waited: list[FakeEvent] = []

    def wait_event(self, event: FakeEvent) -> None:
        self.waited.append(event)

    def record(self) -> FakeEvent:
        self.events.append(FakeEvent())
        return self.events[-1]


class FakeCupy:
    """The part of CuPy that trainer.offload.CupyOffloadOps uses. ``memcpyAsync`` copies at once
    (so values are right) and records the source address of each copy."""

    def __init__(self) -> None:
        compute = FakeStream()
        self.copies: list[tuple[int, int, int]] = []

        def memcpy(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
            import ctypes  # noqa: PLC0415

            ctypes.memmove(dst, src, nbytes)
            self.copies.append((dst, src, nbytes))

        runtime = SimpleNamespace(memcpyAsync=memcpy, memcpyDeviceToHost=2, memcpyHostToDevice=1)
        self.cuda = SimpleNamespace(Stream=FakeStream, get_current_stream=lambda: compute, runtime=runtime,
                                    alloc_pinned_memory=bytearray)
