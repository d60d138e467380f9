"""MemoryManager: MagmaDNN's four memory types for one block of numbers.

* ``HOST``: a NumPy array in host memory.
* ``DEVICE``: a CuPy array in GPU memory.
* ``MANAGED``: both, kept in step explicitly: after writing one side, mark it modified
  (``mark_host_modified`` / ``mark_device_modified``, or :meth:`set`) and the other side
  is stale; reading a side or calling :meth:`sync` copies only when that side is stale.
* ``CUDA_MANAGED``: one CuPy array from CUDA unified memory (``cudaMallocManaged``), which
  the driver migrates on demand; :meth:`prefetch` moves it ahead of use. As in MagmaDNN
  the host reads and writes the same memory: :attr:`MemoryManager.host` is a NumPy view
  over the same pointer, handed out after the device has finished its queued work.

The GPU work goes through a small :class:`DeviceOps` object (CuPy's by default), so the
copy-only-when-stale bookkeeping can be exercised on a machine without a GPU by passing
an ops object backed by NumPy. Without CuPy, only ``HOST`` is available; the others raise
:class:`MemoryTypeError`. A model allocates all its arrays through MemoryManagers of one
type (see :mod:`trainer.allocator`).
"""

from __future__ import annotations

import ctypes
from enum import Enum
from types import ModuleType
from typing import Any

import numpy as np

from trainer.backend import cupy_or_none, cupy_problem
from trainer.errors import MemoryTypeError

__all__ = ["MemoryType", "MemoryManager", "DeviceOps", "CupyOps", "memory_type"]


class MemoryType(Enum):
    """Where a MemoryManager keeps its data (MagmaDNN's memory_t)."""

    HOST = "host"
    DEVICE = "device"
    MANAGED = "managed"
    CUDA_MANAGED = "cuda_managed"


def memory_type(value: MemoryType | str) -> MemoryType:
    """``value`` as a MemoryType (``host``, ``device``, ``managed``, ``cuda_managed``, any
    case); anything else raises :class:`MemoryTypeError` listing the four."""
    try:
        return MemoryType(value.lower() if isinstance(value, str) else value)
    except ValueError:
        raise MemoryTypeError(f"unknown memory type {value!r}: choose from "
                              f"{', '.join(t.value for t in MemoryType)}") from None


class DeviceOps:
    """What MemoryManager needs from a GPU: allocation, copies each way, prefetch, a host
    view of unified memory, and ``xp``, the array module of its device arrays."""

    xp: ModuleType = np

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, device_id: int) -> Any:
        """Uninitialised device memory."""
        raise NotImplementedError

    def empty_managed(self, shape: tuple[int, ...], dtype: np.dtype, device_id: int) -> Any:
        """Uninitialised unified (CUDA-managed) memory."""
        raise NotImplementedError

    def to_device(self, src: np.ndarray, dst: Any, stream: Any = None) -> None:
        """Copy host ``src`` into device ``dst`` (asynchronous when ``stream`` is given)."""
        raise NotImplementedError

    def to_host(self, src: Any, dst: np.ndarray, stream: Any = None) -> None:
        """Copy device ``src`` into host ``dst``."""
        raise NotImplementedError

    def prefetch(self, array: Any, device_id: int, stream: Any = None) -> None:
        """Start moving unified memory to ``device_id`` ahead of use."""
        raise NotImplementedError

    def host_view(self, array: Any) -> np.ndarray:
        """A NumPy array over the same (unified) memory as ``array``, once the device has
        finished the work queued on it."""
        raise NotImplementedError


class CupyOps(DeviceOps):
    """DeviceOps on CuPy; raises MemoryTypeError when CuPy or a GPU is missing."""

    def __init__(self) -> None:
        self.cp = cupy_or_none()
        if self.cp is None:
            raise MemoryTypeError("DEVICE, MANAGED and CUDA_MANAGED memory need CuPy and a CUDA GPU, "
                                  f"and none was found ({cupy_problem()}); use MemoryType.HOST "
                                  "on this machine")
        self.xp = self.cp
        self._managed_pools: dict[int, Any] = {}  # per GPU: a pool over cudaMallocManaged

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, device_id: int) -> Any:
        with self.cp.cuda.Device(device_id):
            return self.cp.empty(shape, dtype=dtype)

    def empty_managed(self, shape: tuple[int, ...], dtype: np.dtype, device_id: int) -> Any:
        cp = self.cp
        with cp.cuda.Device(device_id):
            pool = self._managed_pools.get(device_id)
            if pool is None:
                pool = self._managed_pools[device_id] = cp.cuda.MemoryPool(cp.cuda.malloc_managed)
            nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
            return cp.ndarray(shape, dtype=dtype, memptr=pool.malloc(nbytes))

    def to_device(self, src: np.ndarray, dst: Any, stream: Any = None) -> None:
        dst.set(src, stream=stream)

    def to_host(self, src: Any, dst: np.ndarray, stream: Any = None) -> None:
        src.get(stream=stream, out=dst)

    def prefetch(self, array: Any, device_id: int, stream: Any = None) -> None:
        ptr = 0 if stream is None else stream.ptr
        self.cp.cuda.runtime.memPrefetchAsync(array.data.ptr, array.nbytes, device_id, ptr)

    def host_view(self, array: Any) -> np.ndarray:
        self.cp.cuda.Device(array.device.id).synchronize()  # no kernel still writes it
        raw = (ctypes.c_char * max(array.nbytes, 1)).from_address(array.data.ptr)
        raw.owner = array  # the view keeps the unified memory alive
        return np.frombuffer(raw, array.dtype, array.size).reshape(array.shape)


class MemoryManager:
    """``shape`` numbers of ``dtype`` in memory of type ``mem_type`` on GPU ``device_id``.

    ``ops`` supplies the GPU operations (default :class:`CupyOps`, made only for non-HOST
    types). The memory starts zeroed unless ``zeroed`` is False (a buffer about to be
    overwritten). ``copies`` counts host/device transfers, so tests can check that nothing
    is copied when both sides are current.
    """

    def __init__(self, shape: int | tuple[int, ...], dtype: Any = np.float32,
                 mem_type: MemoryType | str = MemoryType.HOST, device_id: int = 0,
                 ops: DeviceOps | None = None, zeroed: bool = True) -> None:
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.mem_type = memory_type(mem_type)
        self.device_id = int(device_id)
        self.copies = 0
        self._host: np.ndarray | None = None
        self._device: Any = None
        self._host_stale = self._device_stale = False
        make_host = np.zeros if zeroed else np.empty
        if self.mem_type is MemoryType.HOST:
            self.ops = ops
            self._host = make_host(self.shape, self.dtype)
            return
        self.ops = ops if ops is not None else CupyOps()
        if self.mem_type is MemoryType.CUDA_MANAGED:
            self._device = self.ops.empty_managed(self.shape, self.dtype, self.device_id)
        else:
            self._device = self.ops.empty(self.shape, self.dtype, self.device_id)
        if zeroed:
            self._device[...] = 0
        if self.mem_type is MemoryType.MANAGED:
            self._host = make_host(self.shape, self.dtype)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape))

    # -- the two sides ---------------------------------------------------------------------
    @property
    def host(self) -> np.ndarray:
        """The host array (MANAGED: brought up to date first; CUDA_MANAGED: a view of the
        same memory once the device is idle). DEVICE memory has none."""
        if self.mem_type is MemoryType.DEVICE:
            raise MemoryTypeError("DEVICE memory has no host array; copy it into a HOST "
                                  "MemoryManager with copy_from, or use to_numpy()")
        if self.mem_type is MemoryType.CUDA_MANAGED:
            return self.ops.host_view(self._device)
        if self._host_stale:
            self._pull()
        return self._host

    @property
    def device(self) -> Any:
        """The device array (MANAGED: brought up to date first). HOST memory has none."""
        if self.mem_type is MemoryType.HOST:
            raise MemoryTypeError("HOST memory has no device array; use a DEVICE or MANAGED MemoryManager")
        if self._device_stale:
            self._push()
        return self._device

    @property
    def array(self) -> Any:
        """The array computations use: the host array for HOST, else the device array."""
        return self.host if self.mem_type is MemoryType.HOST else self.device

    def to_numpy(self) -> np.ndarray:
        """A NumPy copy of the current contents, whatever the memory type."""
        if self.mem_type is not MemoryType.DEVICE:
            return self.host.copy()
        out = np.empty(self.shape, self.dtype)
        self.ops.to_host(self._device, out)
        self.copies += 1
        return out

    # -- keeping MANAGED in step -----------------------------------------------------------
    def mark_host_modified(self) -> None:
        """Say the host side was written: the device side is now stale (MANAGED only)."""
        if self.mem_type is MemoryType.MANAGED:
            self._device_stale, self._host_stale = True, False

    def mark_device_modified(self) -> None:
        """Say the device side was written: the host side is now stale (MANAGED only)."""
        if self.mem_type is MemoryType.MANAGED:
            self._host_stale, self._device_stale = True, False

    @property
    def stale(self) -> str | None:
        """``"host"`` or ``"device"`` when that side is out of date, else None."""
        return "host" if self._host_stale else "device" if self._device_stale else None

    def sync(self, stream: Any = None) -> bool:
        """Copy to whichever side is stale (MagmaDNN's sync); True if anything was copied."""
        if self._host_stale:
            self._pull(stream)
            return True
        if self._device_stale:
            self._push(stream)
            return True
        return False

    def prefetch(self, stream: Any = None) -> None:
        """Start moving data to the device ahead of use: an asynchronous copy for a stale
        MANAGED device side, a unified-memory prefetch for CUDA_MANAGED, else nothing."""
        if self.mem_type is MemoryType.CUDA_MANAGED:
            self.ops.prefetch(self._device, self.device_id, stream)
        elif self.mem_type is MemoryType.MANAGED and self._device_stale:
            self._push(stream)

    def _push(self, stream: Any = None) -> None:
        self.ops.to_device(self._host, self._device, stream)
        self.copies += 1
        self._device_stale = False

    def _pull(self, stream: Any = None) -> None:
        self.ops.to_host(self._device, self._host, stream)
        self.copies += 1
        self._host_stale = False

    # -- element access and copies ---------------------------------------------------------
    def get(self, index: int | tuple[int, ...]) -> Any:
        """One element (read from the host side when there is one)."""
        if self.mem_type in (MemoryType.HOST, MemoryType.MANAGED):
            return self.host[index]
        return self._device[index].item()

    def set(self, index: int | tuple[int, ...], value: Any) -> None:
        """Write one element (on the host side when there is one; MANAGED marks it modified)."""
        if self.mem_type in (MemoryType.HOST, MemoryType.MANAGED):
            self.host[index] = value
            self.mark_host_modified()
        else:
            self._device[index] = value

    def fill(self, value: float) -> None:
        """Set every element to ``value``."""
        if self.mem_type in (MemoryType.HOST, MemoryType.MANAGED):
            self.host[...] = value
            self.mark_host_modified()
        else:
            self._device[...] = value

    def load(self, values: Any) -> None:
        """Overwrite the contents with ``values`` (same number of elements; a NumPy array or
        one of the device's arrays; cast to this dtype). Host values are written on the
        host side where there is one, so MANAGED memory marks its device side stale."""
        on_device = self.ops is not None and not isinstance(values, np.ndarray) and \
            isinstance(values, self.ops.xp.ndarray)
        if on_device and self.mem_type is not MemoryType.HOST:
            self._device[...] = values.reshape(self.shape)
            self.mark_device_modified()
        elif self.mem_type is MemoryType.DEVICE:
            self.ops.to_device(np.ascontiguousarray(values, dtype=self.dtype).reshape(self.shape), self._device)
            self.copies += 1
        else:
            np.copyto(self.host, np.asarray(values).reshape(self.shape), casting="unsafe")
            self.mark_host_modified()

    def copy_from(self, other: MemoryManager) -> None:
        """Copy ``other``'s contents in, whatever the two memory types (same size needed)."""
        if other.size != self.size:
            raise MemoryTypeError(f"copy_from: sizes differ ({other.size} into {self.size})")
        src_on_host = other.mem_type is MemoryType.HOST or (
            other.mem_type is MemoryType.MANAGED and not other._host_stale)
        src = other.host if src_on_host else other.device
        src = src.reshape(self.shape)
        if self.mem_type in (MemoryType.HOST, MemoryType.MANAGED):
            if src_on_host:
                np.copyto(self._host, src, casting="unsafe")
            else:
                tmp = np.empty(self.shape, other.dtype)
                other.ops.to_host(src, tmp)
                other.copies += 1
                np.copyto(self._host, tmp, casting="unsafe")
            self._host_stale = False
            self.mark_host_modified()
        elif src_on_host:
            self.ops.to_device(np.ascontiguousarray(src, dtype=self.dtype), self._device)
            self.copies += 1
        else:
            self._device[...] = src
