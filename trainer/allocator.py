"""Allocator: every array a model trains with comes from a MemoryManager of one memory type.

A model's ``memory`` setting picks the type (MagmaDNN's four, see :mod:`trainer.memory`):

* ``host``: NumPy arrays in host memory; the model computes on the CPU.
* ``device``: CuPy arrays in GPU memory (the default on a GPU).
* ``managed``: the model computes on the GPU copy; every kept array also has a host copy,
  brought up to date by :meth:`Allocator.sync_host` (MagmaDNN's explicit sync).
* ``cuda_managed``: CuPy arrays in CUDA unified memory, which the host reads and writes in
  place (after :meth:`Allocator.sync_host` has waited for the device).

The parameters and gradients (the model's fused buffers), the optimizer's state, the
layers' and the loss's activation buffers, the input batch and the host draws of dropout
masks are all made by :meth:`Allocator.manager`, which counts them by role (``param``,
``grad``, ``state``, ``activation``, ``data``, ``staging``). Whoever keeps an array keeps
its MemoryManager (a layer's buffer cache, the update pipeline); ``keep=True`` also lists
it here, so :meth:`sync_host` can find the parameters and optimizer state.

:class:`BufferCache` is the reuse-by-shape cache that layers and losses share.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

import numpy as np

from trainer.errors import ConfigError, MemoryTypeError
from trainer.memory import DeviceOps, MemoryManager, MemoryType, memory_type

__all__ = ["Allocator", "BufferCache", "ROLES", "model_allocator"]

#: What an allocation is for (the counters' keys).
ROLES = ("param", "grad", "state", "activation", "data", "staging")


class Allocator:
    """Makes MemoryManagers of ``mem_type`` on GPU ``device_id`` through ``ops`` (CuPy's
    by default for the GPU types; a NumPy-backed fake lets tests run every type on a CPU).

    ``xp`` is the array module the model computes with: NumPy for HOST, else ``ops.xp``.
    ``allocations`` and ``nbytes`` count what was made, by role.
    """

    def __init__(self, mem_type: MemoryType | str = MemoryType.HOST, device_id: int = 0,
                 ops: DeviceOps | None = None) -> None:
        self.mem_type = memory_type(mem_type)
        self.device_id = int(device_id)
        if self.mem_type is MemoryType.HOST:
            self.ops, self.xp = ops, np
        else:
            if ops is None:
                from trainer.memory import CupyOps  # noqa: PLC0415 - CuPy only when a GPU type is asked for

                ops = CupyOps()
            self.ops, self.xp = ops, ops.xp
        self.allocations: Counter[str] = Counter()
        self.nbytes: Counter[str] = Counter()
        self._kept: list[tuple[str, MemoryManager]] = []

    @classmethod
    def for_arrays(cls, xp: ModuleType) -> Allocator:
        """The plain allocator for arrays of module ``xp``: HOST for NumPy, DEVICE for CuPy
        (what a layer or loss used on its own gets)."""
        return cls(MemoryType.HOST) if xp is np else cls(MemoryType.DEVICE)

    @property
    def is_host(self) -> bool:
        """True when arrays live in host memory and the CPU computes on them."""
        return self.mem_type is MemoryType.HOST

    def manager(self, shape: int | tuple[int, ...], dtype: Any, role: str, zeroed: bool = True,
                keep: bool = False, mem_type: MemoryType | None = None) -> MemoryManager:
        """A new MemoryManager of this allocator's type (or ``mem_type``), counted under
        ``role``; ``keep`` lists it for :meth:`kept` and :meth:`sync_host`."""
        if role not in ROLES:
            raise ValueError(f"unknown allocation role {role!r}: one of {', '.join(ROLES)}")
        memory = MemoryManager(shape, dtype, mem_type or self.mem_type, self.device_id, self.ops, zeroed)
        self.allocations[role] += 1
        self.nbytes[role] += memory.size * memory.dtype.itemsize
        if keep:
            self._kept.append((role, memory))
        return memory

    def empty(self, shape: int | tuple[int, ...], dtype: Any, role: str, keep: bool = False) -> Any:
        """An uninitialised array to compute with (the array of a new MemoryManager)."""
        return self.manager(shape, dtype, role, zeroed=False, keep=keep).array

    def zeros(self, shape: int | tuple[int, ...], dtype: Any, role: str, keep: bool = False) -> Any:
        """A zeroed array to compute with."""
        return self.manager(shape, dtype, role, keep=keep).array

    def staging(self, shape: tuple[int, ...], dtype: Any) -> MemoryManager:
        """Memory the host writes and the device then reads (dropout's host-drawn masks):
        HOST and CUDA_MANAGED memory are one array for both; otherwise MANAGED (a host
        side copied to the device side when it is read)."""
        kind = self.mem_type if self.mem_type in (MemoryType.HOST, MemoryType.CUDA_MANAGED) else MemoryType.MANAGED
        return self.manager(shape, dtype, "staging", zeroed=False, mem_type=kind)

    def load(self, values: Any, dtype: Any, role: str = "data") -> Any:
        """``values`` as an array to compute with in ``dtype``: used as it is when it
        already is one (same module and dtype), else copied into new memory."""
        if isinstance(values, self.xp.ndarray) and values.dtype == np.dtype(dtype) and \
                (self.is_host or not isinstance(values, np.ndarray)):
            return values
        memory = self.manager(values.shape, dtype, role, zeroed=False)
        memory.load(values)
        return memory.array

    def kept(self, role: str | None = None) -> list[MemoryManager]:
        """The MemoryManagers made with ``keep=True`` (of ``role``, or all)."""
        return [m for r, m in self._kept if role is None or r == role]

    def sync_host(self, role: str | None = None) -> None:
        """Make the host side of every kept array (of ``role``) current: MANAGED copies the
        device side over, CUDA_MANAGED waits for the device (the host reads the same
        memory), HOST has nothing to do. DEVICE memory has no host side."""
        if self.mem_type is MemoryType.DEVICE:
            raise ConfigError("memory 'device' has no host copies to sync; use memory 'managed' "
                              "or 'cuda_managed', or copy the arrays to the host with to_numpy")
        for memory in self.kept(role):
            memory.mark_device_modified()
            memory.sync()
            if memory.mem_type is MemoryType.CUDA_MANAGED:
                _ = memory.host  # the view is handed out after the device has finished

    def __repr__(self) -> str:
        made = ", ".join(f"{role} {self.allocations[role]}" for role in ROLES if self.allocations[role])
        return f"Allocator({self.mem_type.value}, device {self.device_id}; {made or 'nothing made'})"


def model_allocator(setting: Any, on_gpu: bool, device_id: int) -> Allocator:
    """The allocator for a model's ``memory`` setting: None picks ``host`` on the CPU and
    ``device`` on a GPU; an :class:`Allocator` is used as it is. A GPU type on the CPU, or
    ``host`` on a GPU, is a :class:`ConfigError` (the arrays must be where the model computes)."""
    if isinstance(setting, Allocator):
        return setting
    try:
        kind = memory_type(setting) if setting is not None else (MemoryType.DEVICE if on_gpu else MemoryType.HOST)
    except MemoryTypeError as e:
        raise ConfigError(f"memory: {e}") from None
    if on_gpu and kind is MemoryType.HOST:
        raise ConfigError("memory 'host' keeps the arrays in host memory, where a GPU model cannot "
                          "compute: use device 'cpu', or memory 'device', 'managed' or 'cuda_managed'")
    if not on_gpu and kind is not MemoryType.HOST:
        raise ConfigError(f"memory {kind.value!r} is GPU memory: use device 'gpu' with it, or "
                          "memory 'host' on the CPU")
    return Allocator(kind, device_id)


class BufferCache:
    """Reused arrays keyed by name, shape and dtype, made by ``self.memory`` (an
    :class:`Allocator`; the plain one for ``self.xp`` when unset).

    A steady batch size reuses the same memory; a returned array is only valid until the
    owner's next call. With ``cache_buffers`` off (host offload) every call makes a fresh
    array, so one that is no longer referenced really frees its memory.
    """

    memory: Allocator | None = None
    xp: ModuleType = np
    dtype: np.dtype = np.dtype(np.float32)
    cache_buffers = True

    def buffer(self, key: str, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """An uninitialised array for ``key`` and ``shape`` (dtype: the owner's)."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        if self.memory is None:
            self.memory = Allocator.for_arrays(self.xp)
        if not self.cache_buffers:
            return self.memory.empty(shape, dtype, "activation")
        buffers = self.__dict__.setdefault("_buffers", {})
        slot = (key, tuple(shape), dtype.str)
        held = buffers.get(slot)
        if held is None:
            memory = self.memory.manager(shape, dtype, "activation", zeroed=False)
            held = buffers[slot] = (memory, memory.array)
        return held[1]

    def staged(self, key: str, shape: tuple[int, ...], dtype: Any) -> MemoryManager:
        """A cached :meth:`Allocator.staging` MemoryManager: the host writes its ``host``
        side, marks it modified, and the device computes with its ``array``."""
        if self.memory is None:
            self.memory = Allocator.for_arrays(self.xp)
        buffers = self.__dict__.setdefault("_buffers", {})
        slot = ("staged", key, tuple(shape), np.dtype(dtype).str)
        memory = buffers.get(slot)
        if memory is None:
            memory = buffers[slot] = self.memory.staging(tuple(shape), dtype)
        return memory

    def clear_buffers(self) -> None:
        """Drop every cached buffer."""
        self.__dict__.get("_buffers", {}).clear()
